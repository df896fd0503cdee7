// A chat page on the AI SDK's `useChat` (@ai-sdk/react) with its DefaultChatTransport, against
// Tether's /ai-sdk mount: `?api=<gateway>/ai-sdk/<agent>/chat&token=<bearer>[&chat=<id>]`. The
// chat id is kept in the URL and the messages in sessionStorage (as an app keeps them in its own
// store), and `resume: true` asks GET <api>/<chatId>/stream after a reload: the active turn
// again from its `start`, then live. A write tool's approval is a tool part in state
// `approval-requested`; Approve / Reject answer it (addToolApprovalResponse, then useChat sends
// it by itself: lastAssistantMessageIsCompleteWithApprovalResponses).
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { StrictMode, useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";

const params = new URLSearchParams(window.location.search);
const API_URL = params.get("api");
const HEADERS = { Authorization: `Bearer ${params.get("token")}` };

function chatFromUrl() {
  const known = params.get("chat");
  if (known) return known;
  const made = crypto.randomUUID();
  const url = new URL(window.location.href);
  url.searchParams.set("chat", made);
  window.history.replaceState(null, "", url);
  return made;
}

const storeKey = (id) => `aisdk-chat:${id}`;
const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

function Chat() {
  const chatId = useMemo(chatFromUrl, []);
  const transport = useMemo(() => new DefaultChatTransport({ api: API_URL, headers: HEADERS }), []);
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id: chatId,
    messages: JSON.parse(sessionStorage.getItem(storeKey(chatId)) ?? "[]"),
    transport,
    resume: true,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [draft, setDraft] = useState("");
  useEffect(() => sessionStorage.setItem(storeKey(chatId), JSON.stringify(messages)), [messages]);

  const waiting = messages
    .at(-1)
    ?.parts.find((p) => p.type.startsWith("tool-") && p.state === "approval-requested");
  const send = (event) => {
    event.preventDefault();
    sendMessage({ text: draft });
    setDraft("");
  };
  const answer = (approved) => addToolApprovalResponse({ id: waiting.approval.id, approved });
  const busy = status === "submitted" || status === "streaming";
  return (
    <main>
      <ol id="messages">
        {messages.map((m) => (
          <li key={m.id} className="message" data-id={m.id} data-role={m.role}>
            {m.parts
              .filter((p) => p.type.startsWith("tool-"))
              .map((p) => (
                <span key={p.toolCallId} className="tool" data-tool={p.type} data-state={p.state}>
                  {typeof p.output === "string" ? p.output : ""}
                </span>
              ))}
            <span className="text">{textOf(m)}</span>
          </li>
        ))}
      </ol>
      {waiting && (
        <section id="approval" data-id={waiting.approval.id} data-tool={waiting.type}>
          <h2>Approve {waiting.type.slice(5)}: {waiting.input?.summary}?</h2>
          <button id="approve" type="button" onClick={() => answer(true)}>
            Approve
          </button>
          <button id="reject" type="button" onClick={() => answer(false)}>
            Reject
          </button>
        </section>
      )}
      <form id="ask" onSubmit={send}>
        <input id="input" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit" disabled={busy || !draft || !!waiting}>
          Send
        </button>
      </form>
      <p id="status" data-status={status} data-chat={chatId}>
        {status}
      </p>
      {error != null && <pre id="error">{String(error.message ?? error)}</pre>}
    </main>
  );
}

createRoot(document.getElementById("root")).render(
  <StrictMode>
    <Chat />
  </StrictMode>,
);
