// A chat page on CopilotKit v2 (`@copilotkit/react-core/v2`: its provider, `useAgent` and
// `useInterrupt`) with Tether's /agui as a self-managed AG-UI agent: no CopilotKit runtime, no
// cloud. `?api=<gateway>/agui/<agent>&token=<bearer>[&thread=<id>]`. The thread id is kept in the
// URL and the latest run's id in sessionStorage, so a reload finds the run again (`connect`,
// Tether's reconnect: GET <api>/runs/<runId>/events) and useInterrupt shows a waiting card again.
import {
  CopilotKitProvider,
  HttpAgent,
  runHttpRequest,
  transformHttpEventStream,
  useAgent,
  useCopilotKit,
  useInterrupt,
} from "@copilotkit/react-core/v2";
import { StrictMode, useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";
import { EMPTY, defer, from, switchMap } from "rxjs";

const params = new URLSearchParams(window.location.search);
const runKey = (thread) => `agui-run:${thread}`;

class TetherAgent extends HttpAgent {
  // Each AG-UI run has its own runId (AG-UI 1.0: the resume is a new run). CopilotKit's
  // useInterrupt sends the interrupted run's id again with the answer, which Tether refuses
  // (409 CLIENT_ID_TAKEN: that id names the interrupted run): the answer gets a new one.
  prepareRunAgentInput(parameters) {
    const input = super.prepareRunAgentInput(parameters);
    return input.resume?.length ? { ...input, runId: crypto.randomUUID() } : input;
  }
  run(input) {
    sessionStorage.setItem(runKey(input.threadId), input.runId); // a reload finds it
    return super.run(input);
  }
  connectAgent(parameters, subscriber) {
    const runId = sessionStorage.getItem(runKey(this.threadId));
    return super.connectAgent({ ...parameters, runId }, subscriber);
  }
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

function Chat({ threadId }) {
  const { copilotkit } = useCopilotKit();
  const { agent } = useAgent({ agentId: "tether" });
  const [error, setError] = useState(null);
  const [draft, setDraft] = useState("");
  const go = (promise) => promise.catch((err) => setError(String(err?.message ?? err)));

  useEffect(() => {
    if (sessionStorage.getItem(runKey(threadId))) go(copilotkit.connectAgent({ agent }));
  }, [agent]);
  const card = useInterrupt({
    agentId: "tether",
    renderInChat: false,
    render: ({ interrupt, resolve }) => (
      <section id="interrupt" data-id={interrupt.id} data-reason={interrupt.reason}>
        <h2 id="interrupt-message">{interrupt.message}</h2>
        <button id="approve" type="button" onClick={() => go(resolve({ decision: "approve" }))}>
          Approve
        </button>
        <button id="reject" type="button" onClick={() => go(resolve({ decision: "reject" }))}>
          Reject
        </button>
      </section>
    ),
  });

  const send = (event) => {
    event.preventDefault();
    agent.addMessage({ id: crypto.randomUUID(), role: "user", content: draft });
    setDraft("");
    go(copilotkit.runAgent({ agent }));
  };
  const running = agent.isRunning;
  return (
    <main>
      <ol id="messages">
        {agent.messages.map((m) => (
          <li key={m.id} className="message" data-id={m.id} data-role={m.role}>
            {text(m.content)}
          </li>
        ))}
      </ol>
      {!running && card}
      <form id="ask" onSubmit={send}>
        <input id="input" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit" disabled={running || !draft || !!card}>
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

function App() {
  const threadId = useMemo(threadFromUrl, []);
  const agents = useMemo(() => {
    const headers = { Authorization: `Bearer ${params.get("token")}` };
    return { tether: new TetherAgent({ url: params.get("api"), headers, threadId }) };
  }, [threadId]);
  return (
    <CopilotKitProvider selfManagedAgents={agents}>
      <Chat threadId={threadId} />
    </CopilotKitProvider>
  );
}

createRoot(document.getElementById("root")).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
