// @tether/client: Tether's HTTP/SSE API for browsers and Node 20+, as plain ES modules (no build
// step). Types: index.d.ts.
export { RunStream, TERMINAL_EVENT_TYPES, TetherClient, backoffDelay, newIdempotencyKey } from "./client.js";
export { TetherApiError, TetherError, TetherNetworkError, errorFromResponse } from "./errors.js";
export { createSseDecoder, createSseParser, iterateSse, readSse } from "./sse.js";
