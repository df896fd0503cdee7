// ONE script with the official `@langchain/langgraph-sdk` Client, unmodified, against any server
// of the LangGraph Agent Server API (test_langgraph_sdk_servers.py runs it against Tether's two
// gateway pods and against `langgraph dev`): stream the benchmark's graph to its interrupt on pod
// A, join the stream on pod B from several cut points (`lastEventId`), resume on pod B twice at
// once, read the final state. It checks nothing: it prints what it saw as RESULT <json> and the
// test asserts (strictly for Tether) and reports.
// Usage: node langgraph_sdk_servers.mjs <url A> <url B> <bearer token or ""> <graph> <tokens>
import { Client } from "@langchain/langgraph-sdk";

const [urlA, urlB, token, graph, tokens] = process.argv.slice(2);
const MODES = ["values", "updates", "messages-tuple", "custom"];

const client = (apiUrl) =>
  new Client({ apiUrl, defaultHeaders: token ? { Authorization: `Bearer ${token}` } : {} });

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

const wire = (parts) => JSON.stringify(parts.map((p) => [p.event, p.data, p.id]));
const textOf = (parts) =>
  parts
    .filter((p) => p.event === "messages" && ["AIMessageChunk", "ai"].includes(p.data[0]?.type))
    .map((p) => p.data[0].content)
    .join("");

const a = client(urlA);
const b = client(urlB);
const t = (await a.threads.create()).thread_id;
const first = await collect(
  a.runs.stream(t, graph, {
    input: { messages: [{ role: "user", content: `stream ${tokens} deltas` }] },
    streamMode: MODES,
    streamResumable: true,
  }),
);
const runId = first[0].data.run_id;
const updates = first.filter((p) => p.event === "updates").map((p) => p.data);
const interrupt = updates.at(-1)?.__interrupt__?.[0] ?? null;
const pausedRun = (await b.runs.get(t, runId)).status;
const pausedThread = (await b.threads.get(t)).status;

const n = first.length;
const joins = [];
for (const cut of [...new Set([0, 1, Math.floor(n / 2), n - 1, n])].sort((x, y) => x - y)) {
  const lastEventId = cut === 0 ? "0" : first[cut - 1].id;
  try {
    const joined = await collect(b.runs.joinStream(t, runId, { lastEventId, streamMode: MODES }));
    joins.push({ cut, exact: wire(joined) === wire(first.slice(cut)), error: "" });
  } catch (err) {
    joins.push({ cut, exact: false, error: String(err).slice(0, 100) });
  }
}

const resume = () =>
  collect(b.runs.stream(t, graph, { command: { resume: true }, streamMode: MODES }));
const settled = await Promise.allSettled([resume(), resume()]);
const answered = settled.filter((s) => s.status === "fulfilled").map((s) => s.value);

let threadStatus = "";
for (let i = 0; i < 100; i++) {
  threadStatus = (await a.threads.get(t)).status;
  if (threadStatus === "idle") break;
  await new Promise((r) => setTimeout(r, 100));
}
const final = (await a.threads.getState(t)).values;
const runs = (await a.runs.list(t)).map((r) => r.status);

const ids = first.map((p) => p.id);
console.log(
  `RESULT ${JSON.stringify({
    events: first.map((p) => p.event),
    ids,
    text: textOf(first),
    interruptKind: interrupt?.value?.kind ?? null,
    lastIsStateWithInterrupt:
      first.at(-1).event === "values" &&
      JSON.stringify(first.at(-1).data.__interrupt__) === JSON.stringify([interrupt]),
    pausedRun,
    pausedThread,
    joins,
    resumesAnswered: answered.length,
    resumeErrors: settled.filter((s) => s.status === "rejected").map((s) => String(s.reason).slice(0, 100)),
    resumesEqual: answered.length === 2 && wire(answered[0]) === wire(answered[1]),
    resumedNewRun: answered.length > 0 && answered[0][0].event === "metadata" && answered[0][0].data.run_id !== runId,
    threadStatus,
    finalAnswer: final?.messages?.at(-1)?.content ?? null,
    runs,
  })}`,
);
