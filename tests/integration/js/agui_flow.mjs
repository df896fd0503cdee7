// The official `@ag-ui/client` HttpAgent, unmodified, against Tether's /agui mount on two gateway
// pods, driving the opspilot agent:
// 1. approval: a run on pod A ends with RUN_FINISHED outcome interrupt; the raw stream read again
//    on pod B with `Last-Event-ID` at several cut points is exactly its tail (204 past its end);
//    two HttpAgents answer `resume[]` on pod B at once (one answer, the same events), while pod A
//    follows the resumed run live through GET .../events; the run finishes with the tool's result.
// 2. every other interrupt kind on the way: a choice (select_option) and a form (provide_input),
//    each answered by its responseSchema, the first run's stream cut mid-stream and finished on
//    the other pod from its `Last-Event-ID`.
// Prints RESULT <json>; the test checks the side effects in the database.
// Usage: node agui_flow.mjs <gateway A url> <gateway B url> <bearer token> <service> <service2>
//        <service3>
import { randomUUID } from "node:crypto";
import { EventSchema } from "@ag-ui/core/schemas";
import { HttpAgent } from "@ag-ui/client";

const [baseA, baseB, token, service, choiceService, scaleService] = process.argv.slice(2);
const AUTH = { Authorization: `Bearer ${token}` };

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

const agentAt = (base, threadId, initialMessages = []) =>
  new HttpAgent({ url: `${base}/agui/opspilot`, headers: AUTH, threadId, initialMessages });

// Run the agent; every event the client applied (after its own validation), in order.
async function run(agent, params) {
  const seen = [];
  await agent.runAgent(params, { onEvent: ({ event }) => void seen.push(event) });
  return seen;
}

// The raw SSE of a response: [{id, event}] (heartbeats and `retry:` have no data line).
async function sse(resp) {
  const text = await resp.text();
  const out = [];
  for (const block of text.split("\n\n")) {
    let id = null;
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("id: ")) id = line.slice(4);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    if (data.length) {
      const event = JSON.parse(data.join("\n"));
      EventSchema.parse(event); // the official schema: no nulls, the exact fields
      out.push({ id, event });
    }
  }
  return out;
}

async function events(base, runId, lastEventId, attempts = 1) {
  for (let i = 0; ; i++) {
    const headers = { ...AUTH, ...(lastEventId == null ? {} : { "Last-Event-ID": lastEventId }) };
    const resp = await fetch(`${base}/agui/opspilot/runs/${runId}/events`, { headers });
    if (resp.status === 404 && i + 1 < attempts) {
      await new Promise((r) => setTimeout(r, 20)); // the run is not named yet: its POST is on its way
      continue;
    }
    if (resp.status === 204) return { status: 204, events: [] };
    if (resp.status !== 200) throw new Error(`events ${runId}: ${resp.status} ${await resp.text()}`);
    check(resp.headers.get("content-type").startsWith("text/event-stream"), "an event stream");
    return { status: 200, events: await sse(resp) };
  }
}

const strip = (evs) => JSON.stringify(evs.map((e) => e.event ?? e));
const types = (evs) => evs.map((e) => (e.event ?? e).type);

function answerFor(interrupt) {
  const schema = interrupt.responseSchema;
  if (interrupt.reason === "tool_approval") return { decision: "approve" };
  if (interrupt.reason === "select_option") {
    return { value: schema.properties.value.oneOf.at(-1).const }; // the second instance
  }
  if (interrupt.reason === "input_required") return { replicas: 3 };
  throw new Error(`no answer for ${JSON.stringify(interrupt)}`);
}

// Cuts of a finished run's stream, read on `base`: each is exactly the tail after its id.
async function cutsExact(base, runId, full) {
  const n = full.length;
  const out = [];
  for (const cut of [1, Math.floor(n / 2), n - 1]) {
    const got = await events(base, runId, full[cut - 1].id);
    out.push({ cut, exact: JSON.stringify(got.events) === JSON.stringify(full.slice(cut)) });
  }
  const past = await events(base, runId, full[n - 1].id);
  out.push({ cut: n, exact: past.status === 204 });
  return out;
}

const result = {};

// -- 1. approval across pods --
{
  const threadId = randomUUID();
  const a = agentAt(baseA, threadId);
  a.addMessage({ id: randomUUID(), role: "user", content: `restart the abnormal ${service} instance` });
  const runId = randomUUID();
  const first = await run(a, { runId });
  const finished = first.at(-1);
  check(finished.type === "RUN_FINISHED" && finished.outcome?.type === "interrupt",
    `the run ends at the interrupt (${JSON.stringify(finished)})`);
  check(a.pendingInterrupts.length === 1, "the client holds the pending interrupt");
  const interrupt = a.pendingInterrupts[0];
  result.first = {
    types: types(first),
    runStarted: first[0],
    finishedRunId: finished.runId,
    finishedThreadId: finished.threadId,
    snapshot: first.find((e) => e.type === "MESSAGES_SNAPSHOT")?.messages,
    toolCalls: first.filter((e) => e.type === "TOOL_CALL_START").map((e) => e.toolCallId),
    results: first.filter((e) => e.type === "TOOL_CALL_RESULT").map((e) => e.toolCallId),
    interrupt,
  };

  // The same run read back on pod B: the events the client applied, each with its own id.
  const full = (await events(baseB, runId)).events;
  result.first.replayEqual = strip(full) === strip(first);
  result.first.ids = full.map((f) => f.id);
  result.first.cuts = await cutsExact(baseB, runId, full);

  // A resume that leaves the interrupt unanswered: the official client refuses it itself.
  try {
    await run(a.clone(), { runId: randomUUID() });
    result.unansweredRefused = false;
  } catch (err) {
    result.unansweredRefused = /pending interrupt/.test(String(err));
  }

  // The answer on pod B, twice at once (two tabs), while pod A follows the resumed run live.
  const b1 = agentAt(baseB, threadId, a.messages);
  b1.pendingInterrupts = a.pendingInterrupts;
  const b2 = b1.clone();
  const resume = [{ interruptId: interrupt.id, status: "resolved", payload: answerFor(interrupt) }];
  const [r1, r2] = [randomUUID(), randomUUID()];
  const live = events(baseA, r1, null, 250);
  const [s1, s2] = await Promise.all([run(b1, { runId: r1, resume }), run(b2, { runId: r2, resume })]);
  const followed = (await live).events;
  const withoutRunId = (evs) =>
    JSON.stringify(evs.map((e) => ({ ...e, runId: e.runId === undefined ? undefined : "_" })));
  result.resumed = {
    types: types(s1),
    runStarted: s1[0],
    snapshot: s1.find((e) => e.type === "MESSAGES_SNAPSHOT")?.messages,
    finished: s1.at(-1),
    twinSame: withoutRunId(s1) === withoutRunId(s2),
    liveEqual: strip(followed) === strip(s1),
    liveIdsUnique: new Set(followed.map((f) => f.id)).size === followed.length,
    text: s1.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join(""),
    toolResults: s1.filter((e) => e.type === "TOOL_CALL_RESULT").map((e) => e.content),
    toolCalls: s1.filter((e) => e.type === "TOOL_CALL_START").map((e) => e.toolCallId),
    results: s1.filter((e) => e.type === "TOOL_CALL_RESULT").map((e) => e.toolCallId),
    pendingAfter: b1.pendingInterrupts.length,
    messages: b1.messages.map((m) => m.role),
  };
  result.resumed.cuts = await cutsExact(baseA, r1, followed);
  result.approvalRuns = [runId, r1, r2];
}

// -- 2. a choice and a form, cut mid-stream --
async function questions(svc, prompt) {
  const threadId = randomUUID();
  const runId = randomUUID();
  // The first run raw, on pod A, dropped after its first two events; the rest read on pod B.
  const body = {
    threadId,
    runId,
    messages: [{ id: randomUUID(), role: "user", content: prompt }],
    tools: [],
    context: [],
    state: {},
    forwardedProps: { tether: { title: `ag-ui ${svc}` } },
  };
  const ctrl = new AbortController();
  const resp = await fetch(`${baseA}/agui/opspilot`, {
    method: "POST",
    headers: { ...AUTH, "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal: ctrl.signal,
  });
  check(resp.status === 200, `POST: ${resp.status}`);
  const reader = resp.body.getReader();
  let buffered = "";
  while (buffered.split("\n\n").filter((b) => b.includes("data: ")).length < 2) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += new TextDecoder().decode(value);
  }
  ctrl.abort();
  const head = (await sse(new Response(buffered.split("\n\n").filter((b) => b.includes("data: ")).slice(0, 2).join("\n\n")))).slice(0, 2);
  const tail = (await events(baseB, runId, head.at(-1).id)).events;
  const whole = (await events(baseB, runId)).events;
  const out = {
    cutExact: JSON.stringify([...head, ...tail]) === JSON.stringify(whole),
    reasons: [],
  };
  // Then the official client answers each interrupt by its responseSchema until the run is done.
  let last = whole.at(-1).event;
  const agent = agentAt(baseB, threadId);
  agent.pendingInterrupts = last.outcome?.interrupts ?? [];
  while (last.outcome?.type === "interrupt") {
    const interrupt = last.outcome.interrupts[0];
    out.reasons.push(interrupt.reason);
    out[interrupt.reason] = interrupt;
    const resume = [{ interruptId: interrupt.id, status: "resolved", payload: answerFor(interrupt) }];
    const seen = await run(agent, { runId: randomUUID(), resume });
    last = seen.at(-1);
  }
  out.end = last.outcome?.type ?? last.type;
  return out;
}

result.choice = await questions(choiceService, `restart the abnormal ${choiceService} instance`);
result.form = await questions(scaleService, `scale ${scaleService}`);

console.log(`RESULT ${JSON.stringify(result)}`);
