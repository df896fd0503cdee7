// @tether/client: types for index.js.
export * from "./client.js";
export * from "./errors.js";
export * from "./sse.js";
export * from "./wire.generated.js";
export type * from "./types.js";
