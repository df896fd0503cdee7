// The transcript of one run, drawn from its events in the order they happened: groups of steps
// (tool calls, with progress), the assistant's text, and each interrupt's card, which stays where
// it was asked as a compact record of the decision once decided. It only draws: the follow loop
// (follow.js) feeds it events, the card (card.js) sends answers. Everything uses textContent.
import { TERMINAL_RUN_STATUSES } from "./client/index.js";
import { buildCard, decisionRecord } from "./card.js";

const $ = (sel, root) => root.querySelector(sel);
export const TERMINAL_STATUS = new Set(TERMINAL_RUN_STATUSES);
// Decisions after which the run goes on working.
const CONTINUES = new Set(["approved", "responded", "retry", "mark_done", "abandon"]);

function span(cls) {
  const s = document.createElement("span");
  s.className = cls;
  return s;
}

export class RunView {
  /**
   * @param {HTMLElement} chat the transcript the run is appended to
   * @param {{ me: string, send: (intr: object, decision: string, answer: object) => Promise<unknown>,
   *           onStatus?: (status: string) => void, onChange?: () => void }} hooks
   */
  constructor(chat, { me, send, onStatus, onChange }) {
    this.me = me;
    this.send = send;
    this.onStatus = onStatus;
    this.onChange = onChange;
    this.root = document.createElement("div");
    this.root.className = "run";
    this.note = document.createElement("div");
    this.note.className = "run-note muted";
    this.root.append(this.note);
    this.status = "queued";
    this.executing = false; // an event past run_started arrived: the run is being worked on
    this.tail = null; // the last block: {kind: "steps" | "text" | "card", el}
    this.steps = new Map(); // callId -> li
    this.cards = new Map(); // interruptId -> {intr, slot, card}
    this.decided = new Set();
    chat.append(this.root);
  }

  get terminal() {
    return TERMINAL_STATUS.has(this.status);
  }

  setStatus(status) {
    this.status = status;
    this.onStatus?.(status);
    if (this.terminal) this.finish();
  }

  /** A run stored behind another of its conversation (the agent's concurrent_runs "enqueue" or
   * "interrupt"): shown as waiting until its first step, unless that already came. */
  markWaiting(behind) {
    if (this.executing || this.terminal) return;
    this.setStatus("waiting");
    this.setNote(`Waiting for the conversation's earlier run${behind ? ` (${behind})` : ""} to end.`);
  }

  finish() {
    this.#stopCursor();
    for (const { card } of this.cards.values()) card.close();
  }

  // ---- blocks, in order ----------------------------------------------------------------------

  #append(kind, el) {
    this.#stopCursor();
    this.root.insertBefore(el, this.note);
    this.tail = { kind, el };
    this.onChange?.();
    return el;
  }

  #stopCursor() {
    if (this.tail?.kind === "text") this.tail.el.classList.remove("streaming");
  }

  #textBlock() {
    if (this.tail?.kind === "text") return this.tail.el;
    const bubble = document.createElement("div");
    bubble.className = "bubble assistant streaming";
    bubble.append(span("text"), span("cursor"));
    return this.#append("text", bubble);
  }

  #stepsBlock() {
    if (this.tail?.kind === "steps") return this.tail.el;
    const ol = document.createElement("ol");
    ol.className = "steps";
    ol.setAttribute("aria-label", "Steps");
    return this.#append("steps", ol);
  }

  appendText(delta) {
    if (!delta) return;
    $(".text", this.#textBlock()).textContent += delta;
    this.onChange?.();
  }

  renderStep(step) {
    let li = this.steps.get(step.callId);
    if (!li) {
      li = document.createElement("li");
      li.className = "step";
      li.dataset.call = step.callId;
      li.append(span("icon"), span("tool"), span("summary"));
      this.#stepsBlock().append(li);
      this.steps.set(step.callId, li);
    }
    li.dataset.status = step.status;
    $(".icon", li).textContent = { success: "✓", error: "!" }[step.status] || "";
    $(".tool", li).textContent = step.tool;
    const summary = step.summary || step.argsSummary || li.dataset.args || "";
    if (step.argsSummary) li.dataset.args = step.argsSummary;
    $(".summary", li).textContent = summary;
    li.title = summary;
    if (step.progress !== undefined) this.#renderProgress(li, step.status === "running" ? step.progress : null);
    else if (step.status !== "running") this.#renderProgress(li, null);
  }

  // A running tool's last tool_progress: a bar and its text, inside the step; gone once it ends.
  #renderProgress(li, progress) {
    let el = $(".progress", li);
    if (!progress) {
      el?.remove();
      return;
    }
    if (!el) {
      el = span("progress");
      const track = span("progress-track");
      track.append(span("progress-bar"));
      el.append(track, span("progress-text"));
      el.setAttribute("role", "progressbar");
      el.setAttribute("aria-valuemin", "0");
      el.setAttribute("aria-valuemax", "100");
      li.append(el);
    }
    const pct = Math.round(Math.min(Math.max(Number(progress.fraction) || 0, 0), 1) * 100);
    $(".progress-bar", el).style.width = `${pct}%`;
    $(".progress-text", el).textContent = progress.text || `${pct}%`;
    el.setAttribute("aria-valuenow", String(pct));
    el.dataset.fraction = String(progress.fraction);
  }

  setNote(text) {
    this.note.textContent = text;
  }

  // ---- interrupts ----------------------------------------------------------------------------

  showCard(intr) {
    if (this.cards.has(intr.id) || this.decided.has(intr.id)) return;
    const slot = this.#append("card", document.createElement("div"));
    slot.className = "card-slot";
    const card = buildCard(intr, {
      send: (decision, answer) => this.send(intr, decision, answer),
      // Decided in another tab, or expired: the stream's interrupt_resolved draws the record.
      onGone: (decision) => this.#gone(intr.id, decision),
    });
    slot.append(card.el);
    this.cards.set(intr.id, { intr, slot, card });
  }

  #gone(interruptId, decision) {
    const open = this.cards.get(interruptId);
    if (!open) return;
    const note = $(".expiry", open.card.el);
    if (note) note.textContent = decision === "expired" ? "Expired." : "Already decided elsewhere.";
    for (const b of open.card.el.querySelectorAll("button, input, select, textarea")) b.disabled = true;
  }

  /** The card becomes the record of its decision, in place. */
  resolveCard(interruptId, { decision, by, at }) {
    this.decided.add(interruptId);
    const open = this.cards.get(interruptId);
    if (!open) return;
    open.card.close();
    this.cards.delete(interruptId);
    // An older gateway's event names nobody: this page knows at least whether it was its user.
    const who = by || (open.card.sent ? this.me : "");
    const record = decisionRecord(open.intr, { decision, by: who, at, answer: open.card.answer });
    open.slot.replaceChildren(record);
    open.slot.classList.add("decided");
    this.onChange?.();
  }

  // ---- events --------------------------------------------------------------------------------

  apply(ev) {
    if (ev.type !== "run_started" && ev.type !== "reset" && !this.executing) {
      this.executing = true;
      if (this.status === "waiting") {
        this.setNote("");
        this.setStatus("running");
      }
    }
    switch (ev.type) {
      case "run_started":
        if (this.status !== "waiting") this.setStatus("running");
        break;
      case "text_delta":
        this.appendText(ev.delta);
        break;
      case "tool_started":
        this.renderStep({ callId: ev.callId, tool: ev.tool, argsSummary: ev.argsSummary, status: "running" });
        break;
      case "tool_progress":
        this.renderStep({ callId: ev.callId, tool: ev.tool, status: "running", progress: { fraction: ev.fraction, text: ev.text } });
        break;
      case "tool_finished":
        this.renderStep({ callId: ev.callId, tool: ev.tool, status: ev.status, summary: ev.summary });
        break;
      case "interrupt":
        this.setStatus("interrupted");
        this.showCard({ id: ev.interruptId, kind: ev.kind, payload: ev.payload, expiresAt: ev.expiresAt });
        break;
      case "interrupt_resolved":
        this.resolveCard(ev.interruptId, { decision: ev.decision, by: ev.resolvedBy, at: ev.time });
        if (CONTINUES.has(ev.decision)) this.setStatus("running");
        break;
      case "done": {
        const u = ev.usage;
        if (u && u.inputTokens + u.outputTokens > 0) {
          this.setNote(`${u.inputTokens} tokens in, ${u.outputTokens} out, ${u.modelSteps} model steps.`);
        }
        this.setStatus("completed");
        break;
      }
      case "error":
        this.setNote(`The run failed: ${ev.message || ev.code}`);
        this.setStatus("failed");
        break;
      case "cancelled":
        this.setNote(`Cancelled${ev.reason ? `: ${ev.reason}` : ""}.`);
        this.setStatus("cancelled");
        break;
      case "reset":
        this.applyRun(ev.run);
        break;
    }
  }

  /** Redraw from the run's current state (an in-stream reset, or GET /v1/runs/{id}). */
  applyRun(run) {
    const pending = run.pendingInterrupt?.status === "pending" ? run.pendingInterrupt : null;
    for (const id of [...this.cards.keys()]) {
      if (id !== pending?.id) this.resolveCard(id, { decision: "unknown" });
    }
    if (pending) this.showCard(pending);
    this.setStatus(run.status);
  }
}
