// The official `ai` package's chat client (AbstractChat with a plain state, as useChat's Chat is,
// DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses), unmodified,
// against Tether's /ai-sdk mount on two gateway pods, driving the opspilot agent:
// 1. a turn on pod A streams up to the write tool's approval request (the stream finishes);
//    GET .../stream answers 204 (no turn is active while the card waits);
// 2. two chats (two tabs) approve on pod B at once: each request continues the same assistant
//    message (one restart, checked in the database), with the tool's output and the final text;
// 3. resume: a second turn's POST on pod A is cut after its first text, and a fresh chat on pod
//    B calls resumeStream(): the whole turn from its `start`, the same message as a full read;
//    the raw stream re-read with Last-Event-ID at several cut points is exactly its tail.
// 4. the interrupts the AI SDK has no part for, a choice (select_option) and a form
//    (provide_input): `data-tether-interrupt` parts, answered on the other pod with
//    sendMessage(undefined, {body: {tether: {resume: [...]}}}), the same message continued.
// Prints RESULT <json>.
// Usage: node aisdk_flow.mjs <gateway A url> <gateway B url> <bearer token> <service>
//        <choice service> <scale service>
import { randomUUID } from "node:crypto";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  uiMessageChunkSchema,
} from "ai";

const [baseA, baseB, token, service, choiceService, scaleService] = process.argv.slice(2);
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

const chatAt = (base, id, messages = []) => {
  const chat = new NodeChat({
    id,
    messages: structuredClone(messages),
    transport: new DefaultChatTransport({ api: `${base}/ai-sdk/opspilot/chat`, headers: AUTH }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (e) => chat.errors.push(String(e)),
  });
  return chat;
};

const last = (chat) => chat.messages.at(-1);
const toolParts = (m) => m.parts.filter((p) => p.type.startsWith("tool-"));
const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const waitReady = async (chat) => {
  for (let i = 0; i < 2000 && chat.status !== "ready" && chat.status !== "error"; i++) {
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

async function checkedParts(events) {
  for (const e of events) {
    if (e.data === "[DONE]") continue;
    const parsed = await uiMessageChunkSchema().validate(JSON.parse(e.data));
    check(parsed.success, `a valid part: ${e.data}`);
  }
}

async function resumeRaw(base, chatId, lastEventId) {
  const headers = { ...AUTH, ...(lastEventId == null ? {} : { "Last-Event-ID": lastEventId }) };
  const resp = await fetch(`${base}/ai-sdk/opspilot/chat/${chatId}/stream`, { headers });
  if (resp.status === 204) return { status: 204, events: [] };
  if (resp.status !== 200) throw new Error(`resume ${resp.status} ${await resp.text()}`);
  check(resp.headers.get("x-vercel-ai-ui-message-stream") === "v1", "the v1 header");
  return { status: 200, events: sse(await resp.text()) };
}

const out = {};
const chatId = randomUUID();

// 1. The turn on pod A, up to the approval request.
const chatA = chatAt(baseA, chatId);
await chatA.sendMessage({ text: `restart the abnormal ${service} instance` });
await waitReady(chatA);
check(chatA.status === "ready", `chat A ${chatA.status} ${chatA.errors}`);
const asked = last(chatA);
out.first = {
  role: asked.role,
  id: asked.id,
  parts: asked.parts.map((p) => p.type),
  tools: toolParts(asked).map((p) => ({ type: p.type, state: p.state, approval: p.approval, input: p.input })),
  text: textOf(asked),
};
out.whileWaiting = (await resumeRaw(baseB, chatId)).status;

// 2. Two tabs approve on pod B at the same time.
const tabs = [chatAt(baseB, chatId, chatA.messages), chatAt(baseB, chatId, chatA.messages)];
const approval = toolParts(asked).find((p) => p.state === "approval-requested").approval;
await Promise.all(tabs.map((t) => t.addToolApprovalResponse({ id: approval.id, approved: true })));
for (const t of tabs) await waitReady(t);
out.approved = tabs.map((t) => {
  const m = last(t);
  return {
    status: t.status,
    errors: t.errors,
    count: t.messages.length,
    id: m.id,
    parts: m.parts.map((p) => p.type),
    tools: toolParts(m).map((p) => ({ state: p.state, output: p.output, approval: p.approval })),
    text: textOf(m),
  };
});
out.afterDone = (await resumeRaw(baseB, chatId)).status;

// 3. A second turn: its POST on pod A cut after the first text; a fresh chat resumes on pod B.
// A long answer (150 pieces, 30 ms each): the resume must find the turn still active, also on a
// loaded machine (a short one could end before the GET, which then answers 204).
const question = { id: randomUUID(), role: "user", parts: [{ type: "text", text: "stream 150 deltas" }] };
const history = [...tabs[0].messages, question];
const ctrl = new AbortController();
const resp = await fetch(`${baseA}/ai-sdk/opspilot/chat`, {
  method: "POST",
  headers: { ...AUTH, "content-type": "application/json" },
  body: JSON.stringify({ id: chatId, messages: history, trigger: "submit-message" }),
  signal: ctrl.signal,
});
check(resp.status === 200, `second turn ${resp.status}`);
check(resp.headers.get("x-vercel-ai-ui-message-stream") === "v1", "the v1 header");
const reader = resp.body.getReader();
let head = "";
while (!head.includes('"text-delta"')) {
  const { value, done } = await reader.read();
  check(!done, `the turn has text: ${head}`);
  head += new TextDecoder().decode(value);
}
ctrl.abort();
const cutHead = sse(head.slice(0, head.lastIndexOf("\n\n") + 2));
const fresh = chatAt(baseB, chatId, history);
// Beside it, the same resume read raw on pod A: the whole turn from its `start`, with the ids.
const [whole] = await Promise.all([resumeRaw(baseA, chatId), fresh.resumeStream()]);
await waitReady(fresh);
const resumed = last(fresh);
out.resumed = {
  status: fresh.status,
  errors: fresh.errors,
  count: fresh.messages.length,
  role: resumed.role,
  id: resumed.id,
  text: textOf(resumed),
  headIds: cutHead.map((e) => e.id),
};
await checkedParts(whole.events);
out.whole = { status: whole.status, ids: whole.events.map((e) => e.id), data: whole.events.map((e) => e.data) };
const n = whole.events.length;
out.cuts = [];
for (const cut of [1, Math.floor(n / 2), n - 1, n]) {
  const tail = await resumeRaw(baseB, chatId, whole.events[cut - 1].id);
  out.cuts.push({
    cut,
    status: tail.status,
    exact: JSON.stringify(tail.events) === JSON.stringify(whole.events.slice(cut)),
  });
}

// 4. A choice and a form: each question answered on the other pod than the one that asked.
function answerFor(data) {
  if (data.reason === "select_option") return { value: data.responseSchema.properties.value.oneOf.at(-1).const };
  if (data.reason === "input_required") return { replicas: 3 };
  throw new Error(`no answer for ${JSON.stringify(data)}`);
}

async function questions(prompt) {
  const id = randomUUID();
  const pods = [baseA, baseB];
  let chat = chatAt(pods[0], id);
  await chat.sendMessage({ text: prompt });
  await waitReady(chat);
  const asked = [];
  for (let i = 1; i < 6; i++) {
    check(chat.status === "ready", `${prompt}: ${chat.status} ${chat.errors}`);
    const m = last(chat);
    const approval = toolParts(m).find((p) => p.state === "approval-requested");
    const question = m.parts.filter((p) => p.type === "data-tether-interrupt" && !p.data.answer).at(-1);
    if (!approval && !question) break;
    chat = chatAt(pods[i % 2], id, chat.messages); // the answer on the other pod
    if (approval) {
      asked.push("approval");
      await chat.addToolApprovalResponse({ id: approval.approval.id, approved: true });
    } else {
      asked.push(question.data.reason);
      const resume = [{ interruptId: question.id, status: "resolved", payload: answerFor(question.data) }];
      await chat.sendMessage(undefined, { body: { tether: { resume } } });
    }
    await waitReady(chat);
  }
  const m = last(chat);
  return {
    asked,
    count: chat.messages.length,
    errors: chat.errors,
    answered: m.parts.filter((p) => p.type === "data-tether-interrupt").map((p) => [p.data.reason, p.data.answer]),
    options: m.parts.find((p) => p.type === "data-tether-interrupt")?.data.responseSchema,
    parts: m.parts.map((p) => [p.type, p.state ?? p.data?.answer ?? ""]),
    text: textOf(m),
  };
}
out.choice = await questions(`restart the abnormal ${choiceService} instance`);
out.form = await questions(`scale ${scaleService}`);
console.log(`RESULT ${JSON.stringify(out)}`);
