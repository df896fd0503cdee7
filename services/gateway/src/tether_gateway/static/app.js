// Tether's demo UI, on the JS client (served from /static/client/, the source of clients/js):
// sign-in, the agent picker, conversations, the composer and the top bar. A run's transcript is
// run_view.js, its cards card.js, and the stream that feeds it follow.js.
import { TetherClient } from "./client/index.js";
import { Approvals } from "./approvals.js";
import { follow, streamHooks } from "./follow.js";
import { RunView, TERMINAL_STATUS } from "./run_view.js";

const $ = (sel, root = document) => root.querySelector(sel);

const state = { user: "", conversations: [], convId: null, view: null, following: null, agent: "" };

// Cookie mode: sign-in trades the token for the gateway's HttpOnly session cookie at once and
// forgets it; no script (ours or injected) can read the session afterwards. The client keeps the
// session's CSRF token in memory for its POSTs. Only the agent choice is kept in localStorage.
const client = new TetherClient();
const approvals = new Approvals(client, { onError: (err) => err?.status === 401 && showLogin() });

// A 401 anywhere means the session is gone or bad: back to sign-in.
async function call(promise) {
  try {
    return await promise;
  } catch (err) {
    if (err?.status === 401) showLogin();
    throw err;
  }
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

function scrollDown() {
  const chat = $("#chat");
  chat.scrollTop = chat.scrollHeight;
}

// ---- one run: its view, and the follow loop that feeds it -----------------------------------

function newRunView() {
  const view = new RunView($("#chat"), {
    me: state.user,
    // The client's resume keeps one idempotency key for this answer across its own retries.
    send: (intr, decision, answer) => call(client.resume(view.runId, intr.id, decision, answer)),
    onStatus: setRunStatus,
    onChange: scrollDown,
  });
  return view;
}

function stopFollowing() {
  state.following?.close();
  state.following = null;
  state.view?.finish();
  state.view = null;
}

function startFollowing(view, source) {
  state.view = view;
  const following = follow(client, view, {
    ...source,
    onConnection: (kind) => state.following === following && setConnection(kind),
    onError: (err) => err?.status === 401 && showLogin(),
  });
  state.following = following;
  return following;
}

// ---- conversations and messages ------------------------------------------------------------

async function loadConversations() {
  const { conversations } = await call(client.listConversations({ pageSize: 50 }));
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
  stopFollowing();
  const chat = $("#chat");
  chat.replaceChildren($("#empty"));
  $("#empty").hidden = false;
  setRunStatus(null);
  setConnection("idle");
}

async function openConversation(convId, runId) {
  approvals.show(false);
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
    call(client.listMessages(convId)),
    runId ? client.getRun(runId).catch(() => null) : null,
  ]);
  if (state.convId !== convId) return;
  $("#empty").hidden = messages.length > 0 || !!run;
  const live = run && !TERMINAL_STATUS.has(run.status);
  for (const m of messages) {
    if (m.role === "tool") continue;
    if (live && m.role === "assistant" && m.runId === run.id) continue;
    bubble(m.role, m.content);
  }
  if (live) {
    // A reload mid-run: the run's log is replayed from its first event, so steps, text, cards and
    // the records of decisions come back as they were, then it goes on live.
    const view = newRunView();
    view.runId = run.id;
    setRunStatus(run.status);
    startFollowing(view, { runId: run.id }).done.then(() => afterRun(view));
  } else if (run) {
    setRunStatus(run.status);
  }
  scrollDown();
}

// A run started while another of the conversation was active (the agent's concurrent_runs
// policy) may wait for it, or have stopped it: the stream says neither, so both runs are read.
async function showIfWaiting(view, earlier) {
  const [run, before] = await Promise.all([
    client.getRun(view.runId).catch(() => null),
    earlier ? client.getRun(earlier).catch(() => null) : null,
  ]);
  if (state.view !== view) return;
  if (run?.status === "waiting") view.markWaiting(earlier);
  if (before && (before.status === "cancelled" || before.cancelRequested)) {
    view.setNote(`The earlier run (${earlier}) was stopped for this message.`);
  }
}

async function afterRun(view) {
  if (state.view === view) await loadConversations().catch(() => {});
}

async function send(text) {
  text = text.trim();
  if (!text) return;
  $("#send").disabled = true;
  try {
    if (!state.convId) {
      const conversation = await call(client.createConversation({ title: text.slice(0, 60) }));
      state.conversations.unshift(conversation);
      await openConversation(conversation.id, null);
      loadConversations().catch(() => {});
    }
    // The run this page was following, if it had not ended: a new run may wait for it, or stop it.
    const earlier = state.view && !state.view.terminal ? state.view.runId : null;
    stopFollowing();
    $("#empty").hidden = true;
    bubble("user", text);
    const view = newRunView();
    state.view = view;
    setRunStatus("queued");
    // One request starts the run and streams its events; the stream reconnects on its own.
    const hooks = streamHooks((kind) => state.view === view && setConnection(kind));
    const stream = await call(
      client.startRun(state.convId, text, { agent: state.agent || undefined, stream: true, ...hooks }),
    );
    view.runId = stream.runId;
    if (state.view !== view) return stream.close(); // the user moved on meanwhile
    writeHash(state.convId, view.runId);
    startFollowing(view, { stream }).done.then(() => afterRun(view));
    showIfWaiting(view, earlier);
  } catch (err) {
    bubble("assistant", `⚠ ${err.message}`);
  } finally {
    $("#send").disabled = false;
  }
}

// ---- agents --------------------------------------------------------------------------------

// Fill the picker from GET /v1/agents: the last one picked if still offered, else the default.
async function loadAgents() {
  const picker = $("#agent");
  let listed;
  try {
    listed = await call(client.listAgents());
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

function showLogin() {
  stopFollowing();
  $("#shell").hidden = true;
  $("#login").hidden = false;
}

async function signOut() {
  approvals.stop();
  await client.closeSession().catch((err) => console.warn("sign-out:", err.message));
  showLogin();
}

async function signIn(event) {
  event.preventDefault();
  $("#login-error").textContent = "";
  const tokenField = $("#login-token");
  const pasted = tokenField.value.trim();
  tokenField.value = "";
  try {
    // The token lives only in this function: traded for the session cookie, then dropped.
    const token = pasted || (await client.devToken($("#login-user").value.trim())).token;
    enter(await client.openSession(token));
    await loadShell();
  } catch (err) {
    $("#login-error").textContent = err.status === 404 ? "Dev sign-in is off here: paste a token." : err.message;
  }
}

function enter(session) {
  state.user = session.user;
  $("#me-name").textContent = state.user;
  $("#login").hidden = true;
  $("#shell").hidden = false;
  approvals.start();
}

async function loadShell() {
  await Promise.all([loadConversations(), loadAgents()]);
  const { conv, run } = readHash();
  if (conv) await openConversation(conv, run);
}

async function start() {
  // Pages before the cookie session kept the bearer here: never leave it behind.
  localStorage.removeItem("tether.token");
  localStorage.removeItem("tether.user");
  const session = await client.session();
  if (!session) {
    showLogin();
    return;
  }
  enter(session);
  await loadShell();
}

function wire() {
  $("#login-form").addEventListener("submit", signIn);
  $("#logout").addEventListener("click", signOut);
  $("#new-conversation").addEventListener("click", () => openConversation(null, null));
  $("#open-approvals").addEventListener("click", () => approvals.show(true));
  $("#cancel-run").addEventListener("click", async () => {
    const view = state.view;
    if (!view?.runId) return;
    $("#cancel-run").disabled = true;
    try {
      await call(client.cancel(view.runId, "cancelled from the web UI"));
    } catch (err) {
      view.setNote(err.message);
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
