// The model's answers as markdown, drawn safely: markdown-it with raw HTML off (a tag in the
// text is shown as text), its own link check (no javascript:, vbscript: or file: links, and
// data: only for images), and every link opening in a new tab without a hold on this page.
// The page's Content-Security-Policy stops any script and any image from elsewhere besides.

import markdownit from "./vendor/markdown-it.min.js"; // markdown-it 15.0.3, its browser build

const md = markdownit({ html: false, linkify: true, typographer: false });

md.renderer.rules.link_open = (tokens, i, options, env, self) => {
  tokens[i].attrSet("target", "_blank");
  tokens[i].attrSet("rel", "noopener noreferrer");
  return self.renderToken(tokens, i, options);
};

/** Draw `source` (markdown) as the content of `node`, in place of what it held. */
export function showMarkdown(node, source) {
  node.innerHTML = md.render(source).trimEnd(); // its last newline is no part of the text
}
