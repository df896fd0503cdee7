// node --test clients/js/test/unit: the gateway's JSON error body -> typed errors; the backoff.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TetherApiError,
  TetherClient,
  TetherError,
  TetherNetworkError,
  backoffDelay,
  errorFromResponse,
  newIdempotencyKey,
} from "../../src/index.js";

test("a JSON error body gives status, code and message", async () => {
  const res = new Response(JSON.stringify({ error: { code: "INTERRUPT_EXPIRED", message: "too late" } }), {
    status: 410,
    headers: { "Content-Type": "application/json" },
  });
  const err = await errorFromResponse(res);
  assert.ok(err instanceof TetherApiError && err instanceof TetherError && err instanceof Error);
  assert.equal(err.status, 410);
  assert.equal(err.code, "INTERRUPT_EXPIRED");
  assert.equal(err.message, "too late");
  assert.equal(err.retryable, false);
  assert.equal(err.retryAfterMs, null);
});

test("a body that is not the error shape still gives a status and a code; Retry-After is read", async () => {
  const err = await errorFromResponse(
    new Response("<html>bad gateway</html>", { status: 503, statusText: "Service Unavailable", headers: { "Retry-After": "3" } }),
  );
  assert.equal(err.status, 503);
  assert.equal(err.code, "HTTP_503");
  assert.equal(err.message, "Service Unavailable");
  assert.equal(err.retryable, true);
  assert.equal(err.retryAfterMs, 3000);
});

test("which errors are retryable", () => {
  const api = (status) => new TetherApiError(status, "X", "x");
  assert.deepEqual(
    [400, 401, 404, 408, 409, 410, 422, 429, 500, 503].map((s) => api(s).retryable),
    [false, false, false, true, false, false, false, true, true, true],
  );
  const net = new TetherNetworkError("refused", new TypeError("fetch failed"));
  assert.equal(net.status, 0);
  assert.equal(net.code, "NETWORK");
  assert.equal(net.retryable, true);
  assert.equal(net.cause.message, "fetch failed");
});

test("backoff doubles from its base, is capped, and is jittered within half to all of it", () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6].map((a) => backoffDelay(a, 500, 5000, () => 1)),
    [500, 1000, 2000, 4000, 5000, 5000],
  );
  assert.equal(backoffDelay(3, 500, 5000, () => 0), 1000);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(2, 400, 10_000);
    assert.ok(d >= 400 && d <= 800, `jittered ${d}`);
  }
});

test("idempotency keys are unique", () => {
  const keys = new Set(Array.from({ length: 1000 }, newIdempotencyKey));
  assert.equal(keys.size, 1000);
});

test("a request that reaches nothing is a TetherNetworkError after its retries", async () => {
  // A real socket: a port that was free a moment ago refuses the connection.
  const { createServer } = await import("node:net");
  const server = createServer();
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  const client = new TetherClient({ baseUrl: `http://127.0.0.1:${port}`, retry: { initialDelayMs: 5, maxAttempts: 3 } });
  const started = Date.now();
  await assert.rejects(client.getRun("run_x"), (err) => err instanceof TetherNetworkError && err.code === "NETWORK");
  assert.ok(Date.now() - started >= 5, "waited between attempts");
});
