// Types of sse.js: a fetch-based Server-Sent Events reader for browsers and Node 20+.

/** One dispatched SSE message. `id` is the last event id seen (it persists across messages). */
export interface SseEvent {
  id: string;
  /** The `event:` field, or "message" when none was sent. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
}

export interface SseHandlers {
  onEvent?: (ev: SseEvent) => void;
  /** A comment line (`: keep-alive` heartbeats), without the colon and one leading space. */
  onComment?: (text: string) => void;
  /** A valid `retry:` field: the server's reconnection delay in milliseconds. */
  onRetry?: (ms: number) => void;
}

/** A line-level parser fed with decoded text. */
export interface SseParser {
  /** Feed decoded text; complete lines are interpreted at once. */
  feed(text: string): void;
  /** End of stream: an unterminated last event is discarded, as the spec says. */
  end(): void;
  /** The id of the last dispatched (complete) event. */
  readonly lastEventId: string;
}

/** A byte-level reader: decodes UTF-8 across chunk boundaries, then parses. */
export interface SseDecoder {
  push(bytes: Uint8Array): void;
  end(): void;
  readonly lastEventId: string;
}

export function createSseParser(handlers?: SseHandlers): SseParser;
export function createSseDecoder(handlers?: SseHandlers): SseDecoder;

/** Read a whole stream (a fetch Response body); resolves to the last event id seen. */
export function readSse(stream: ReadableStream<Uint8Array>, handlers?: SseHandlers): Promise<string>;

/** The stream's messages, read as they are pulled; leaving the loop early cancels the stream. */
export function iterateSse(
  stream: ReadableStream<Uint8Array>,
  handlers?: Omit<SseHandlers, "onEvent">,
): AsyncGenerator<SseEvent, void, undefined>;
