// node --test clients/js/test/graph: startRun's `input` and resume's `value` against a REAL gateway
// and runtime with a LangGraph graph loaded (started by tests/integration/test_js_client.py).
// Environment: TETHER_GATEWAY_URL the gateway; TETHER_TOKEN a token for alice.
// The graph (`jsgraph`): `triage` notes the input's title and raises its priority, `ask` asks
// interrupt({title, target}) and stores the answer as `decision`.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TetherClient } from "@tether/client";

const { TETHER_GATEWAY_URL: base, TETHER_TOKEN: token } = process.env;
assert.ok(base && token, "run me from tests/integration/test_js_client.py");

const client = new TetherClient({ baseUrl: base, token });

async function until(runId, type, after = 0) {
  const events = [];
  for await (const ev of client.streamRun(runId, { after })) {
    events.push(ev);
    if (ev.type === type) break;
  }
  return events;
}

async function answered(value) {
  const conversation = await client.createConversation({ title: "js graph" });
  const input = { title: "disk full", priority: 2 };
  const { run } = await client.startRun(conversation.id, "", { agent: "jsgraph", input });
  const first = await until(run.id, "interrupt");
  const interrupt = first.at(-1);
  await client.resume(run.id, interrupt.interruptId, "respond", { value });
  const rest = await until(run.id, "done", interrupt.sequence);
  return { first, interrupt, rest, run };
}

test("a graph's input goes in whole, and resume's value comes out of interrupt() exactly", async () => {
  const value = { type: "edit", args: { queue: "sre", hours: [1, 2.5] } };
  const { first, interrupt, rest } = await answered(value);
  const values = first.filter((e) => e.type === "graph_values");
  assert.deepEqual(values[0].values, { title: "disk full", priority: 2, notes: [] }, "the input, whole");
  assert.deepEqual(interrupt.payload.value, { title: "Escalate disk full?", target: "queue/ops" });
  const done = rest.at(-1);
  assert.equal(done.type, "done");
  assert.deepEqual(done.output, {
    title: "disk full",
    priority: 3,
    notes: ["triaged disk full"],
    decision: value,
  });
  const resolved = rest.find((e) => e.type === "interrupt_resolved");
  assert.equal(resolved.decision, "responded");
});

test("null is a value too", async () => {
  const { rest } = await answered(null);
  assert.equal(rest.at(-1).type, "done");
  assert.equal(rest.at(-1).output.decision, null);
});

test("the gateway refuses what the runtime cannot take, and nothing starts", async () => {
  const conversation = await client.createConversation({ title: "js graph refused" });
  await assert.rejects(
    client.startRun(conversation.id, "", { agent: "jsgraph", input: { title: "x".repeat(300_000) } }),
    (err) => err.status === 400 || err.status === 413,
  );
  const { messages } = await client.listMessages(conversation.id);
  assert.equal(messages.length, 0, "nothing stored");
});
