// node --test clients/js/test/gateway: the client against a REAL gateway and runtime, started by
// tests/integration/test_js_client.py, which also serves a control channel that SIGKILLs the
// gateway and starts it again at the same address when this file asks. Environment:
//   TETHER_GATEWAY_URL  the gateway; TETHER_CONTROL_URL  POST /kill, POST /start
//   TETHER_TOKEN        a token for alice; TETHER_SERVICES  abnormal services, comma-separated
//   TETHER_FRESH_TOKENS two more tokens for alice (other logins), comma-separated
import assert from "node:assert/strict";
import { test } from "node:test";

import { TetherApiError, TetherClient } from "@tether/client";

const { TETHER_GATEWAY_URL: base, TETHER_CONTROL_URL: control, TETHER_TOKEN: token } = process.env;
const services = (process.env.TETHER_SERVICES || "").split(",");
assert.ok(base && control && token && services.length >= 3, "run me from tests/integration/test_js_client.py");

const FAST = { initialDelayMs: 50, maxDelayMs: 400, maxAttempts: 200 };

async function gateway(action) {
  const res = await fetch(`${control}/${action}`, { method: "POST" });
  assert.equal(res.status, 200, `control ${action}: ${await res.text()}`);
}

/** A fetch that records every request it sends (the real one underneath). */
function recordingFetch() {
  const sent = [];
  const f = (url, init = {}) => {
    sent.push({ url: String(url), method: init.method || "GET", body: init.body ? JSON.parse(init.body) : null });
    return fetch(url, init);
  };
  return { fetch: f, sent };
}

function checkDense(events, from = 1) {
  const seqs = events.filter((e) => e.type !== "reset").map((e) => e.sequence);
  assert.deepEqual(
    seqs,
    Array.from({ length: seqs.length }, (_, i) => from + i),
    "every sequence once, in order, none missing",
  );
}

async function storedAnswer(client, conversationId, runId) {
  const { messages } = await client.listMessages(conversationId);
  return messages.filter((m) => m.role === "assistant" && m.runId === runId).map((m) => m.content).join("");
}

test("a stream carries on across the gateway killed and restarted mid-run: no gap, no duplicate", async () => {
  const client = new TetherClient({ baseUrl: base, token, retry: FAST });
  const conversation = await client.createConversation({ title: "js reconnect" });
  const reconnects = [];
  let restarted = null;
  const run = await client.startRun(conversation.id, `restart the abnormal ${services[0]} instance`, {
    stream: true,
    agent: "opspilot",
    retry: FAST,
    onReconnect: (info) => {
      reconnects.push(info);
      // Start it again only once the client has been refused twice: it must keep trying.
      if (reconnects.length === 3) restarted = gateway("start");
    },
  });
  const events = [];
  let killedAt = 0;
  for await (const ev of run) {
    events.push(ev);
    if (ev.type === "interrupt") await client.approve(run.runId, ev.interruptId);
    if (ev.type === "interrupt_resolved" && !killedAt) {
      killedAt = ev.sequence;
      await gateway("kill"); // the run goes on in the runtime meanwhile
    }
  }
  await restarted;
  assert.ok(killedAt > 0, "the gateway was killed mid-run");
  assert.ok(reconnects.length >= 3, `reconnected after refusals (${reconnects.length})`);
  assert.ok(reconnects.every((r) => r.after >= killedAt), "every reconnect resumed after the last event seen");
  assert.equal(reconnects[0].error.code, "NETWORK");
  checkDense(events);
  assert.equal(events.at(-1).type, "done");
  assert.equal(run.end, events.at(-1));
  assert.equal(run.lastSequence, events.at(-1).sequence);
  assert.deepEqual(
    events.filter((e) => e.type === "tool_started").map((e) => e.tool),
    ["find_instances", "restart_instance"],
  );
  const text = events.filter((e) => e.type === "text_delta").map((e) => e.delta).join("");
  assert.ok(text.length > 0);
  assert.equal(text, await storedAnswer(client, conversation.id, run.runId), "the streamed text is the stored answer");
  const resolved = events.find((e) => e.type === "interrupt_resolved");
  assert.equal(resolved.decision, "approved");
  assert.equal(resolved.resolvedBy, "alice");
  assert.ok(events.at(-1).usage.modelSteps > 0, "done carries usage");
});

test("a decision sent while the gateway is down is retried with one idempotency key, applied once", async () => {
  const rec = recordingFetch();
  const client = new TetherClient({ baseUrl: base, getToken: () => token, fetch: rec.fetch, retry: FAST });
  const conversation = await client.createConversation({ title: "js resume retry" });
  const { run } = await client.startRun(conversation.id, `restart the abnormal ${services[1]} instance`);
  assert.equal(typeof run.id, "string");
  const events = [];
  let answered = null;
  const end = await client.streamRun(run.id, {
    retry: FAST,
    onEvent: async (ev) => {
      events.push(ev);
      if (ev.type !== "interrupt") return;
      await gateway("kill");
      answered = client.approve(run.id, ev.interruptId); // refused until the gateway is back
      while (rec.sent.filter((r) => r.url.endsWith("/resume")).length < 3) await new Promise((r) => setTimeout(r, 20));
      await gateway("start");
      const first = await answered;
      assert.equal(first.replayed, false);
      // The same decision again with its key: the stored answer. Another key: already resolved.
      const key = rec.sent.find((r) => r.url.endsWith("/resume")).body.idempotencyKey;
      const again = await client.approve(run.id, ev.interruptId, { idempotencyKey: key });
      assert.equal(again.replayed, true);
      assert.equal(again.run.id, run.id);
      await assert.rejects(client.reject(run.id, ev.interruptId), (err) => {
        assert.ok(err instanceof TetherApiError);
        assert.equal(err.status, 409);
        assert.equal(err.code, "INTERRUPT_ALREADY_RESOLVED");
        assert.ok(err.message.length > 0);
        return true;
      });
    },
  });
  const resumes = rec.sent.filter((r) => r.url.endsWith("/resume"));
  const keys = new Set(resumes.slice(0, -2).map((r) => r.body.idempotencyKey));
  assert.ok(resumes.length >= 5, `the approve was retried (${resumes.length} POSTs)`);
  assert.equal(keys.size, 1, "one idempotency key across the approve's retries");
  assert.equal(end?.type, "done");
  checkDense(events);
  assert.equal(events.filter((e) => e.type === "interrupt_resolved").length, 1);
  assert.equal(events.filter((e) => e.type === "tool_started" && e.tool === "restart_instance").length, 1);
  const gets = rec.sent.filter((r) => r.url.includes("/events"));
  assert.ok(gets.length >= 2, "the stream reconnected too");
});

test("streamRun from a sequence, to the end, and of a run already over", async () => {
  const client = new TetherClient({ baseUrl: base, token });
  const conversation = await client.createConversation({});
  const first = await client.startRun(conversation.id, "show me the recent errors of payment-api", { stream: true });
  const all = [];
  for await (const ev of first) all.push(ev);
  assert.equal(all.at(-1).type, "done");
  checkDense(all);
  const from = 3;
  const rest = [];
  const end = await client.streamRun(first.runId, { after: from, onEvent: (ev) => rest.push(ev) });
  assert.deepEqual(rest, all.slice(from), "exactly the events after the point asked for");
  assert.deepEqual(end, all.at(-1));
  const over = client.streamRun(first.runId, { after: all.at(-1).sequence });
  const none = [];
  for await (const ev of over) none.push(ev);
  assert.deepEqual(none, [], "a finished run with nothing after the point: the stream just ends");
  assert.equal(over.end, null);
  assert.equal(over.finished, true);
  const got = await client.getRun(first.runId);
  assert.equal(got.status, "completed");
  assert.equal(got.lastSequence, all.at(-1).sequence);
});

test("cancel a run waiting for approval; errors carry the gateway's status and code", async () => {
  const client = new TetherClient({ baseUrl: base, token });
  const { agents, defaultAgent } = await client.listAgents();
  assert.ok(agents.some((a) => a.name === "opspilot" && a.tools.some((t) => t.effect === "write")));
  assert.equal(typeof defaultAgent, "string");
  const conversation = await client.createConversation({ title: "js cancel" });
  const run = await client.startRun(conversation.id, `restart the abnormal ${services[2]} instance`, { stream: true });
  const events = [];
  for await (const ev of run) {
    events.push(ev);
    if (ev.type === "interrupt") {
      const cancelled = await client.cancel(run.runId, "changed my mind");
      assert.equal(cancelled.status, "cancelled");
    }
  }
  assert.deepEqual(
    events.slice(-2).map((e) => [e.type, e.decision ?? e.reason]),
    [
      ["interrupt_resolved", "cancelled"],
      ["cancelled", "changed my mind"],
    ],
  );
  assert.equal((await client.cancel(run.runId, "twice")).status, "cancelled", "cancelling twice is once");
  const finished = await client.startRun(conversation.id, "show me the recent errors of payment-api");
  assert.equal((await client.streamRun(finished.run.id, { onEvent: () => {} }))?.type, "done");
  const checks = [
    [() => client.getRun("run_00000000000000000000000000"), 404, "RUN_NOT_FOUND"],
    [() => client.startRun(conversation.id, "hi", { agent: "no-such-agent" }), 400, "AGENT_NOT_FOUND"],
    [() => client.cancel(finished.run.id), 409, "RUN_NOT_CANCELLABLE"],
    [() => new TetherClient({ baseUrl: base, token: "not-a-token" }).listAgents(), 401, "UNAUTHENTICATED"],
  ];
  for (const [call, status, code] of checks) {
    await assert.rejects(call(), (err) => {
      assert.ok(err instanceof TetherApiError, String(err));
      assert.deepEqual([err.status, err.code], [status, code], err.message);
      return true;
    });
  }
  // A stream of a run that does not exist is not retried forever: its 404 ends it.
  await assert.rejects(
    client.streamRun("run_00000000000000000000000000", { onEvent: () => {} }),
    (err) => err instanceof TetherApiError && err.status === 404,
  );
});

test("a sign-out ends the open stream (reauthenticate); with a new token it resumes after the last event", async () => {
  const [signedOut, fresh] = (process.env.TETHER_FRESH_TOKENS || "").split(",");
  assert.ok(signedOut && fresh, "TETHER_FRESH_TOKENS: two tokens");
  let current = signedOut;
  const client = new TetherClient({ baseUrl: base, getToken: () => current, retry: FAST });
  const conversation = await client.createConversation({ title: "js reauthenticate" });
  const reauths = [];
  const connects = [];
  let interrupt = null;
  const run = await client.startRun(conversation.id, `restart the abnormal ${services[3]} instance`, {
    stream: true,
    agent: "opspilot",
    retry: FAST,
    onConnect: (info) => connects.push(info),
    onReauthenticate: async (info) => {
      reauths.push(info);
      current = fresh; // the app signs in again
      await client.approve(run.runId, interrupt.interruptId);
    },
  });
  const events = [];
  for await (const ev of run) {
    events.push(ev);
    if (ev.type === "interrupt") {
      interrupt = ev;
      await client.closeSession(); // revokes `signedOut`: the gateway ends this stream
    }
  }
  assert.deepEqual(reauths, [{ reason: "revoked", after: interrupt.sequence }]);
  assert.deepEqual(connects.map((c) => c.after), [0, interrupt.sequence], "one reconnect, from the interrupt");
  checkDense(events);
  assert.equal(events.at(-1).type, "done");
  await assert.rejects(new TetherClient({ baseUrl: base, token: signedOut }).getRun(run.runId), (err) => {
    assert.ok(err instanceof TetherApiError);
    assert.equal(err.status, 401);
    return true;
  });
});
