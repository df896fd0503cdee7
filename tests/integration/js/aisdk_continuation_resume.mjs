// useChat's resume inside a continuation, with the official `ai` chat client (AbstractChat +
// DefaultChatTransport, what useChat runs), unmodified, on two gateway pods:
// 1. a turn on pod A streams up to the write tool's approval request;
// 2. the approval on pod A (addToolApprovalResponse; the client sends it by itself): its
//    continuation's stream is cut after the continuation's first words, as a dropped connection;
// 3. a fresh chat on pod B with the messages the cut chat kept (a reload) calls resumeStream():
//    GET .../stream replays the whole run as the one message from its `start`, then live. Beside
//    it, the same GET read raw on pod A, and re-read with Last-Event-ID at cut points inside the
//    continuation on pod B: exactly the tail each time.
// Prints RESULT <json>.
// Usage: node aisdk_continuation_resume.mjs <gateway A url> <gateway B url> <bearer token> <service>
import { randomUUID } from "node:crypto";
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";

const [baseA, baseB, token, service] = process.argv.slice(2);
const AUTH = { Authorization: `Bearer ${token}` };

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

// The state useChat keeps in React, kept in plain fields (what @ai-sdk/react's ReactChatState does).
class PlainState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (m) => void (this.messages = this.messages.concat(m));
  popMessage = () => void (this.messages = this.messages.slice(0, -1));
  replaceMessage = (i, m) =>
    void (this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)]);
  snapshot = (v) => structuredClone(v);
}

class NodeChat extends AbstractChat {
  constructor({ messages = [], ...init }) {
    super({ ...init, state: new PlainState(messages) });
    this.errors = [];
  }
}

// A fetch whose POST response is cut once its body has shown `until`: the bytes read so far
// reach the client, then the connection fails (as a network drop or a page going away).
function cuttingFetch(until, seen) {
  return async (url, init) => {
    const ctrl = new AbortController();
    const resp = await fetch(url, { ...init, signal: ctrl.signal });
    if (init?.method !== "POST" || !resp.body) return resp;
    const reader = resp.body.getReader();
    let text = "";
    let cut = false;
    const body = new ReadableStream({
      async pull(out) {
        if (cut) {
          ctrl.abort();
          out.error(new TypeError("network error: the connection was cut"));
          return;
        }
        const { value, done } = await reader.read();
        if (done) return out.close();
        text += new TextDecoder().decode(value);
        out.enqueue(value);
        if (text.includes(until)) {
          cut = true;
          seen.push(text);
        }
      },
    });
    return new Response(body, { status: resp.status, headers: resp.headers });
  };
}

const chatAt = (base, id, messages = [], fetchImpl = undefined) => {
  const chat = new NodeChat({
    id,
    messages: structuredClone(messages),
    transport: new DefaultChatTransport({
      api: `${base}/ai-sdk/opspilot/chat`,
      headers: AUTH,
      ...(fetchImpl ? { fetch: fetchImpl } : {}),
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (e) => chat.errors.push(String(e)),
  });
  return chat;
};

const last = (chat) => chat.messages.at(-1);
const toolParts = (m) => m.parts.filter((p) => p.type.startsWith("tool-"));
const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const settled = async (chat) => {
  for (let i = 0; i < 6000 && chat.status !== "ready" && chat.status !== "error"; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
};

// The raw SSE of a response: [{id, data}] (heartbeats and `retry:` have no data line).
function sse(text) {
  const out = [];
  for (const block of text.split("\n\n")) {
    let id = null;
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("id: ")) id = line.slice(4);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    if (data.length) out.push({ id, data: data.join("\n") });
  }
  return out;
}

async function resumeRaw(base, chatId, lastEventId) {
  const headers = { ...AUTH, ...(lastEventId == null ? {} : { "Last-Event-ID": lastEventId }) };
  const resp = await fetch(`${base}/ai-sdk/opspilot/chat/${chatId}/stream`, { headers });
  if (resp.status === 204) return { status: 204, events: [] };
  if (resp.status !== 200) throw new Error(`resume ${resp.status} ${await resp.text()}`);
  return { status: 200, events: sse(await resp.text()) };
}

const out = {};
const chatId = randomUUID();

// 1. The turn on pod A, up to the approval request.
const seen = [];
const chatA = chatAt(baseA, chatId, [], cuttingFetch('"text-delta"', seen));
await chatA.sendMessage({ text: `restart the abnormal ${service} instance` });
await settled(chatA);
check(chatA.status === "ready", `chat A ${chatA.status} ${chatA.errors}`);
const asked = last(chatA);
const approval = toolParts(asked).find((p) => p.state === "approval-requested")?.approval;
check(approval, `an approval request: ${JSON.stringify(asked.parts)}`);
check(seen.length === 0, "the first stretch has no text: it was not cut");
out.asked = { id: asked.id, parts: asked.parts.map((p) => p.type) };

// 2. Approve on pod A; the continuation is cut after its first words.
await chatA.addToolApprovalResponse({ id: approval.id, approved: true });
await settled(chatA);
check(seen.length === 1, `the continuation was cut: ${chatA.status} ${chatA.errors}`);
const head = sse(seen[0]);
const cutAt = Date.now();
out.cut = {
  status: chatA.status,
  errors: chatA.errors.length,
  parts: head.map((e) => (e.data === "[DONE]" ? "[DONE]" : JSON.parse(e.data).type)),
  ids: head.map((e) => e.id),
};

// 3. A reload on pod B: a fresh chat with the messages the cut one kept resumes the stream.
const fresh = chatAt(baseB, chatId, chatA.messages);
const [whole] = await Promise.all([resumeRaw(baseA, chatId), fresh.resumeStream()]);
await settled(fresh);
out.resumedAfterMs = Date.now() - cutAt; // the rest of the answer: how long the turn stayed active
const m = last(fresh);
out.resumed = {
  status: fresh.status,
  errors: fresh.errors,
  count: fresh.messages.length,
  id: m.id,
  parts: m.parts.map((p) => p.type),
  tools: toolParts(m).map((p) => ({ type: p.type, state: p.state, output: p.output, approval: p.approval })),
  text: textOf(m),
};
out.whole = { status: whole.status, ids: whole.events.map((e) => e.id), data: whole.events.map((e) => e.data) };
check(whole.status === 200 && whole.events.length > 0, `the turn was still active at the resume: ${whole.status}`);

// Last-Event-ID on pod B at cut points inside the continuation: exactly the tail.
const n = whole.events.length;
const from = whole.events.findIndex((e) => e.id === head[0]?.id);
out.cuts = [];
for (const cut of [from + 1, Math.floor((from + n) / 2), n - 1, n]) {
  const tail = await resumeRaw(baseB, chatId, whole.events[cut - 1].id);
  out.cuts.push({ cut, status: tail.status, exact: JSON.stringify(tail.events) === JSON.stringify(whole.events.slice(cut)) });
}
console.log(`RESULT ${JSON.stringify(out)}`);
