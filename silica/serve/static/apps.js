// MCP Apps in the page: a tool's app, shown under its result, in the sandbox page that the
// daemon serves on its other loopback name (127.0.0.1 <-> localhost: another origin, and no
// token cookie). The app talks JSON-RPC over postMessage (extension io.modelcontextprotocol/ui);
// only messages from a frame made here, from the sandbox's origin, are read.

const OTHER_NAME = { "127.0.0.1": "localhost", "[::1]": "localhost", localhost: "127.0.0.1" };
const PROTOCOL = "2026-01-26";
const MIN_HEIGHT = 60;
const MAX_HEIGHT = 800;
const bridges = new Set();

/** The sandbox's origin for this page, or null (a page not on a loopback name has none). */
export function sandboxOrigin() {
  const other = OTHER_NAME[location.hostname];
  return other && location.port ? `${location.protocol}//${other}:${location.port}` : null;
}

/** Whether ``url`` may be opened for an app: http(s) only, and never this machine. */
export function linkAllowed(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return false;
  const host = parsed.hostname.toLowerCase().replace(/^\[|\]$/g, "");
  return !(host === "localhost" || host.endsWith(".localhost") || host === "::1"
    || host === "0.0.0.0" || host === "::" || /^127\./.test(host)
    || /^::ffff:(127\.|7f)/.test(host));
}

function note(box, text) {
  const p = document.createElement("p");
  p.className = "meta app-note";
  p.textContent = text;
  box.append(p);
}

/**
 * Show the app of a tool call in ``box`` (its text result stays above it). ``api`` is the
 * page's API call (it throws errors with ``status`` and ``message``). Tools that are not an
 * MCP server's (no ``server__`` in the name) have none; nothing is asked for them.
 */
export async function showApp(box, { sid, callId, name, api }) {
  const origin = sandboxOrigin();
  if (!name || !name.includes("__") || !origin || !box.isConnected) return;
  const path = `/sessions/${encodeURIComponent(sid)}/apps/${encodeURIComponent(callId)}`;
  let found;
  try {
    found = await api(path);
  } catch (err) {
    if (err.status !== 404) note(box, `The tool's app cannot be shown: ${err.message}`);
    return;
  }
  if (!box.isConnected || box.querySelector("iframe.app")) return;
  for (const gone of [...bridges].filter((b) => !b.frame.isConnected)) bridges.delete(gone);
  const frame = document.createElement("iframe");
  frame.className = "app";
  frame.title = `App of ${name}`;
  // the sandbox page is another origin: same-origin here means its own, never the page's
  frame.setAttribute("sandbox", "allow-scripts allow-same-origin");
  frame.setAttribute("referrerpolicy", "no-referrer");
  const url = new URL("/apps/sandbox", origin);
  url.searchParams.set("host", location.origin);
  url.searchParams.set("csp", JSON.stringify(found.app.csp || {}));
  frame.src = url.href;
  Object.assign(frame.style, { display: "block", width: "100%", height: `${MIN_HEIGHT * 2}px`,
    border: found.app.prefersBorder === false ? "0" : "1px solid #8884", borderRadius: "6px" });
  const bridge = { frame, origin, found, path, api, initialized: false };
  bridges.add(bridge);
  box.append(frame);
  box.closest("details")?.setAttribute("open", "");
}

/** Tell every app it is going away (``ui/resource-teardown``), then forget them. */
export function teardownApps(reason = "the conversation was redrawn") {
  for (const bridge of bridges) {
    post(bridge, { jsonrpc: "2.0", id: `teardown-${Date.now()}`, method: "ui/resource-teardown",
      params: { reason } });
  }
  bridges.clear();
}

function post(bridge, message) {
  bridge.frame.contentWindow?.postMessage(message, bridge.origin);
}

const reply = (bridge, id, result) => post(bridge, { jsonrpc: "2.0", id, result });
const refuse = (bridge, id, message, code = -32000) =>
  post(bridge, { jsonrpc: "2.0", id, error: { code, message } });

function hostContext(bridge) {
  const dark = window.matchMedia?.("(prefers-color-scheme: dark)").matches;
  return {
    toolInfo: { id: bridge.found.call_id, tool: bridge.found.tool },
    theme: dark ? "dark" : "light",
    displayMode: "inline",
    availableDisplayModes: ["inline"],
    containerDimensions: { maxHeight: MAX_HEIGHT },
    locale: navigator.language,
    timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    platform: "web",
    userAgent: "silica serve",
  };
}

async function request(bridge, { id, method, params = {} }) {
  switch (method) {
    case "ui/initialize":
      return reply(bridge, id, {
        protocolVersion: PROTOCOL,
        hostInfo: { name: "silica", version: "1" },
        hostCapabilities: { openLinks: {}, serverTools: {}, logging: {} },
        hostContext: hostContext(bridge),
      });
    case "ping":
      return reply(bridge, id, {});
    case "tools/call":
      try {
        const result = await bridge.api(`${bridge.path}/calls`, { method: "POST",
          json: { name: params.name, arguments: params.arguments ?? {} } });
        return reply(bridge, id, result);
      } catch (err) {
        return refuse(bridge, id, err.message);
      }
    case "ui/open-link":
      if (typeof params.url !== "string" || !linkAllowed(params.url)) {
        return refuse(bridge, id, "silica opens http and https links to other machines only");
      }
      window.open(params.url, "_blank", "noopener,noreferrer");
      return reply(bridge, id, {});
    case "ui/message": {
      // The text goes into the message box for the person to read and send: an app never
      // speaks for them.
      const content = Array.isArray(params.content) ? params.content : [params.content];
      const text = content.filter((c) => c && c.type === "text" && typeof c.text === "string")
        .map((c) => c.text).join("\n");
      const box = document.getElementById("prompt");
      if (!text || !box) return refuse(bridge, id, "silica takes text messages only");
      box.value = box.value ? `${box.value}\n${text}` : text;
      box.focus();
      return reply(bridge, id, {});
    }
    case "ui/request-display-mode":
      return reply(bridge, id, { mode: "inline" });
    default:
      return refuse(bridge, id, `silica does not answer ${String(method).slice(0, 100)}`,
        -32601);
  }
}

function notified(bridge, { method, params = {} }) {
  if (method === "ui/notifications/sandbox-proxy-ready") {
    const { html, csp } = bridge.found.app;
    post(bridge, { jsonrpc: "2.0", method: "ui/notifications/sandbox-resource-ready",
      params: { html, csp } });
  } else if (method === "ui/notifications/initialized" && !bridge.initialized) {
    bridge.initialized = true;
    post(bridge, { jsonrpc: "2.0", method: "ui/notifications/tool-input",
      params: { arguments: bridge.found.input || {} } });
    if (bridge.found.result) {
      post(bridge, { jsonrpc: "2.0", method: "ui/notifications/tool-result",
        params: bridge.found.result });
    }
  } else if (method === "ui/notifications/size-changed") {
    const height = Number(params.height);
    if (Number.isFinite(height)) {
      bridge.frame.style.height = `${Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, height))}px`;
    }
  }
}

window.addEventListener("message", (event) => {
  let bridge = null;
  for (const b of bridges) if (b.frame.contentWindow === event.source) bridge = b;
  if (!bridge || event.origin !== bridge.origin) return; // only the frames made here
  const data = event.data;
  if (!data || typeof data !== "object" || data.jsonrpc !== "2.0") return;
  if (typeof data.method !== "string") return; // an answer (teardown): nothing waits for it
  if (data.id !== undefined && data.id !== null) request(bridge, data);
  else notified(bridge, data);
});
