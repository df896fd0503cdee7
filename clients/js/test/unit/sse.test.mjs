// node --test clients/js/test/unit: the fetch-based SSE reader (parser edge cases).
import assert from "node:assert/strict";
import { test } from "node:test";

import { createSseDecoder, createSseParser, iterateSse, readSse } from "../../src/sse.js";

function collect() {
  const events = [];
  const comments = [];
  const retries = [];
  return {
    events,
    comments,
    retries,
    handlers: {
      onEvent: (e) => events.push(e),
      onComment: (c) => comments.push(c),
      onRetry: (r) => retries.push(r),
    },
  };
}

const FRAME =
  'id: 17\nevent: tool_started\ndata: {"type":"tool_started","sequence":17}\n\n';

test("one event in one chunk", () => {
  const c = collect();
  createSseParser(c.handlers).feed(FRAME);
  assert.deepEqual(c.events, [
    { id: "17", event: "tool_started", data: '{"type":"tool_started","sequence":17}' },
  ]);
});

test("an event split at every possible position", () => {
  for (let cut = 1; cut < FRAME.length; cut++) {
    const c = collect();
    const p = createSseParser(c.handlers);
    p.feed(FRAME.slice(0, cut));
    p.feed(FRAME.slice(cut));
    assert.equal(c.events.length, 1, `cut at ${cut}`);
    assert.equal(c.events[0].id, "17");
    assert.equal(c.events[0].data, '{"type":"tool_started","sequence":17}');
  }
});

test("several events in one chunk, and byte-by-byte", () => {
  const text = "retry: 2000\n\n" + FRAME + "id: 18\nevent: done\ndata: {}\n\n: keep-alive\n\n";
  const whole = collect();
  createSseParser(whole.handlers).feed(text);
  assert.deepEqual(
    whole.events.map((e) => [e.id, e.event]),
    [
      ["17", "tool_started"],
      ["18", "done"],
    ],
  );
  assert.deepEqual(whole.retries, [2000]);
  assert.deepEqual(whole.comments, ["keep-alive"]);
  const bytewise = collect();
  const p = createSseParser(bytewise.handlers);
  for (const ch of text) p.feed(ch);
  assert.deepEqual(bytewise.events, whole.events);
});

test("CRLF, CR and LF line ends, including CRLF split across chunks", () => {
  for (const eol of ["\r\n", "\r", "\n"]) {
    const text = `id: 1${eol}event: a${eol}data: x${eol}${eol}id: 2${eol}data: y${eol}${eol}`;
    for (let cut = 0; cut <= text.length; cut++) {
      const c = collect();
      const p = createSseParser(c.handlers);
      p.feed(text.slice(0, cut));
      p.feed(text.slice(cut));
      assert.deepEqual(
        c.events,
        [
          { id: "1", event: "a", data: "x" },
          { id: "2", event: "message", data: "y" },
        ],
        `eol ${JSON.stringify(eol)} cut ${cut}`,
      );
    }
  }
});

test("multi-byte UTF-8 split across chunks", () => {
  const text = 'id: 5\nevent: text_delta\ndata: {"delta":"重启 payment-api ✅ 🚀 é"}\n\n';
  const bytes = new TextEncoder().encode(text);
  for (let cut = 1; cut < bytes.length; cut++) {
    const c = collect();
    const d = createSseDecoder(c.handlers);
    d.push(bytes.slice(0, cut));
    d.push(bytes.slice(cut));
    d.end();
    assert.equal(c.events.length, 1);
    assert.equal(JSON.parse(c.events[0].data).delta, "重启 payment-api ✅ 🚀 é", `cut ${cut}`);
  }
});

test("multi-line data, fields without a space, no-value fields, unknown fields", () => {
  const c = collect();
  createSseParser(c.handlers).feed("data:a\ndata: b\ndata\nfoo: bar\nevent:x\n\n");
  assert.deepEqual(c.events, [{ id: "", event: "x", data: "a\nb\n" }]);
});

test("id persists across events; ids with NUL are ignored; bad retry is ignored", () => {
  const c = collect();
  createSseParser(c.handlers).feed(
    "id: 3\ndata: a\n\ndata: b\n\nid: 4\u0000\ndata: c\n\nretry: 1x\nretry: 50\n\n",
  );
  assert.deepEqual(
    c.events.map((e) => e.id),
    ["3", "3", "3"],
  );
  assert.deepEqual(c.retries, [50]);
});

test("a leading BOM is dropped; an event without data is not dispatched", () => {
  const c = collect();
  createSseParser(c.handlers).feed("\ufeffevent: ping\n\ndata: z\n\n");
  assert.deepEqual(c.events, [{ id: "", event: "message", data: "z" }]);
});

test("an unterminated last event is discarded at end of stream", async () => {
  const c = collect();
  const chunks = ["id: 9\ndata: whole\n\n", "id: 10\ndata: half"].map((s) =>
    new TextEncoder().encode(s),
  );
  const stream = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  const last = await readSse(stream, c.handlers);
  assert.deepEqual(
    c.events.map((e) => e.data),
    ["whole"],
  );
  assert.equal(last, "9"); // event 10 never completed: a reconnect must ask for it again
});

function streamOf(chunks) {
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk);
      controller.close();
    },
  });
}

test("CRLF split between chunks is one line break, not an empty line (no early dispatch)", () => {
  const c = collect();
  const p = createSseParser(c.handlers);
  p.feed("data: a\r");
  p.feed("\ndata: b\r\n\r\n");
  assert.deepEqual(c.events, [{ id: "", event: "message", data: "a\nb" }]);
});

test("heartbeats and other comments dispatch nothing and do not break an event", () => {
  const c = collect();
  createSseParser(c.handlers).feed(": keep-alive\n\nid: 1\n: mid-event\ndata: x\n\n:\n\n");
  assert.deepEqual(c.events, [{ id: "1", event: "message", data: "x" }]);
  assert.deepEqual(c.comments, ["keep-alive", "mid-event", ""]);
});

test("an empty id field resets the last event id", () => {
  const c = collect();
  createSseParser(c.handlers).feed("id: 7\ndata: a\n\nid\ndata: b\n\n");
  assert.deepEqual(
    c.events.map((e) => e.id),
    ["7", ""],
  );
});

test("a 4-byte character split at each of its bytes, one byte per chunk", () => {
  const bytes = new TextEncoder().encode("data: 🚀\n\n");
  const c = collect();
  const d = createSseDecoder(c.handlers);
  for (const b of bytes) d.push(Uint8Array.of(b));
  d.end();
  assert.deepEqual(c.events, [{ id: "", event: "message", data: "🚀" }]);
});

test("iterateSse yields messages as they are pulled; retry reaches its handler", async () => {
  const retries = [];
  const got = [];
  const stream = streamOf(["retry: 250\n\nid: 1\nevent: a\nda", "ta: {\"x\":1}\n\nid: 2\ndata: y\n", "\n: keep-alive\n\n"]);
  for await (const m of iterateSse(stream, { onRetry: (ms) => retries.push(ms) })) got.push(m);
  assert.deepEqual(got, [
    { id: "1", event: "a", data: '{"x":1}' },
    { id: "2", event: "message", data: "y" },
  ]);
  assert.deepEqual(retries, [250]);
});

test("leaving iterateSse early cancels the underlying stream", async () => {
  let cancelled = false;
  const stream = new ReadableStream({
    pull(controller) {
      controller.enqueue(new TextEncoder().encode("data: tick\n\n"));
    },
    cancel() {
      cancelled = true;
    },
  });
  let n = 0;
  for await (const m of iterateSse(stream)) {
    assert.equal(m.data, "tick");
    if (++n === 3) break;
  }
  assert.ok(cancelled, "the body was cancelled (a fetch's connection is released)");
});

test("iterateSse drops an unterminated last event, and a stream error reaches the caller", async () => {
  const got = [];
  for await (const m of iterateSse(streamOf(["data: whole\n\ndata: half"]))) got.push(m.data);
  assert.deepEqual(got, ["whole"]);
  let pulls = 0;
  const broken = new ReadableStream({
    pull(controller) {
      if (pulls++ === 0) controller.enqueue(new TextEncoder().encode("id: 1\ndata: a\n\n"));
      else controller.error(new TypeError("terminated")); // a connection reset mid-stream
    },
  });
  const seen = [];
  await assert.rejects(async () => {
    for await (const m of iterateSse(broken)) seen.push(m.id);
  }, /terminated/);
  assert.deepEqual(seen, ["1"]);
});
