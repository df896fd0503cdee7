// node --test clients/js/test/unit: startRun's `input` (a graph's input object) and resume's
// `value` (the exact value a graph's interrupt() returns), as sent, and what is refused before
// anything is sent. The real gateway's answer to both: tests/integration/test_js_client.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TetherClient, TetherError } from "../../src/index.js";

/** A client whose fetch records each request and answers 202 {run, replayed}. */
function recorded() {
  const sent = [];
  const fetch = async (url, init = {}) => {
    sent.push({ url: String(url), method: init.method, body: init.body ? JSON.parse(init.body) : null });
    return new Response(JSON.stringify({ run: { id: "run_1", status: "queued" }, replayed: false }), {
      status: 202,
      headers: { "Content-Type": "application/json" },
    });
  };
  return { client: new TetherClient({ baseUrl: "http://gw.test", token: "t", fetch }), sent };
}

async function refused(promise, pattern) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof TetherError, String(err));
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.match(err.message, pattern);
    return true;
  });
}

test("startRun sends a graph's input whole, with or without text", async () => {
  const { client, sent } = recorded();
  const input = { title: "disk full", priority: 2, tags: ["ops"], nested: { ok: true, none: null } };
  const { run } = await client.startRun("conv_1", "", { input, agent: "hitl" });
  assert.equal(run.id, "run_1");
  assert.equal(sent.length, 1);
  assert.equal(sent[0].url, "http://gw.test/v1/conversations/conv_1/runs");
  assert.deepEqual(sent[0].body.input, input);
  assert.equal(sent[0].body.text, "");
  assert.equal(sent[0].body.agent, "hitl");
  assert.ok(sent[0].body.idempotencyKey);
  await client.startRun("conv_1", "hello", { input: { messages: [{ role: "user", content: "hi" }] } });
  assert.equal(sent[1].body.text, "hello");
  assert.deepEqual(sent[1].body.input, { messages: [{ role: "user", content: "hi" }] });
  await client.startRun("conv_1", "just text");
  assert.equal("input" in sent[2].body, false, "no input: none sent");
});

test("startRun refuses an input that is no JSON object, and neither text nor input", async () => {
  const { client, sent } = recorded();
  for (const input of [[1, 2], null, "text", 3]) {
    await refused(client.startRun("conv_1", "x", { input }), /input must be a JSON object/);
  }
  await refused(client.startRun("conv_1", "x", { input: { n: Number.NaN } }), /input must be JSON/);
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  await refused(client.startRun("conv_1", "x", { input: cyclic }), /input must be JSON/);
  await refused(client.startRun("conv_1", "  "), /give text or input/);
  await refused(client.startRun("conv_1", "", { input: {} }), /give text or input/);
  assert.equal(sent.length, 0, "nothing sent");
});

test("resume sends value whole, null and falsy values too, with respond only", async () => {
  const { client, sent } = recorded();
  for (const value of [{ type: "edit", args: { queue: "sre" } }, [1, "two"], null, false, 0, ""]) {
    await client.resume("run_1", "int_1", "respond", { value });
    const body = sent.at(-1).body;
    assert.equal(sent.at(-1).url, "http://gw.test/v1/runs/run_1/resume");
    assert.ok("value" in body, JSON.stringify(body));
    assert.deepEqual(body.value, value);
    assert.equal(body.decision, "respond");
  }
  await client.approve("run_1", "int_1");
  assert.equal("value" in sent.at(-1).body, false, "no value: none sent");
});

test("resume refuses value with another decision or beside another answer, and non-JSON", async () => {
  const { client, sent } = recorded();
  await refused(client.resume("run_1", "int_1", "approve", { value: 1 }), /only with decision "respond"/);
  await refused(client.approve("run_1", "int_1", { value: true }), /only with decision "respond"/);
  await refused(client.resume("run_1", "int_1", "respond", { value: 1, input: "x" }), /value alone/);
  await refused(client.resume("run_1", "int_1", "respond", { value: 1, option: "a" }), /value alone/);
  await refused(client.resume("run_1", "int_1", "respond", { value: [Infinity] }), /value must be JSON/);
  await refused(client.resume("run_1", "int_1", "respond", { value: () => 1 }), /value must be JSON/);
  assert.equal(sent.length, 0, "nothing sent");
});
