// A chat page on `useStream` from `@langchain/langgraph-sdk/react`, unmodified, against Tether's
// /langgraph mount: `?api=<gateway>/langgraph&token=<bearer>[&thread=<id>]`. The thread id is
// kept in the URL and `reconnectOnMount` keeps the running run's id in sessionStorage, so a
// reload in the middle of a stream rejoins it (useStream's joinStream).
import { useStream } from "@langchain/langgraph-sdk/react";
import { StrictMode, useState } from "react";
import { createRoot } from "react-dom/client";

const params = new URLSearchParams(window.location.search);
const API_URL = params.get("api");
// One object for the page's life: useStream makes a new Client whenever it changes.
const HEADERS = { Authorization: `Bearer ${params.get("token")}` };

function setThreadInUrl(threadId) {
  const url = new URL(window.location.href);
  url.searchParams.set("thread", threadId);
  window.history.replaceState(null, "", url);
}

function text(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => (typeof part === "string" ? part : (part.text ?? ""))).join("");
}

function Chat() {
  const [threadId, setThreadId] = useState(params.get("thread"));
  const [draft, setDraft] = useState("");
  const stream = useStream({
    apiUrl: API_URL,
    defaultHeaders: HEADERS,
    assistantId: "opspilot",
    threadId,
    onThreadId: (id) => {
      setThreadId(id);
      setThreadInUrl(id);
    },
    reconnectOnMount: true,
  });
  const interrupt = stream.interrupt;
  const send = (event) => {
    event.preventDefault();
    stream.submit({ messages: [{ type: "human", content: draft }] });
    setDraft("");
  };
  return (
    <main>
      <ol id="messages">
        {stream.messages.map((m) => (
          <li key={m.id} className="message" data-id={m.id} data-type={m.type}>
            {text(m.content)}
          </li>
        ))}
      </ol>
      {interrupt?.value && (
        <section id="interrupt" data-id={interrupt.id}>
          <h2 id="interrupt-title">{interrupt.value.title}</h2>
          <p id="interrupt-kind">{interrupt.value.kind}</p>
          <button
            id="approve"
            type="button"
            onClick={() => stream.submit(undefined, { command: { resume: true } })}
          >
            Approve
          </button>
        </section>
      )}
      <form id="ask" onSubmit={send}>
        <input id="input" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit" disabled={stream.isLoading || !draft}>
          Send
        </button>
      </form>
      <p id="status" data-loading={String(stream.isLoading)} data-thread={threadId ?? ""}>
        {stream.isLoading ? "streaming" : "idle"}
      </p>
      {stream.error != null && <pre id="error">{String(stream.error?.message ?? stream.error)}</pre>}
    </main>
  );
}

createRoot(document.getElementById("root")).render(
  <StrictMode>
    <Chat />
  </StrictMode>,
);
