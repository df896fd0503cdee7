// A fetch-based Server-Sent Events reader (WHATWG "event stream interpretation") that runs in
// browsers and in Node 20+: EventSource cannot send an Authorization header or POST, and cannot
// be told where to resume. Handles events split across chunks, several events per chunk,
// CRLF/CR/LF line ends, UTF-8 characters split across chunks, comments (heartbeats), multi-line
// data and the id/retry fields. Types: sse.d.ts.

/**
 * @typedef {{id: string, event: string, data: string}} SseEvent
 * @typedef {{
 *   onEvent?: (ev: SseEvent) => void,
 *   onComment?: (text: string) => void,
 *   onRetry?: (ms: number) => void,
 * }} SseHandlers
 */

/** A line-level parser fed with decoded text. */
export function createSseParser(/** @type {SseHandlers} */ handlers = {}) {
  let buffer = "";
  let afterCR = false; // the last chunk ended in CR: a leading LF of the next one is the same break
  let first = true;
  let data = [];
  let eventType = "";
  let idBuffer = "";
  let lastEventId = ""; // only committed at a blank line: a half-received event is not "seen"

  function dispatch() {
    lastEventId = idBuffer;
    if (data.length === 0) {
      eventType = "";
      return;
    }
    const ev = { id: lastEventId, event: eventType || "message", data: data.join("\n") };
    data = [];
    eventType = "";
    handlers.onEvent?.(ev);
  }

  function line(text) {
    if (text === "") return dispatch();
    if (text.charCodeAt(0) === 58 /* ':' */) {
      handlers.onComment?.(text.slice(1).replace(/^ /, ""));
      return;
    }
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") eventType = value;
    else if (field === "id") {
      if (!value.includes("\u0000")) idBuffer = value;
    } else if (field === "retry") {
      if (/^\d+$/.test(value)) handlers.onRetry?.(Number(value));
    }
  }

  return {
    /** Feed decoded text; complete lines are interpreted at once. */
    feed(text) {
      if (first && text.length) {
        if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
        first = false;
      }
      if (afterCR && text.charCodeAt(0) === 10) text = text.slice(1);
      afterCR = false;
      buffer += text;
      let start = 0;
      for (let i = 0; i < buffer.length; i++) {
        const c = buffer.charCodeAt(i);
        if (c !== 10 && c !== 13) continue;
        line(buffer.slice(start, i));
        if (c === 13) {
          if (i + 1 === buffer.length) afterCR = true;
          else if (buffer.charCodeAt(i + 1) === 10) i++;
        }
        start = i + 1;
      }
      buffer = buffer.slice(start);
    },
    /** End of stream: an unterminated last event is discarded, as the spec says. */
    end() {
      buffer = "";
      data = [];
      eventType = "";
    },
    get lastEventId() {
      return lastEventId;
    },
  };
}

/** A byte-level reader: decodes UTF-8 across chunk boundaries, then parses. */
export function createSseDecoder(/** @type {SseHandlers} */ handlers = {}) {
  const decoder = new TextDecoder("utf-8");
  const parser = createSseParser(handlers);
  return {
    push(/** @type {Uint8Array} */ bytes) {
      parser.feed(decoder.decode(bytes, { stream: true }));
    },
    end() {
      parser.feed(decoder.decode());
      parser.end();
    },
    get lastEventId() {
      return parser.lastEventId;
    },
  };
}

/**
 * Read a whole `ReadableStream<Uint8Array>` (a fetch Response body) until it ends.
 * Returns the last event id seen, for the next reconnect's `Last-Event-ID`.
 */
export async function readSse(stream, /** @type {SseHandlers} */ handlers = {}) {
  const decoder = createSseDecoder(handlers);
  const reader = stream.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      decoder.push(value);
    }
    decoder.end();
  } finally {
    reader.releaseLock();
  }
  return decoder.lastEventId;
}

/**
 * The messages of a `ReadableStream<Uint8Array>` as an async iterator, read as they are pulled
 * (a slow consumer slows the socket, not memory). Leaving the loop early cancels the stream.
 */
export async function* iterateSse(stream, /** @type {SseHandlers} */ handlers = {}) {
  /** @type {SseEvent[]} */
  const pending = [];
  const decoder = createSseDecoder({ ...handlers, onEvent: (ev) => pending.push(ev) });
  const reader = stream.getReader();
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      decoder.push(value);
      while (pending.length) yield /** @type {SseEvent} */ (pending.shift());
    }
    decoder.end();
    finished = true;
    while (pending.length) yield /** @type {SseEvent} */ (pending.shift());
  } finally {
    if (!finished) reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
