// The confirmation card of one interrupt (confirm_action, select_option, provide_input,
// outcome_unknown), and the compact record that takes its place in the transcript once the
// interrupt is decided: what was decided, by whom, when, about what. The card only asks and sends
// (through `send`, the client's resume); the run's stream says when it is decided.
import { renderForm, renderOptions } from "./questions.js";

const $ = (sel, root) => root.querySelector(sel);

// What a card says once its answer is accepted (the interrupt_resolved event follows).
const SENT_TEXT = {
  approve: "Approved, continuing…",
  respond: "Answered, continuing…",
  reject: "Rejected.",
  retry: "Retrying…",
  mark_done: "Marked done, continuing…",
  abandon: "Abandoned, continuing…",
};

// The record's verb for each way an interrupt ends, and what it meant for the run.
const VERBS = {
  approved: "Approved",
  rejected: "Rejected",
  responded: "Answered",
  retry: "Retried",
  mark_done: "Marked done",
  abandon: "Abandoned",
  expired: "Expired",
  cancelled: "Cancelled",
  unknown: "Decided", // a reset's run no longer has it pending: how is not known here
};
const OUTCOMES = {
  approved: "the action continues.",
  rejected: "nothing was changed.",
  retry: "the action runs again with the same idempotency key.",
  mark_done: "the run continues as if the action happened.",
  abandon: "the run continues without the action.",
  expired: "nothing was changed.",
  cancelled: "nothing was changed.",
};

function cloneTemplate(id) {
  return document.querySelector(id).content.firstElementChild.cloneNode(true);
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** "restart_instance payment-api-2", or a question's title: what the interrupt was about. */
export function subjectOf(intr) {
  const p = intr.payload || {};
  if (intr.kind === "select_option" || intr.kind === "provide_input") {
    return p.title || (intr.kind === "select_option" ? "Choose one" : "More input needed");
  }
  return [p.tool, p.target].filter(Boolean).join(" ") || p.title || intr.kind;
}

/** hh:mm in 24 hours, local time; "" for a missing or bad timestamp. */
export function clock(iso) {
  const t = iso ? new Date(iso) : null;
  if (!t || Number.isNaN(t.getTime())) return "";
  return t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
}

/**
 * The decided card's record, e.g. "Approved by alice at 14:02 — restart_instance payment-api-2".
 * `answer` is the chosen option's label or the fill, when this page sent it.
 */
export function decisionRecord(intr, { decision, by, at, answer }) {
  const rec = el("div", "decision-record resolved-note");
  rec.dataset.decision = decision;
  rec.dataset.interrupt = intr.id;
  rec.setAttribute("role", "note");
  rec.append(el("span", "d-verb", VERBS[decision] || `Decided (${decision})`));
  if (by) rec.append(" by ", el("span", "d-who", by));
  const hhmm = clock(at);
  if (hhmm) {
    const time = el("time", "d-when", hhmm);
    time.dateTime = at;
    time.title = new Date(at).toLocaleString();
    rec.append(" at ", time);
  }
  rec.append(" — ", el("span", "d-what", subjectOf(intr)));
  if (answer) rec.append(": ", el("span", "d-answer", answer));
  const outcome = OUTCOMES[decision];
  if (outcome) rec.append(el("span", "d-outcome muted", ` (${outcome.replace(/\.$/, "")})`));
  rec.title = rec.textContent;
  return rec;
}

// ---- the cards: each returns its element, the controls a pending answer disables, and hooks;
// its buttons or form call post(decision, answer) --------------------------------------------

// The fields the confirm and outcome_unknown cards share.
function fillCommon(card, p) {
  const risk = $(".risk", card);
  risk.textContent = `${p.risk || "unknown"} risk`;
  risk.dataset.risk = p.risk || "";
  $(".c-params", card).textContent = p.parameterSummary || "—";
  $(".c-reason", card).textContent = p.reason || "—";
  if (p.details) {
    $(".c-details", card).textContent = p.details;
    $(".c-details", card).hidden = false;
    $(".c-details-label", card).hidden = false;
  }
}

function confirmCard(p, intr, post) {
  const card = cloneTemplate("#tpl-card");
  fillCommon(card, p);
  $(".confirm-title", card).textContent = p.title || "Confirmation required";
  $(".c-tool", card).textContent = p.tool || intr.kind;
  $(".c-target", card).textContent = p.target || "—";
  if (p.preview) {
    $(".c-preview", card).textContent = p.preview;
    $(".c-preview", card).hidden = false;
  }
  const buttons = { approve: $(".approve", card), reject: $(".reject", card) };
  for (const [decision, b] of Object.entries(buttons)) b.addEventListener("click", () => post(decision));
  return { el: card, controls: Object.values(buttons) };
}

function outcomeCard(p, intr, post) {
  const card = cloneTemplate("#tpl-outcome");
  fillCommon(card, p);
  const what = p.tool || "the action";
  $(".o-question", card).textContent = p.target
    ? `We don't know whether ${what} on ${p.target} happened.`
    : `We don't know whether ${what} happened.`;
  const buttons = { retry: $(".retry", card), mark_done: $(".mark-done", card), abandon: $(".abandon", card) };
  for (const [decision, b] of Object.entries(buttons)) b.addEventListener("click", () => post(decision));
  return { el: card, controls: Object.values(buttons) };
}

// A question's card: its title, its prompt (the payload's details), and a form.
function questionCard(p, fallbackTitle, submitText) {
  const card = cloneTemplate("#tpl-question");
  $(".confirm-title", card).textContent = p.title || fallbackTitle;
  $(".q-prompt", card).textContent = p.details || "";
  $(".q-prompt", card).hidden = !p.details;
  $(".q-submit", card).textContent = submitText;
  return card;
}

function selectCard(p, intr, post) {
  const card = questionCard(p, "Choose one", "Choose");
  card.classList.add("select-card");
  card.setAttribute("aria-label", "Choose an option");
  const submit = $(".q-submit", card);
  let chosen = null;
  renderOptions($(".q-fields", card), p.options || [], (value) => {
    chosen = value;
    submit.disabled = false;
  });
  submit.disabled = true; // until an option is picked
  card.addEventListener("submit", (e) => {
    e.preventDefault();
    if (chosen === null) return;
    const label = (p.options || []).find((o) => o.value === chosen)?.label || chosen;
    post("respond", { option: chosen }, label);
  });
  const radios = [...card.querySelectorAll("input[type=radio]")];
  return { el: card, controls: [submit, ...radios], refresh: () => (submit.disabled = chosen === null) };
}

function inputCard(p, intr, post) {
  const card = questionCard(p, "More input needed", "Submit");
  card.classList.add("input-card");
  card.setAttribute("aria-label", "Provide input");
  const form = renderForm($(".q-fields", card), p.inputSchema || {});
  // The browser checks required/min/max first; the server checks the schema again (422).
  card.addEventListener("submit", (e) => {
    e.preventDefault();
    const fill = form.read();
    const shown = Object.entries(fill)
      .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(", ");
    post("respond", { fill }, shown);
  });
  const controls = [$(".q-submit", card), ...card.querySelectorAll(".q-field input, .q-field select, .q-field textarea")];
  return { el: card, controls, onError: (err) => form.markInvalid(err.message) };
}

const BUILDERS = { outcome_unknown: outcomeCard, select_option: selectCard, provide_input: inputCard };

/**
 * The card for a pending interrupt. `send(decision, answer)` posts the answer (the client's
 * resume: one idempotency key per answer, kept across its retries); `onGone(decision)` is told
 * when the server says the interrupt was decided elsewhere or expired. Returns {el, answer, sent,
 * close}: `answer` is what this page sent (for the record), `close()` stops the countdown.
 */
export function buildCard(intr, { send, onGone }) {
  let timer = null;
  const state = { answer: "", sent: false };
  const post = async (decision, answer = {}, shown = "") => {
    enable(false);
    error.textContent = "";
    // Noted before sending: the stream's interrupt_resolved may arrive before the POST's answer.
    Object.assign(state, { answer: shown, sent: true });
    try {
      await send(decision, answer);
      clearInterval(timer); // the countdown no longer applies: keep the answer's note
      expiry.textContent = SENT_TEXT[decision] || "Sent.";
    } catch (err) {
      Object.assign(state, { answer: "", sent: false });
      if (err.code === "INTERRUPT_ALREADY_RESOLVED") return onGone?.(null);
      if (err.code === "INTERRUPT_EXPIRED") return onGone?.("expired");
      // The server's reason (e.g. INVALID_ANSWER: which field failed), next to the form, which
      // stays open for another try.
      error.textContent = err.message;
      built.onError?.(err);
      enable(true);
    }
  };
  const built = (BUILDERS[intr.kind] || confirmCard)(intr.payload || {}, intr, post);
  const card = built.el;
  card.dataset.interrupt = intr.id;
  const enable = (on) => {
    for (const c of built.controls) c.disabled = !on;
    if (on) built.refresh?.();
  };
  const expiry = $(".expiry", card);
  const error = $(".confirm-error", card);
  const expiresAt = intr.expiresAt ? Date.parse(intr.expiresAt) : null;
  const tick = () => {
    if (!expiresAt) return;
    const left = Math.max(0, Math.round((expiresAt - Date.now()) / 1000));
    const mm = String(Math.floor(left / 60)).padStart(2, "0");
    const ss = String(left % 60).padStart(2, "0");
    expiry.textContent = left > 0 ? `Expires in ${mm}:${ss}` : "Expired";
    if (left === 0) {
      enable(false);
      clearInterval(timer);
    }
  };
  tick();
  timer = setInterval(tick, 1000);
  return {
    el: card,
    /** What this page sent (a label or a fill), for the record. */
    get answer() {
      return state.answer;
    },
    /** Whether this page's answer was accepted. */
    get sent() {
      return state.sent;
    },
    close: () => clearInterval(timer),
  };
}
