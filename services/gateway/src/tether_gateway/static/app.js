// Tether's demo UI: an agent picker, conversations, a chat that streams the assistant's text, a
// step bar from tool events (with progress), and the cards for interrupts (confirm an action;
// choose an option; fill a form; an action whose outcome is unknown). Everything is rendered
// with textContent.
import { renderForm, renderOptions } from "./questions.js";
import { readSse } from "./sse_reader.js";

const $ = (sel, root = document) => root.querySelector(sel);
const TERMINAL = new Set(["done", "error", "cancelled"]);
const TERMINAL_STATUS = new Set(["completed", "failed", "cancelled"]);
const DECISION_TEXT = {
  approved: "Approved — the action continues.",
  rejected: "Rejected — nothing was changed.",
  expired: "The confirmation expired — nothing was changed.",
  cancelled: "The confirmation was cancelled.",
  responded: "Answered.",
  retry: "Retrying — the action runs again with the same idempotency key.",
  mark_done: "Marked done — the run continues as if the action happened.",
  abandon: "Abandoned — the run continues without the action.",
};
// Decisions after which the run goes on working.
const CONTINUES = new Set(["approved", "responded", "retry", "mark_done", "abandon"]);
// What a card says once its POST is accepted (the interrupt_resolved event follows).
const SENT_TEXT = {
  approve: "Approved, continuing…",
  respond: "Answered, continuing…",
  reject: "Rejected.",
  retry: "Retrying…",
  mark_done: "Marked done, continuing…",
  abandon: "Abandoned, continuing…",
};

const state = { user: "", conversations: [], convId: null, view: null, agent: "" };

// ---- storage, ids, API ---------------------------------------------------------------------

const token = () => localStorage.getItem("tether.token") || "";

function newKey() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code || "";
  }
}

function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${token()}`, ...extra };
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: authHeaders(body ? { "Content-Type": "application/json" } : {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  return parse(res);
}

async function parse(res) {
  if (res.status === 204) return null;
  const json = await res.json().catch(() => ({}));
  if (!res.ok) {
    if (res.status === 401) signOut();
    throw new ApiError(res.status, json.error?.code, json.error?.message);
  }
  return json;
}

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  return { conv: p.get("c"), run: p.get("r") };
}

function writeHash(conv, run) {
  const p = new URLSearchParams();
  if (conv) p.set("c", conv);
  if (run) p.set("r", run);
  history.replaceState(null, "", p.toString() ? `#${p}` : location.pathname);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- top bar -------------------------------------------------------------------------------

function setConnection(kind) {
  const el = $("#connection");
  el.dataset.state = kind;
  el.textContent = { live: "Live", reconnecting: "Reconnecting…", idle: "" }[kind] ?? "";
}

function setRunStatus(status) {
  const el = $("#run-status");
  el.hidden = !status;
  el.dataset.status = status || "";
  el.textContent = status || "";
  $("#cancel-run").hidden = !status || TERMINAL_STATUS.has(status);
}

// ---- one run: steps, streaming text, confirmation card, its event stream --------------------

class RunView {
  constructor(chat, runId) {
    this.runId = runId;
    this.root = $("#tpl-run").content.firstElementChild.cloneNode(true);
    this.steps = $(".steps", this.root);
    this.bubble = $(".bubble", this.root);
    this.text = $(".text", this.root);
    this.cardSlot = $(".card-slot", this.root);
    this.note = $(".run-note", this.root);
    this.lastSeq = 0;
    this.status = "queued";
    this.terminal = false;
    this.closed = false;
    this.retryMs = 1000;
    this.abort = new AbortController();
    this.saved = { text: "", steps: {}, note: "", resolved: [] };
    this.card = null;
    chat.append(this.root);
    this.bubble.classList.add("empty");
  }

  storageKey() {
    return `tether.run.${this.runId}`;
  }

  restore() {
    const raw = sessionStorage.getItem(this.storageKey());
    if (!raw) return;
    const s = JSON.parse(raw);
    this.lastSeq = s.lastSeq || 0;
    this.saved = { ...this.saved, ...s.view };
    this.appendText(this.saved.text, false);
    for (const step of Object.values(this.saved.steps)) this.renderStep(step);
    if (this.saved.note) this.note.textContent = this.saved.note;
  }

  persist() {
    const view = this.saved;
    sessionStorage.setItem(this.storageKey(), JSON.stringify({ lastSeq: this.lastSeq, view }));
  }

  setStatus(status) {
    this.status = status;
    setRunStatus(status);
    if (TERMINAL_STATUS.has(status)) this.finish();
  }

  finish() {
    this.terminal = true;
    this.bubble.classList.remove("streaming");
    this.closeCard(null);
    setConnection("idle");
  }

  appendText(delta, save = true) {
    if (!delta) return;
    this.text.textContent += delta;
    this.bubble.classList.remove("empty");
    if (save) this.saved.text += delta;
    scrollDown();
  }

  renderStep(step) {
    let li = this.steps.querySelector(`[data-call="${CSS.escape(step.callId)}"]`);
    if (!li) {
      li = document.createElement("li");
      li.className = "step";
      li.dataset.call = step.callId;
      li.append(span("icon"), span("tool"), span("summary"));
      this.steps.append(li);
    }
    li.dataset.status = step.status;
    $(".icon", li).textContent = { success: "✓", error: "!" }[step.status] || "";
    $(".tool", li).textContent = step.tool;
    $(".summary", li).textContent = step.summary || step.argsSummary || "";
    li.title = step.summary || step.argsSummary || "";
    this.renderProgress(li, step.status === "running" ? step.progress : null);
  }

  // A running tool's last tool_progress: a bar and its text, inside the step; gone once it ends.
  renderProgress(li, progress) {
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

  apply(ev) {
    if (ev.type !== "reset") {
      if (ev.sequence <= this.lastSeq) return; // already applied (replay overlap)
      this.lastSeq = ev.sequence;
    }
    switch (ev.type) {
      case "run_started":
        this.setStatus("running");
        this.bubble.classList.add("streaming");
        break;
      case "text_delta":
        this.appendText(ev.delta);
        break;
      case "tool_started": {
        const step = { callId: ev.callId, tool: ev.tool, argsSummary: ev.argsSummary, status: "running" };
        this.saved.steps[ev.callId] = step;
        this.renderStep(step);
        break;
      }
      case "tool_progress": {
        const prev = this.saved.steps[ev.callId] || { callId: ev.callId, tool: ev.tool, status: "running" };
        const step = { ...prev, progress: { fraction: ev.fraction, text: ev.text } };
        this.saved.steps[ev.callId] = step;
        this.renderStep(step);
        break;
      }
      case "tool_finished": {
        const prev = this.saved.steps[ev.callId] || { callId: ev.callId, tool: ev.tool };
        const step = { ...prev, status: ev.status, summary: ev.summary };
        this.saved.steps[ev.callId] = step;
        this.renderStep(step);
        break;
      }
      case "interrupt":
        this.setStatus("interrupted");
        this.showCard({ id: ev.interruptId, kind: ev.kind, payload: ev.payload, expiresAt: ev.expiresAt });
        break;
      case "interrupt_resolved":
        this.closeCard(ev.interruptId, ev.decision);
        if (CONTINUES.has(ev.decision)) this.setStatus("running");
        break;
      case "done":
        if (ev.usage && ev.usage.inputTokens + ev.usage.outputTokens > 0) {
          const u = ev.usage;
          this.setNote(`${u.inputTokens} tokens in, ${u.outputTokens} out, ${u.modelSteps} model steps.`);
        }
        this.setStatus("completed");
        break;
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
    this.persist();
  }

  // Redraw from the run's current state (GET /v1/runs/{id} or an in-stream reset).
  applyRun(run) {
    if (run.lastSequence < this.lastSeq) this.lastSeq = run.lastSequence;
    if (run.pendingInterrupt && run.pendingInterrupt.status === "pending") {
      this.showCard(run.pendingInterrupt);
    } else {
      this.closeCard(null);
    }
    this.setStatus(run.status);
    if (TERMINAL_STATUS.has(run.status)) openConversation(state.convId, null, false);
  }

  setNote(text) {
    this.note.textContent = text;
    this.saved.note = text;
  }

  showCard(intr) {
    if (this.card?.interruptId === intr.id) return;
    if (this.saved.resolved.includes(intr.id)) return;
    this.closeCard(null);
    const p = intr.payload || {};
    const build = { outcome_unknown: outcomeCard, select_option: selectCard, provide_input: inputCard }[intr.kind];
    // post(decision, answer) sends the card's answer; the builder wires its buttons or form to it.
    const built = (build || confirmCard)(p, intr, (decision, answer) => post(decision, answer));
    const { el: card, controls } = built;
    const enable = (on) => {
      for (const c of controls) c.disabled = !on;
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
      if (left === 0) enable(false);
    };
    tick();
    const timer = setInterval(tick, 1000);
    const post = async (decision, answer = {}) => {
      enable(false);
      error.textContent = "";
      try {
        // A fresh key per click: the server's answer to a retried click is the stored one.
        await api("POST", `/v1/runs/${this.runId}/resume`, {
          interruptId: intr.id,
          decision,
          ...answer,
          idempotencyKey: newKey(),
        });
        clearInterval(timer); // the countdown no longer applies: keep the answer's note
        expiry.textContent = SENT_TEXT[decision] || "Sent.";
      } catch (err) {
        if (err.code === "INTERRUPT_ALREADY_RESOLVED") return this.closeCard(intr.id, "resolved elsewhere");
        if (err.code === "INTERRUPT_EXPIRED") return this.closeCard(intr.id, "expired");
        // The server's reason (e.g. INVALID_ANSWER: which field failed), next to the form,
        // which stays open for another try.
        error.textContent = err.message;
        built.onError?.(err);
        enable(true);
      }
    };
    this.card = { interruptId: intr.id, el: card, timer };
    this.cardSlot.append(card);
    scrollDown();
  }

  closeCard(interruptId, decision) {
    if (interruptId && !this.saved.resolved.includes(interruptId)) this.saved.resolved.push(interruptId);
    if (this.card && (interruptId === null || this.card.interruptId === interruptId)) {
      clearInterval(this.card.timer);
      this.card.el.remove();
      this.card = null;
    }
    if (decision) {
      const note = document.createElement("div");
      note.className = "resolved-note";
      note.textContent = DECISION_TEXT[decision] || `Confirmation ${decision}.`;
      this.cardSlot.replaceChildren(note);
    }
  }

  onSse(msg) {
    let ev;
    try {
      ev = JSON.parse(msg.data);
    } catch {
      return;
    }
    this.apply(ev);
  }

  // Read the stream until the run ends; reconnect from the last sequence after any drop.
  async follow(first = null) {
    let res = first;
    let attempt = 0;
    while (!this.terminal && !this.closed) {
      try {
        if (!res) {
          const headers = authHeaders({ Accept: "text/event-stream" });
          if (this.lastSeq) headers["Last-Event-ID"] = String(this.lastSeq);
          res = await fetch(`/v1/runs/${this.runId}/events`, { headers, signal: this.abort.signal });
        }
        if (res.status === 204) {
          // Finished and nothing left: the stored messages hold the answer.
          this.setStatus(this.status in { queued: 1, running: 1, interrupted: 1 } ? "completed" : this.status);
          break;
        }
        if (!res.ok) {
          if (res.status >= 400 && res.status < 500 && res.status !== 429) {
            const err = await parse(res).catch((e) => e);
            this.setNote(`Cannot follow this run: ${err.message}`);
            break;
          }
          throw new Error(`HTTP ${res.status}`);
        }
        setConnection("live");
        attempt = 0;
        await readSse(res.body, {
          onEvent: (m) => this.onSse(m),
          onRetry: (ms) => (this.retryMs = ms),
        });
      } catch (err) {
        if (this.closed || err.name === "AbortError") break;
      }
      res = null;
      if (this.terminal || this.closed) break;
      setConnection("reconnecting");
      attempt += 1;
      await sleep(Math.min(this.retryMs * attempt, 10000) * (0.75 + Math.random() * 0.5));
    }
    if (!this.closed) setConnection("idle");
  }

  close() {
    this.closed = true;
    this.abort.abort();
    if (this.card) clearInterval(this.card.timer);
  }
}

// ---- interrupt cards: each returns its element, the controls a pending answer disables, and
// hooks; its buttons or form call post(decision, answer) ------------------------------------

function cloneTemplate(id) {
  return $(id).content.firstElementChild.cloneNode(true);
}

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
    if (chosen !== null) post("respond", { option: chosen });
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
    post("respond", { fill: form.read() });
  });
  const controls = [$(".q-submit", card), ...card.querySelectorAll(".q-field input, .q-field select, .q-field textarea")];
  return { el: card, controls, onError: (err) => form.markInvalid(err.message) };
}

function span(cls) {
  const s = document.createElement("span");
  s.className = cls;
  return s;
}

function scrollDown() {
  const chat = $("#chat");
  chat.scrollTop = chat.scrollHeight;
}

// ---- conversations and messages ------------------------------------------------------------

async function loadConversations() {
  const { conversations } = await api("GET", "/v1/conversations?pageSize=50");
  state.conversations = conversations;
  const nav = $("#conversations");
  nav.replaceChildren();
  for (const c of conversations) {
    const a = document.createElement("a");
    a.href = `#c=${encodeURIComponent(c.id)}`;
    a.textContent = c.title || "Untitled conversation";
    a.title = a.textContent;
    a.classList.toggle("active", c.id === state.convId);
    a.addEventListener("click", (e) => {
      e.preventDefault();
      openConversation(c.id, null);
    });
    nav.append(a);
  }
}

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = `bubble ${role}`;
  div.textContent = text;
  $("#chat").append(div);
  return div;
}

function resetChat() {
  state.view?.close();
  state.view = null;
  const chat = $("#chat");
  chat.replaceChildren($("#empty"));
  $("#empty").hidden = false;
  setRunStatus(null);
  setConnection("idle");
}

async function openConversation(convId, runId, follow = true) {
  resetChat();
  state.convId = convId;
  writeHash(convId, runId);
  if (!convId) {
    $("#conversation-title").textContent = "New conversation";
    return;
  }
  const conv = state.conversations.find((c) => c.id === convId);
  $("#conversation-title").textContent = conv?.title || "Conversation";
  for (const a of document.querySelectorAll("#conversations a")) {
    a.classList.toggle("active", a.getAttribute("href") === `#c=${encodeURIComponent(convId)}`);
  }
  const [{ messages }, run] = await Promise.all([
    api("GET", `/v1/conversations/${convId}/messages`),
    runId ? api("GET", `/v1/runs/${runId}`).then((r) => r.run).catch(() => null) : null,
  ]);
  if (state.convId !== convId) return;
  $("#empty").hidden = messages.length > 0 || !!run;
  const live = run && follow && !TERMINAL_STATUS.has(run.status);
  for (const m of messages) {
    if (m.role === "tool") continue;
    if (live && m.role === "assistant" && m.runId === run.id) continue;
    bubble(m.role, m.content);
  }
  if (live) {
    // A refresh mid-run: redraw what this tab had seen, then continue from its last sequence.
    const view = new RunView($("#chat"), run.id);
    state.view = view;
    view.restore();
    view.bubble.classList.add("streaming");
    view.applyRun(run);
    view.persist();
    view.follow();
  } else if (run) {
    setRunStatus(run.status);
  }
  scrollDown();
}

async function send(text) {
  text = text.trim();
  if (!text) return;
  $("#send").disabled = true;
  try {
    if (!state.convId) {
      const { conversation } = await api("POST", "/v1/conversations", { title: text.slice(0, 60) });
      state.conversations.unshift(conversation);
      await openConversation(conversation.id, null);
      loadConversations();
    }
    state.view?.close();
    $("#empty").hidden = true;
    bubble("user", text);
    const view = new RunView($("#chat"), null);
    state.view = view;
    setRunStatus("queued");
    // One request starts the run and streams its events (Accept: text/event-stream).
    const res = await fetch(`/v1/conversations/${state.convId}/runs`, {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(startBody(text)),
      signal: view.abort.signal,
    });
    if (!res.ok) {
      await parse(res);
      return;
    }
    view.runId = res.headers.get("X-Run-Id");
    writeHash(state.convId, view.runId);
    view.persist();
    view.follow(res).then(() => loadConversations());
  } catch (err) {
    bubble("assistant", `⚠ ${err.message}`);
  } finally {
    $("#send").disabled = false;
  }
}

// The start request's body: the picked agent, unless none could be listed (the runtime's default).
function startBody(text) {
  const body = { text, idempotencyKey: newKey() };
  if (state.agent) body.agent = state.agent;
  return body;
}

// ---- agents --------------------------------------------------------------------------------

// Fill the picker from GET /v1/agents: the last one picked if still offered, else the default.
async function loadAgents() {
  const picker = $("#agent");
  let listed;
  try {
    listed = await api("GET", "/v1/agents");
  } catch (err) {
    if (err.status === 401) throw err;
    picker.hidden = true; // an older gateway or a runtime hiccup: start runs on the default
    state.agent = "";
    return;
  }
  const { agents, defaultAgent } = listed;
  picker.replaceChildren();
  for (const a of agents) {
    const opt = document.createElement("option");
    opt.value = a.name;
    opt.textContent = a.name;
    const writes = a.tools.filter((t) => t.effect === "write").map((t) => t.name);
    opt.title = `${a.description}${writes.length ? ` (asks before: ${writes.join(", ")})` : ""}`;
    picker.append(opt);
  }
  const remembered = localStorage.getItem("tether.agent");
  const names = agents.map((a) => a.name);
  state.agent = names.includes(remembered) ? remembered : names.includes(defaultAgent) ? defaultAgent : names[0] || "";
  picker.value = state.agent;
  picker.title = agents.find((a) => a.name === state.agent)?.description || "";
  picker.hidden = agents.length === 0;
}

// ---- sign-in -------------------------------------------------------------------------------

function signOut() {
  localStorage.removeItem("tether.token");
  localStorage.removeItem("tether.user");
  state.view?.close();
  $("#shell").hidden = true;
  $("#login").hidden = false;
}

async function signIn(event) {
  event.preventDefault();
  $("#login-error").textContent = "";
  const pasted = $("#login-token").value.trim();
  const user = $("#login-user").value.trim();
  try {
    if (pasted) {
      localStorage.setItem("tether.token", pasted);
      localStorage.setItem("tether.user", user || "token");
    } else {
      const res = await fetch("/v1/dev/token", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ user }),
      });
      const json = await parse(res);
      localStorage.setItem("tether.token", json.token);
      localStorage.setItem("tether.user", json.user);
    }
    await start();
  } catch (err) {
    $("#login-error").textContent =
      err.status === 404 ? "Dev sign-in is off here: paste a token." : err.message;
  }
}

async function start() {
  if (!token()) {
    signOut();
    return;
  }
  state.user = localStorage.getItem("tether.user") || "";
  $("#me-name").textContent = state.user;
  $("#login").hidden = true;
  $("#shell").hidden = false;
  await Promise.all([loadConversations(), loadAgents()]);
  const { conv, run } = readHash();
  if (conv) await openConversation(conv, run);
}

function wire() {
  $("#login-form").addEventListener("submit", signIn);
  $("#logout").addEventListener("click", signOut);
  $("#new-conversation").addEventListener("click", () => openConversation(null, null));
  $("#cancel-run").addEventListener("click", async () => {
    const runId = state.view?.runId;
    if (!runId) return;
    $("#cancel-run").disabled = true;
    try {
      await api("POST", `/v1/runs/${runId}/cancel`, { reason: "cancelled from the web UI" });
    } catch (err) {
      state.view?.setNote(err.message);
    } finally {
      $("#cancel-run").disabled = false;
    }
  });
  $("#agent").addEventListener("change", (e) => {
    state.agent = e.target.value;
    localStorage.setItem("tether.agent", state.agent);
    e.target.title = e.target.selectedOptions[0]?.title || "";
  });
  const input = $("#input");
  $("#composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = input.value;
    input.value = "";
    send(text);
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("#composer").requestSubmit();
    }
  });
  for (const b of document.querySelectorAll(".suggestion")) {
    b.addEventListener("click", () => send(b.textContent));
  }
}

wire();
start().catch((err) => console.error(err));
