// A chat page on the official `@ag-ui/client` HttpAgent in plain React, against Tether's /agui
// mount: `?api=<gateway>/agui/<agent>&token=<bearer>[&thread=<id>]`. The thread id is kept in the
// URL and the latest run's id in sessionStorage, so a reload finds the run again: AG-UI's own
// `connectAgent` hook, which HttpAgent leaves unimplemented, is Tether's reconnect here
// (GET <api>/runs/<runId>/events: the run's events from its start, then live), and a card that
// waits comes back with the run's RUN_FINISHED interrupt outcome.
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { StrictMode, useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";
import { EMPTY, defer, from, switchMap } from "rxjs";

const params = new URLSearchParams(window.location.search);
const API_URL = params.get("api");
const HEADERS = { Authorization: `Bearer ${params.get("token")}` };

class TetherAgent extends HttpAgent {
  // Tether's extension: the run's events again (204 once it is over with nothing left).
  connect(input) {
    const url = `${this.url}/runs/${encodeURIComponent(input.runId)}/events`;
    return defer(() => from(this.fetch(url, { headers: this.headers }))).pipe(
      switchMap((resp) =>
        resp.status === 204 ? EMPTY : transformHttpEventStream(runHttpRequest(async () => resp)),
      ),
    );
  }
}

const runKey = (thread) => `agui-run:${thread}`;

function threadFromUrl() {
  const known = params.get("thread");
  if (known) return known;
  const made = crypto.randomUUID();
  const url = new URL(window.location.href);
  url.searchParams.set("thread", made);
  window.history.replaceState(null, "", url);
  return made;
}

function text(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => part.text ?? "").join("");
}

function Chat() {
  const threadId = useMemo(threadFromUrl, []);
  const agent = useMemo(() => new TetherAgent({ url: API_URL, headers: HEADERS, threadId }), [threadId]);
  const [messages, setMessages] = useState([]);
  const [pending, setPending] = useState([]);
  const [running, setRunning] = useState(false);
  const [error, setError] = useState(null);
  const [draft, setDraft] = useState("");

  const go = async (start) => {
    setRunning(true);
    setError(null);
    try {
      await start({
        onMessagesChanged: ({ messages: now }) => setMessages([...now]),
      });
    } catch (err) {
      setError(String(err?.message ?? err));
    } finally {
      setPending([...agent.pendingInterrupts]);
      setMessages([...agent.messages]);
      setRunning(false);
    }
  };
  const run = (params) => {
    const runId = crypto.randomUUID();
    sessionStorage.setItem(runKey(threadId), runId); // before the request: a reload finds it
    return go((subscriber) => agent.runAgent({ ...params, runId }, subscriber));
  };

  useEffect(() => {
    const runId = sessionStorage.getItem(runKey(threadId));
    if (runId && !agent.isRunning) go((subscriber) => agent.connectAgent({ runId }, subscriber));
  }, [agent]);

  const send = (event) => {
    event.preventDefault();
    agent.addMessage({ id: crypto.randomUUID(), role: "user", content: draft });
    setMessages([...agent.messages]);
    setDraft("");
    run({});
  };
  const answer = (interrupt, payload) =>
    run({ resume: [{ interruptId: interrupt.id, status: "resolved", payload }] });
  const card = pending[0];
  return (
    <main>
      <ol id="messages">
        {messages.map((m) => (
          <li key={m.id} className="message" data-id={m.id} data-role={m.role}>
            {text(m.content)}
          </li>
        ))}
      </ol>
      {card && !running && (
        <section id="interrupt" data-id={card.id} data-reason={card.reason}>
          <h2 id="interrupt-message">{card.message}</h2>
          <button id="approve" type="button" onClick={() => answer(card, { decision: "approve" })}>
            Approve
          </button>
          <button id="reject" type="button" onClick={() => answer(card, { decision: "reject" })}>
            Reject
          </button>
        </section>
      )}
      <form id="ask" onSubmit={send}>
        <input id="input" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit" disabled={running || !draft || pending.length > 0}>
          Send
        </button>
      </form>
      <p id="status" data-running={String(running)} data-thread={threadId}>
        {running ? "running" : "idle"}
      </p>
      {error != null && <pre id="error">{error}</pre>}
    </main>
  );
}

createRoot(document.getElementById("root")).render(
  <StrictMode>
    <Chat />
  </StrictMode>,
);
