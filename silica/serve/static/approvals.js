// Shell approvals on the page: a command outside [shell] allow waits for the person, in the
// box of the tool call that asked. The command and its pattern are only ever text nodes, and
// characters that would hide what runs (controls, bidi marks) are shown as \u{...} escapes.

const OUTCOME = {
  once: "ran once",
  always: "allowed always",
  deny: "denied",
};
const WHY = {
  answered: "",
  covered: " (an earlier “always” allows it)",
  timeout: " (nobody answered in time)",
  "turn ended": " (its turn ended)",
};
// C0/C1 controls but tab and newline, DEL, zero-width and bidi marks, line/paragraph separators
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;

/** The command as the person should read it: every hiding character made visible. */
export function visible(text) {
  return String(text ?? "").replace(HIDDEN,
    (c) => `\\u{${c.codePointAt(0).toString(16).padStart(4, "0")}}`);
}

/**
 * The page's approvals. `el` makes elements (strings become text nodes); `answer(id,
 * decision)` posts the person's choice and rejects with the daemon's message. Returns
 * `show(box, approval)` (draw a request in a tool's box, or under a turn), `done(event)`
 * (an approval_done: the request becomes its outcome) and `restore(item, box)` (one item
 * of the history's approvals: answered ones as outcomes, open ones as requests).
 */
export function makeApprovals({ el, answer }) {
  const open = new Map(); // approval id -> {form, approval}

  function outcome(approval, done) {
    const said = OUTCOME[done.decision] || done.decision;
    const what = done.decision === "always" && approval.pattern
      ? ["allowed always: ", el("code", {}, visible(approval.pattern))]
      : [said];
    return el("p", { class: "approval-done meta", "data-decision": done.decision },
      "Shell command ", el("code", {}, visible(approval.command)), " — ", ...what,
      WHY[done.reason] ?? (done.reason ? ` (${done.reason})` : ""));
  }

  /** The tool box's state line ("running…"), if it has one, says `text`. */
  function say(box, text) {
    const state = box.querySelector?.(":scope > summary .state");
    if (state) state.textContent = text;
  }

  function place(box, node) {
    if (box.tagName === "DETAILS") {
      box.open = true; // a request must be seen
      const summary = box.querySelector(":scope > summary");
      if (summary) return summary.after(node);
    }
    return box.append(node);
  }

  function show(box, approval) {
    if (open.has(approval.id)) return;
    const problem = el("p", { class: "problem refusal", role: "alert" });
    const titleId = `approval-${approval.id}-title`;
    const form = el("form", { class: "elicitation approval", "aria-labelledby": titleId,
      "data-approval": approval.id },
      el("h4", { id: titleId }, "Run this shell command?"),
      el("pre", { class: "command" }, visible(approval.command)),
      approval.pattern
        ? el("p", { class: "meta" }, "“Always” allows from now on, in this session: ",
          el("code", { class: "pattern" }, visible(approval.pattern)))
        : el("p", { class: "meta" }, "This command can only be approved once."),
      approval.timeout
        ? el("p", { class: "meta" }, `Denied if nobody answers within ${approval.timeout} s.`)
        : null,
      problem,
      el("div", { class: "actions" },
        el("button", { type: "submit", value: "once", class: "accept" }, "Run once"),
        approval.pattern
          ? el("button", { type: "submit", value: "always" }, "Always for this pattern")
          : null,
        el("button", { type: "submit", value: "deny" }, "Deny")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      form.inert = true; // one answer at a time; approval_done replaces the form
      problem.textContent = "";
      try {
        await answer(approval.id, event.submitter?.value || "deny");
      } catch (err) {
        form.inert = false;
        problem.textContent = err.message;
      }
    });
    open.set(approval.id, { form, approval, box });
    place(box, form);
    say(box, "waiting for your approval…");
  }

  function done(event) {
    const shown = open.get(event.id);
    if (!shown) return;
    open.delete(event.id);
    shown.form.replaceWith(outcome(shown.approval, event));
    if (event.decision !== "deny") say(shown.box, "running…"); // its result says when done
  }

  function restore(item, box) {
    if (item.decision) place(box, outcome(item, item));
    else show(box, item);
  }

  function clear() {
    open.clear();
  }

  return { show, done, restore, clear };
}
