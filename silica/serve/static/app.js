// The silica serve page: the HTTP API through fetch, a session's events through EventSource.
// Text from tools and files is only ever inserted as text nodes, never parsed as HTML; the
// model's answers are markdown, drawn by markdown.js with raw HTML turned off.

import { makeApprovals } from "./approvals.js";
import { showMarkdown } from "./markdown.js";
import { showApp, teardownApps } from "./apps.js";

const $ = (id) => document.getElementById(id);
const log = $("log");
const prompt = $("prompt");
const previews = $("previews");
const composerError = $("composer-error");
const turnStatus = $("turn-status");
const LIST_REFRESH_MS = 4000; // sessions started elsewhere (the CLI, a script) show up this fast

const state = {
  sid: null, // the open session
  source: null, // its EventSource
  lastId: "", // the id of the last event it had: a new connection resumes after it
  ready: Promise.resolve(), // resolves once the event stream is open
  loading: false, // history is being drawn: events wait in `queue`
  queue: [],
  turns: new Map(), // turn key -> {root, text, tools: Map(call_id -> view), images: Set}
  attachments: [], // {file, name, url, li, note}
  ended: new Set(), // turns that have ended (turn_end or error)
  listed: "", // the last sessions list drawn, to redraw only on change
  elsewhere: false, // the history said a turn runs, and none of its events came here
  sending: false,
  asks: new Map(), // open elicitation id -> its form
  untitled: false, // the open session was just made: the list has no name for it yet
};

/** An element; string children become text nodes (safe), attributes are set as given. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === true) node.setAttribute(key, "");
    else if (value !== false && value != null) node.setAttribute(key, String(value));
  }
  node.append(...children.filter((c) => c != null && c !== false));
  return node;
}

class ApiError extends Error {
  constructor(status, code, message, field = "") {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field; // the field of a form the daemon found at fault, if any
  }
}

/** Call the API; a failure becomes an ApiError carrying the daemon's own message. */
async function api(path, { method = "GET", json, body } = {}) {
  const init = { method, headers: { accept: "application/json" }, body };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["content-type"] = "application/json";
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch {
    throw new ApiError(0, "unreachable", "silica serve does not answer: is it still running?");
  }
  const data = await res.json().catch(() => null);
  if (res.ok) return data;
  if (res.status === 401) {
    throw new ApiError(401, "unauthorized",
      "This daemon needs its token: reload the page to enter it, or open the link that " +
      "silica serve printed (with ?token=).");
  }
  const err = (data && data.error) || {};
  throw new ApiError(res.status, err.code || `http_${res.status}`,
    err.message || `The daemon answered HTTP ${res.status}.`, err.field || "");
}

const sessionPath = (sid, rest = "") => `/sessions/${encodeURIComponent(sid)}${rest}`;
const approvals = makeApprovals({ el, answer: (id, decision) => api(sessionPath(state.sid,
  `/approvals/${encodeURIComponent(id)}`), { method: "POST", json: { decision } }) });
const toolBox = (view, callId) => view.tools.get(callId)?.details || view.root;

// -- the sessions list ------------------------------------------------------------------

function describe(s) {
  const parts = [`${s.messages} message${s.messages === 1 ? "" : "s"}`];
  if (s.images) parts.push(`${s.images} image${s.images === 1 ? "" : "s"}`);
  const when = new Date(s.updated);
  if (!Number.isNaN(when.getTime())) parts.push(when.toLocaleString());
  if (s.running) parts.push("running");
  return parts.join(" · ");
}

/** A session's name: its first message (the daemon's title), else what it is. */
function titleOf(s) {
  if (s.title) return s.title;
  if (s.problem) return "Unreadable session";
  if (!s.messages) return s.id === state.sid ? "New session" : "Empty session";
  return "Session without text";
}

async function refreshSessions() {
  let sessions;
  try {
    ({ sessions } = await api("/sessions"));
  } catch (err) {
    $("sessions-status").textContent = err.message;
    return;
  }
  $("sessions-status").textContent = sessions.length ? "" : "No sessions yet.";
  const current = sessions.find((s) => s.id === state.sid);
  if (current && state.elsewhere && !current.running && !state.loading) {
    state.elsewhere = false; // a turn run by another process (silica chat) has ended
    openSession(state.sid, { reconnect: true });
  }
  const drawn = JSON.stringify([state.sid, sessions]);
  if (drawn === state.listed) return; // redrawing would move the keyboard focus for nothing
  state.listed = drawn;
  const focused = document.activeElement?.closest?.("#sessions li");
  const refocus = focused && [focused.dataset.sid, document.activeElement.className];
  $("sessions").replaceChildren(...sessions.map((s) => el("li", { "data-sid": s.id },
    el("button", { type: "button", class: "open",
      "aria-current": s.id === state.sid ? "true" : false },
      el("span", { class: "title" }, titleOf(s)), el("span", { class: "meta" }, describe(s))),
    el("button", { type: "button", class: "delete", "aria-label": `Delete ${titleOf(s)}`,
      title: "Delete this session and its images" }, "✕"))));
  if (refocus) {
    const li = [...$("sessions").children].find((item) => item.dataset.sid === refocus[0]);
    li?.querySelector(`button.${refocus[1].split(" ")[0]}`)?.focus();
  }
  if (current) $("session-title").textContent = titleOf(current);
}

$("sessions").addEventListener("click", async (event) => {
  const button = event.target.closest("button");
  const sid = button?.closest("li")?.dataset.sid;
  if (!sid) return;
  if (button.classList.contains("open")) {
    showList(false);
    if (sid === state.sid) openSession(sid, { reconnect: true }); // drawn again, from disk
    else select(sid);
    return;
  }
  const title = button.closest("li").querySelector(".title").textContent;
  if (!confirm(`Delete “${title}” and its images?`)) return;
  try {
    await api(sessionPath(sid), { method: "DELETE" });
    if (sid === state.sid) location.hash = "";
  } catch (err) {
    $("sessions-status").textContent = err.message;
  }
  refreshSessions();
});

// On a narrow screen the list is folded behind a button, and folds again once used.
const aside = document.querySelector("aside");
function showList(open) {
  aside.classList.toggle("open", open);
  $("sessions-toggle").setAttribute("aria-expanded", String(open));
  $("sessions-toggle").textContent = open ? "Hide list" : "Show list";
}
$("sessions-toggle").addEventListener("click", () => showList(!aside.classList.contains("open")));
window.addEventListener("hashchange", () => showList(false));

// A new session is only a draft until its first message: nothing is saved before that.
$("new-session").addEventListener("click", () => {
  showList(false);
  if (location.hash.slice(1)) location.hash = ""; // followHash draws the draft
  else if (state.sid) draft();
  prompt.focus();
});

// -- drawing a conversation ---------------------------------------------------------------

/** Keep the log scrolled to the end while the reader is at the end. */
function update(draw) {
  const follow = log.scrollHeight - log.scrollTop - log.clientHeight < 120;
  draw();
  if (follow) log.scrollTop = log.scrollHeight;
}

function turnView(key) {
  let view = state.turns.get(key);
  if (!view) {
    view = { root: el("article", { class: "turn" }), text: null, tools: new Map(),
      images: new Set() };
    log.append(view.root);
    state.turns.set(key, view);
  }
  return view;
}

/** A lazy-loaded image; a click (or Enter) shows it at full size. */
function picture(image) {
  const alt = image.alt || image.alt_text || image.name || "image";
  const img = el("img", { loading: "lazy", decoding: "async", alt, src: image.url,
    width: image.width, height: image.height });
  return el("button", { type: "button", class: "thumb", "data-url": image.url,
    "aria-label": `Show full size: ${alt}` }, img);
}

function userMessage(view, text, images = []) {
  view.text = null;
  view.root.append(el("div", { class: "msg user" },
    el("h3", { class: "who" }, "You"),
    text ? el("p", { class: "text" }, text) : null,
    images.length ? el("div", { class: "images" }, ...images.map(picture)) : null));
}

function appendText(view, text) {
  if (!view.text) {
    view.text = el("div", { class: "text markdown" });
    view.text.source = "";
    view.root.append(el("div", { class: "msg assistant" }, view.text));
  }
  view.text.source += text;
  drawLater(view.text);
}

// A streamed answer is drawn again as a whole, as markdown, at most every DRAW_MS, and
// less often as drawing it takes longer (a long answer): drawing then keeps at most a fifth
// of the page's time, however fast the pieces come.
const DRAW_MS = 50;
const undrawn = new Set();
let drawTimer = null;
let drawCost = 0; // milliseconds the last drawing took

function drawLater(node) {
  undrawn.add(node);
  drawTimer ??= setTimeout(drawNow, Math.max(DRAW_MS, 4 * drawCost));
}

function drawNow() {
  clearTimeout(drawTimer);
  drawTimer = null;
  const start = performance.now();
  update(() => {
    for (const node of undrawn) showMarkdown(node, node.source);
    undrawn.clear();
  });
  drawCost = performance.now() - start;
}

/** A tool's box: open, its output (images first) on show, its input folded below it. */
function toolCall(view, callId, name, input) {
  view.text = null;
  const state_ = el("span", { class: "state" }, "running…");
  const output = el("div", { class: "output" });
  const details = el("details", { class: "tool", open: true },
    el("summary", {}, el("span", { class: "name" }, name || "tool"), " ", state_),
    output,
    el("details", { class: "input" }, el("summary", {}, "Input"),
      el("pre", { class: "input" }, JSON.stringify(input ?? {}, null, 2))));
  view.root.append(details);
  const tool = { details, state: state_, output };
  view.tools.set(callId, tool);
  return tool;
}

function toolResult(view, { call_id, name, is_error, text, images = [] }) {
  const tool = view.tools.get(call_id) || toolCall(view, call_id, name, {});
  const count = images.length ? ` · ${images.length} image${images.length > 1 ? "s" : ""}` : "";
  tool.state.textContent = (is_error ? "failed" : "done") + count;
  tool.details.classList.toggle("error", Boolean(is_error));
  const shown = [images.length ? el("div", { class: "images" }, ...images.map(picture)) : null,
    text ? el("pre", { class: "result" }, text) : null];
  tool.output.replaceChildren(...shown.filter(Boolean)); // a null would show as "null"
  if (!text && !images.length) tool.output.append(el("p", { class: "meta" }, "(no output)"));
  for (const image of images) view.images.add(image.image_id);
  showApp(tool.output, { sid: state.sid, callId: call_id, name, api }); // an MCP App, if any
}

function note(view, className, text) {
  view.text = null;
  view.root.append(el("p", { class: className }, text));
}

function renderHistory(history) {
  teardownApps();
  state.turns.clear();
  log.replaceChildren();
  $("session-title").textContent = titleOf({ id: history.session_id, title: history.title,
    messages: history.messages.length });
  $("session-meta").textContent = [history.provider, history.model].filter(Boolean).join(" · ");
  for (const message of history.messages) {
    const view = turnView(`history:${message.turn}`);
    const content = message.content || [];
    if (message.role === "user") {
      const text = content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
      const images = content.filter((c) => c.type === "image_ref");
      if (text || images.length) userMessage(view, text, images);
      for (const r of content.filter((c) => c.type === "tool_result")) {
        const parts = r.content || [];
        toolResult(view, { ...r,
          text: parts.filter((c) => c.type === "text").map((c) => c.text).join("\n"),
          images: parts.filter((c) => c.type === "image_ref") });
      }
      continue;
    }
    for (const item of content) {
      if (item.type === "text") appendText(view, item.text);
      else if (item.type === "tool_call") toolCall(view, item.id, item.name, item.input);
      else if (item.type === "image_ref") view.root.append(picture(item));
    }
  }
  approvals.clear();
  for (const a of history.approvals || []) {
    approvals.restore(a, toolBox(turnView(`history:${a.turn}`), a.call_id));
  }
  state.asks.clear();
  for (const ask of history.elicitations || []) {
    const view = turnView(`history:${ask.turn}`);
    if (ask.action) askDone(view, ask);
    else askForm(view, ask);
  }
  for (const turn of history.turns || []) {
    const view = turnView(`history:${turn.turn}`);
    if (turn.status === "interrupted") note(view, "meta", "This turn was interrupted.");
    if (turn.usage) note(view, "usage", usageLine(turn)); // as turn_end drew it
  }
  drawNow();
  if (!history.messages.length) log.append(el("p", { class: "hint" }, "Say something to begin."));
  busy(Boolean(history.running));
  state.elsewhere = Boolean(history.running);
  log.scrollTop = log.scrollHeight;
}

// -- a tool asks for values (elicitation) --------------------------------------------------

const DONE_WORDS = { accept: "accepted", decline: "declined", cancel: "cancelled" };

/** The choices of an enum or multi-select field: [value, label] (silica.mcp.elicit.choices). */
function choicesOf(prop) {
  const source = prop.type === "array" ? prop.items || {} : prop;
  if (source.enum) return source.enum.map((v, i) => [v, (source.enumNames || source.enum)[i]]);
  return (source.oneOf || source.anyOf || []).map((o) => [o.const, o.title ?? o.const]);
}

function kindOf(prop) {
  if (prop.type === "array") return "multi";
  if (prop.enum || prop.oneOf) return "enum";
  return prop.type;
}

const INPUT_TYPES = { email: "email", uri: "url", date: "date" };

/** One field of the form: its label (title, required mark), description and input. */
function askField(formId, name, prop, required, index) {
  const id = `${formId}-${index}`;
  const kind = kindOf(prop);
  const title = prop.title || name;
  const mark = required ? el("span", { class: "required", "aria-hidden": "true" }, " *") : null;
  const description = prop.description
    ? el("p", { class: "description meta", id: `${id}-about` }, prop.description) : null;
  const about = description ? `${id}-about` : false;
  let input;
  if (kind === "multi") {
    const picked = new Set(prop.default || []);
    input = el("fieldset", { class: "choices", "aria-describedby": about },
      el("legend", {}, title, mark),
      ...choicesOf(prop).map(([value, label], i) => el("label", {},
        el("input", { type: "checkbox", name, value, id: `${id}-${i}`,
          checked: picked.has(value) }), " ", label)));
    return el("div", { class: "field", "data-name": name, "data-kind": kind }, input, description);
  }
  if (kind === "enum") {
    input = el("select", { id, name, required, "aria-describedby": about },
      (required && prop.default !== undefined) ? null : el("option", { value: "" }, "—"),
      ...choicesOf(prop).map(([value, label]) => el("option", { value,
        selected: value === prop.default }, label)));
  } else if (kind === "boolean") {
    input = el("input", { type: "checkbox", id, name, checked: prop.default === true,
      "aria-describedby": about });
  } else if (kind === "number" || kind === "integer") {
    input = el("input", { type: "number", id, name, required, min: prop.minimum,
      max: prop.maximum, step: kind === "integer" ? 1 : "any", value: prop.default,
      "aria-describedby": about });
  } else {
    input = el("input", { type: INPUT_TYPES[prop.format] || "text", id, name, required,
      minlength: prop.minLength, maxlength: prop.maxLength, value: prop.default,
      "aria-describedby": about });
  }
  const label = el("label", { for: id }, title, mark);
  return el("div", { class: `field ${kind}`, "data-name": name, "data-kind": kind },
    kind === "boolean" ? el("span", {}, input, " ", label) : label,
    kind === "boolean" ? null : input, description);
}

/** What the form holds, as the answer's content (the daemon checks and converts it). */
function askContent(form) {
  const content = {};
  for (const field of form.querySelectorAll(".field")) {
    const { name, kind } = field.dataset;
    if (kind === "multi") {
      const picked = [...field.querySelectorAll("input:checked")].map((i) => i.value);
      if (picked.length || form.ask.schema.required?.includes(name)) content[name] = picked;
    } else if (kind === "boolean") {
      content[name] = field.querySelector("input").checked;
    } else {
      const value = field.querySelector("input, select").value;
      if (value !== "") content[name] = value;
    }
  }
  return content;
}

/** A tool's request for values, as a form in the conversation. */
function askForm(view, ask) {
  if (state.asks.has(ask.id)) return;
  view.text = null;
  const formId = `ask-${ask.id}`;
  const schema = ask.schema || {};
  const required = new Set(schema.required || []);
  const problem = el("p", { class: "problem refusal", role: "alert" });
  const form = el("form", { class: "elicitation", "aria-labelledby": `${formId}-title`,
    novalidate: true },
    el("h4", { id: `${formId}-title` }, `${ask.source || "A tool"} asks`),
    el("p", { class: "message" }, ask.message || ""),
    ...Object.entries(schema.properties || {}).map(([name, prop], i) =>
      askField(formId, name, prop, required.has(name), i)),
    problem,
    el("div", { class: "actions" },
      el("button", { type: "submit", value: "accept", class: "accept" }, "Accept"),
      el("button", { type: "submit", value: "decline" }, "Decline"),
      el("button", { type: "submit", value: "cancel" }, "Cancel")));
  form.ask = ask;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    answerAsk(form, event.submitter?.value || "accept");
  });
  state.asks.set(ask.id, form);
  view.root.append(form);
}

async function answerAsk(form, action) {
  const { ask } = form;
  const problem = form.querySelector(".problem");
  const body = action === "accept" ? { action, content: askContent(form) } : { action };
  for (const bad of form.querySelectorAll("[aria-invalid]")) bad.removeAttribute("aria-invalid");
  problem.textContent = "";
  form.inert = true; // one answer at a time
  try {
    await api(sessionPath(state.sid, `/elicitations/${encodeURIComponent(ask.id)}`),
      { method: "POST", json: body });
    problem.textContent = ""; // the elicitation_done event replaces the form
  } catch (err) {
    form.inert = false;
    problem.textContent = err.message;
    if (err.status === 404 || err.status === 409) return; // it is over: the event says how
    const field = err.field && [...form.querySelectorAll(".field")]
      .find((f) => f.dataset.name === err.field);
    const input = field?.querySelector("input, select");
    if (input) {
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  }
}

function askDoneNote(ask, done) {
  const word = DONE_WORDS[done.action] || done.action;
  return el("p", { class: "elicitation-done meta" },
    `${ask.source || "A tool"} asked: “${ask.message || ""}” — ${word}`,
    done.reason ? ` (${done.reason})` : "");
}

function askDone(view, ask) {
  view.text = null;
  view.root.append(askDoneNote(ask, ask));
}

// -- events ----------------------------------------------------------------------------

function usageLine({ usage = {}, stop_reason }) {
  const parts = [`${usage.input_tokens ?? 0} in`, `${usage.output_tokens ?? 0} out`];
  if (usage.cache_read_tokens) parts.push(`${usage.cache_read_tokens} cache read`);
  if (usage.cache_write_tokens) parts.push(`${usage.cache_write_tokens} cache write`);
  const stop = stop_reason && stop_reason !== "end_turn" ? ` · stopped: ${stop_reason}` : "";
  return `tokens: ${parts.join(", ")}${stop}`;
}

const handlers = {
  message(d) {
    log.querySelector(".hint")?.remove();
    userMessage(turnView(d.turn_id), d.text, d.images || []);
    busy(true);
  },
  text_delta: (d) => appendText(turnView(d.turn_id), d.text),
  tool_call: (d) => toolCall(turnView(d.turn_id), d.call_id, d.name, d.input),
  tool_result: (d) => toolResult(turnView(d.turn_id), d),
  tool_note(d) { // something the daemon says of a result (it could not keep an image...)
    const tool = turnView(d.turn_id).tools.get(d.call_id);
    if (tool) tool.output.append(el("p", { class: "meta" }, d.text));
  },
  image(d) {
    const view = turnView(d.turn_id);
    if (view.images.has(d.image_id)) return; // already shown with its tool result
    view.images.add(d.image_id);
    view.text = null;
    view.root.append(picture(d));
  },
  elicitation: (d) => askForm(turnView(d.turn_id), d),
  approval: (d) => approvals.show(toolBox(turnView(d.turn_id), d.call_id), d),
  approval_done: (d) => approvals.done(d),
  elicitation_done(d) {
    const form = state.asks.get(d.id);
    if (!form) return;
    state.asks.delete(d.id);
    form.replaceWith(askDoneNote(form.ask, d));
  },
  reset() { // the daemon no longer keeps what came after our last event: redraw
    if (state.sid) openSession(state.sid, { reconnect: true });
  },
  turn_end(d) {
    state.ended.add(d.turn_id);
    if (undrawn.size) drawNow(); // the whole answer, at once
    note(turnView(d.turn_id), "usage", usageLine(d));
    busy(false);
    refreshSessions();
  },
  error(d) {
    state.ended.add(d.turn_id);
    note(turnView(d.turn_id || "errors"), "error", `Error: ${d.message || d.code}`);
    busy(false);
  },
};

/** While a turn runs, screen readers wait for the whole answer instead of every piece. */
function busy(running) {
  log.setAttribute("aria-busy", String(running));
  turnStatus.textContent = running ? "The model is answering…" : "";
}

function receive(name, data) {
  state.elsewhere = false;
  if (state.untitled && name !== "message") { // its first message is saved by now: its name
    state.untitled = false;
    refreshSessions();
  }
  if (state.loading) state.queue.push([name, data]);
  else update(() => handlers[name](data));
}

const RECONNECT_MS = 2000; // a stream the browser gave up on is opened again this soon

/** Follow the session's events. A dropped connection resumes after the last event had: the
 * browser sends it as Last-Event-ID; a stream it gave up on is opened again with ?after=. */
function connect(sid) {
  state.source?.close();
  const after = state.lastId ? `?after=${encodeURIComponent(state.lastId)}` : "";
  const source = new EventSource(sessionPath(sid, "/events") + after);
  state.source = source;
  state.ready = new Promise((resolve) => source.addEventListener("open", resolve, { once: true }));
  for (const name of Object.keys(handlers)) {
    source.addEventListener(name, (event) => {
      if (source !== state.source || typeof event.data !== "string") {
        if (name === "error" && source === state.source
            && source.readyState === EventSource.CLOSED) {
          turnStatus.textContent = "Lost the event stream: reconnecting…";
          setTimeout(() => { if (state.source === source) connect(sid); }, RECONNECT_MS);
        }
        return; // the connection's own error event (EventSource reconnects by itself)
      }
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      if (event.lastEventId) state.lastId = event.lastEventId;
      if (turnStatus.textContent.startsWith("Lost the event stream")) turnStatus.textContent = "";
      receive(name, data);
    });
  }
}

async function openSession(sid, { reconnect = false } = {}) {
  if (!reconnect) {
    state.sid = sid; // the draft (text and images) stays: it may be meant for this one
    state.lastId = "";
    composerError.textContent = "";
    $("composer").hidden = false;
    connect(sid);
  }
  state.loading = true;
  state.queue = [];
  try {
    const history = await api(sessionPath(sid, "/history"));
    if (state.sid !== sid) return;
    renderHistory(history);
  } catch (err) {
    if (state.sid !== sid) return;
    log.replaceChildren(el("p", { class: "error" }, err.message));
    if (err.status === 404) {
      state.source?.close();
      $("composer").hidden = true;
    }
  } finally {
    if (state.sid === sid) {
      state.loading = false;
      if (state.queue.length) state.elsewhere = false;
      for (const [name, data] of state.queue.splice(0)) update(() => handlers[name](data));
    }
  }
  state.listed = "";
  refreshSessions();
}

/** No session open: the composer starts a new one with its first message. */
function draft() {
  teardownApps("the session was closed");
  state.source?.close();
  state.source = null;
  state.sid = null;
  state.turns.clear();
  $("composer").hidden = false;
  $("session-title").textContent = "New session";
  $("session-meta").textContent = "";
  turnStatus.textContent = "";
  log.replaceChildren(el("p", { class: "hint" },
    "Say something to start a new session, or choose one from the list."));
  state.listed = "";
  refreshSessions();
}

/** Save a new session for the draft's first message and listen to it (it has no history). */
async function startSession() {
  const { session_id: sid } = await api("/sessions", { method: "POST", json: {} });
  state.sid = sid;
  state.untitled = true;
  state.lastId = "";
  connect(sid);
  window.history.replaceState(null, "", `#${encodeURIComponent(sid)}`); // open: no redraw
  return sid;
}

/** The session made for a first message that was refused: removed, back to the draft. */
async function unmake(sid) {
  await api(sessionPath(sid), { method: "DELETE" }).catch(() => {});
  if (state.sid !== sid) return;
  state.source?.close();
  state.source = null;
  state.sid = null;
  window.history.replaceState(null, "", location.pathname);
  state.listed = "";
  refreshSessions();
}

/** Open a session and keep its id in the URL, so that a reload comes back to it. */
function select(sid) {
  if (sid !== state.sid) openSession(sid);
  if (location.hash.slice(1) !== encodeURIComponent(sid)) location.hash = encodeURIComponent(sid);
}

function followHash() {
  const sid = decodeURIComponent(location.hash.slice(1));
  if (!sid) draft();
  else if (sid !== state.sid) openSession(sid);
}

// -- images to send ------------------------------------------------------------------------

function uniqueName(name) {
  const taken = new Set(state.attachments.map((a) => a.name));
  if (!taken.has(name)) return name;
  const dot = name.lastIndexOf(".");
  const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ""];
  let n = 2;
  while (taken.has(`${stem}-${n}${ext}`)) n += 1;
  return `${stem}-${n}${ext}`;
}

function addFiles(files) {
  for (const file of files) {
    if (file.type && !file.type.startsWith("image/")) {
      composerError.textContent = `${file.name} is not an image: attach PNG, JPEG, GIF or WebP.`;
      continue;
    }
    const ext = (file.type.split("/")[1] || "png").replace("jpeg", "jpg").split("+")[0];
    const name = uniqueName(file.name && file.name !== "image.png" ? file.name : `pasted.${ext}`);
    const url = URL.createObjectURL(file);
    const noteEl = el("p", { class: "refusal" });
    const img = el("img", { src: url, alt: `Preview of ${name}` });
    // what the browser cannot draw says so in words, never as a broken-image icon
    img.addEventListener("error", () => img.replaceWith(noPreview()), { once: true });
    const li = el("li", {},
      img,
      el("span", { class: "name" }, name),
      el("button", { type: "button", class: "remove", "aria-label": `Remove ${name}` }, "✕"),
      noteEl);
    const attachment = { file, name, url, li, note: noteEl };
    li.querySelector("button").addEventListener("click", () => removeAttachment(attachment));
    state.attachments.push(attachment);
    previews.append(li);
  }
}

const noPreview = () => el("span", { class: "no-preview meta" }, "No preview");

function removeAttachment(attachment) {
  const i = state.attachments.indexOf(attachment);
  if (i < 0) return;
  state.attachments.splice(i, 1);
  URL.revokeObjectURL(attachment.url);
  attachment.li.remove();
  const next = state.attachments[i] || state.attachments[i - 1];
  (next ? next.li.querySelector("button") : prompt).focus();
  if (!state.attachments.some((a) => a.note.textContent)) composerError.textContent = "";
}

function clearAttachments() {
  for (const a of state.attachments) URL.revokeObjectURL(a.url);
  state.attachments = [];
  previews.replaceChildren();
}

/** Show a refusal next to the image it names ("image 2 (...)"), or next to the composer. */
function showRefusal(err) {
  for (const a of state.attachments) a.note.textContent = "";
  const index = /^image (\d+)\b/.exec(err.message);
  const named = index ? state.attachments[Number(index[1]) - 1]
    : state.attachments.filter((a) => err.message.includes(a.name))
      .sort((a, b) => b.name.length - a.name.length)[0];
  if (named) {
    named.note.textContent = err.message;
    named.li.classList.add("refused");
    named.li.querySelector("img")?.remove(); // the reason below takes its place
    composerError.textContent = `${named.name} was refused; remove it or replace it to send.`;
  } else {
    composerError.textContent = err.message;
  }
}

$("files").addEventListener("change", (event) => {
  addFiles(event.target.files);
  event.target.value = ""; // the same file may be chosen again
});

document.addEventListener("paste", (event) => {
  if ($("composer").hidden) return;
  const items = [...(event.clipboardData?.items || [])];
  const files = items.filter((i) => i.kind === "file").map((i) => i.getAsFile()).filter(Boolean);
  if (!files.length) return; // plain text pastes as usual
  event.preventDefault();
  addFiles(files);
});

const main = document.querySelector("main");
main.addEventListener("dragover", (event) => {
  if ($("composer").hidden || !event.dataTransfer.types.includes("Files")) return;
  event.preventDefault();
  main.classList.add("dropping");
});
main.addEventListener("dragleave", (event) => {
  if (!main.contains(event.relatedTarget)) main.classList.remove("dropping");
});
main.addEventListener("drop", (event) => {
  main.classList.remove("dropping");
  if ($("composer").hidden || !event.dataTransfer.files.length) return;
  event.preventDefault();
  addFiles(event.dataTransfer.files);
});

// -- sending ---------------------------------------------------------------------------

async function send() {
  const text = prompt.value;
  if (state.sending || (!text.trim() && !state.attachments.length)) return;
  state.sending = true;
  composerError.textContent = "";
  const form = new FormData();
  form.append("message", text);
  for (const a of state.attachments) form.append("images[]", a.file, a.name);
  let sid = state.sid;
  let made = null; // the session this message starts, if it is a draft's first
  try {
    if (!sid) sid = made = await startSession();
    // the stream should be open before the turn starts, so that no event is missed
    await Promise.race([state.ready, new Promise((r) => setTimeout(r, 3000))]);
    const { turn_id } = await api(sessionPath(sid, "/messages"), { method: "POST", body: form });
    if (state.sid === sid) {
      prompt.value = "";
      clearAttachments();
      if (!state.ended.has(turn_id)) busy(true); // a quick turn may have ended already
    }
    if (made) refreshSessions();
  } catch (err) {
    if (made) await unmake(made); // no empty session is left behind
    showRefusal(err);
  } finally {
    state.sending = false;
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

prompt.addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
  if (event.ctrlKey || event.altKey || event.metaKey) return;
  event.preventDefault();
  send();
});

// -- the full-size viewer ------------------------------------------------------------------

const viewer = $("viewer");
let opener = null;
log.addEventListener("click", (event) => {
  const thumb = event.target.closest("button.thumb");
  if (!thumb) return;
  opener = thumb;
  $("viewer-img").src = thumb.dataset.url;
  $("viewer-img").alt = thumb.querySelector("img").alt;
  viewer.showModal();
});
viewer.addEventListener("click", (event) => {
  if (event.target === viewer) viewer.close(); // a click on the backdrop
});
viewer.addEventListener("close", () => {
  $("viewer-img").removeAttribute("src");
  opener?.focus();
});

// -- start -------------------------------------------------------------------------------

window.addEventListener("hashchange", followHash);
window.addEventListener("focus", refreshSessions);
setInterval(() => {
  if (document.visibilityState === "visible") refreshSessions();
}, LIST_REFRESH_MS);
followHash(); // draws the sessions list too
