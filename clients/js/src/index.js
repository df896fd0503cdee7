// @tether/client: Tether's HTTP/SSE API for browsers and Node 20+, as plain ES modules (no build
// step). Types: index.d.ts.
export { RunStream, TetherClient, backoffDelay, newIdempotencyKey } from "./client.js";
export { TetherApiError, TetherError, TetherNetworkError, errorFromResponse } from "./errors.js";
export { createSseDecoder, createSseParser, iterateSse, readSse } from "./sse.js";
// The wire's names (RUN_STATUSES, TERMINAL_RUN_STATUSES, TERMINAL_EVENT_TYPES, ANSWERS, ...),
// generated from the protos by `make gen`.
export * from "./wire.generated.js";
