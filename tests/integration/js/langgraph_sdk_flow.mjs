// The official `@langchain/langgraph-sdk` Client, unmodified, against Tether's /langgraph mount
// on two gateway pods: stream the opspilot agent to its interrupt on pod A, join the stream on
// pod B from several cut points (each join must be exactly the tail after its `lastEventId`),
// resume on pod B twice at once (one answer: both streams the same), then list and join the
// finished runs. Prints RESULT <json> for the test, which checks the side effect in the database.
// Usage: node langgraph_sdk_flow.mjs <gateway A url> <gateway B url> <bearer token> <service>
import { Client } from "@langchain/langgraph-sdk";

const [baseA, baseB, token, service] = process.argv.slice(2);
const MODES = ["values", "updates", "messages-tuple", "custom"];

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

const client = (base) =>
  new Client({ apiUrl: `${base}/langgraph`, defaultHeaders: { Authorization: `Bearer ${token}` } });

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

const wire = (parts) => JSON.stringify(parts.map((p) => [p.event, p.data, p.id]));

const a = client(baseA);
const b = client(baseB);

const assistants = await a.assistants.search();
const opspilot = assistants.find((x) => x.graph_id === "opspilot");
check(opspilot, `opspilot among the assistants (${JSON.stringify(assistants)})`);
const thread = await a.threads.create();
const t = thread.thread_id;

const created = [];
const first = await collect(
  a.runs.stream(t, opspilot.assistant_id, {
    input: { messages: [{ role: "user", content: `restart the abnormal ${service} instance` }] },
    streamMode: MODES,
    onRunCreated: (meta) => created.push(meta),
  }),
);
check(first[0].event === "metadata", `metadata first (${first[0].event})`);
const runId = first[0].data.run_id;
const ids = first.map((p) => p.id);
check(ids.every(Boolean) && new Set(ids).size === ids.length, "every event has its own id");
const updates = first.filter((p) => p.event === "updates").map((p) => p.data);
const interrupt = updates.at(-1).__interrupt__?.[0];
check(interrupt, `the last update is the interrupt (${JSON.stringify(updates.at(-1))})`);
const last = first.at(-1);
check(last.event === "values" && JSON.stringify(last.data.__interrupt__) === JSON.stringify([interrupt]),
  "the stream ends with the state and its interrupt");

const pausedRun = await b.runs.get(t, runId);
const pausedThread = await b.threads.get(t);
const state = await b.threads.getState(t);

// Joins on the other pod, from several cut points: each is exactly the tail after its cursor.
const cuts = [0, 1, Math.floor(first.length / 2), first.length - 1, first.length];
const joins = [];
for (const cut of cuts) {
  const lastEventId = cut === 0 ? "0" : first[cut - 1].id;
  const joined = await collect(b.runs.joinStream(t, runId, { lastEventId, streamMode: MODES }));
  joins.push({ cut, exact: wire(joined) === wire(first.slice(cut)), count: joined.length });
}
// One mode as a string, and no mode at all (every mode Tether streams: the same four here).
const oneMode = await collect(b.runs.joinStream(t, runId, { lastEventId: "0", streamMode: "updates" }));
const noMode = await collect(b.runs.joinStream(t, runId, { lastEventId: "0" }));
const oneModeExact =
  wire(oneMode) === wire(first.filter((p) => p.event === "metadata" || p.event === "updates"));

// Two resumes at once on pod B: one answer, one restart; both streams carry the same events.
const resume = () => collect(b.runs.stream(t, "opspilot", { command: { resume: true }, streamMode: MODES }));
const [r1, r2] = await Promise.all([resume(), resume()]);
const resumedId = r1[0].data.run_id;
const text = r1
  .filter((p) => p.event === "messages")
  .map((p) => p.data[0].content)
  .join("");
const finalMessages = r1.at(-1).data.messages;
const rejoined = await collect(a.runs.joinStream(t, resumedId, { lastEventId: "0", streamMode: MODES }));
const listed = await a.runs.list(t);

const result = {
  threadId: t,
  runId,
  createdRunId: created[0]?.run_id ?? null,
  createdThreadId: created[0]?.thread_id ?? null,
  events: first.map((p) => p.event),
  interruptKind: interrupt.value.kind,
  interruptId: interrupt.id,
  pausedRunStatus: pausedRun.status,
  pausedThreadStatus: pausedThread.status,
  stateInterrupts: state.tasks?.[0]?.interrupts?.map((i) => i.id) ?? [],
  joins,
  oneModeExact,
  noModeExact: wire(noMode) === wire(first),
  resumesEqual: wire(r1) === wire(r2),
  resumedId,
  resumedFirstEvent: r1[0].event,
  resumedHasInterrupt: r1.some((p) => ["values", "updates"].includes(p.event) && "__interrupt__" in p.data),
  resumedTools: r1
    .filter((p) => p.event === "updates")
    .flatMap((p) => p.data.tools?.messages ?? [])
    .map((m) => m.name),
  text,
  finalText: finalMessages.at(-1).content,
  finalType: finalMessages.at(-1).type,
  rejoinedExact: wire(rejoined) === wire(r1),
  listed: listed.map((r) => [r.run_id, r.status]),
  threadStatus: (await a.threads.get(t)).status,
};
console.log(`RESULT ${JSON.stringify(result)}`);
