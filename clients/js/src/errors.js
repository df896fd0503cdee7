// The errors a TetherClient throws: the gateway's JSON error body ({"error": {code, message}})
// becomes a TetherApiError with its HTTP status and code, so callers switch on `code`
// (INTERRUPT_ALREADY_RESOLVED, RUN_NOT_FOUND, ...) instead of parsing text. A request that got
// no answer at all (connection refused or reset, a gateway restarting) is a TetherNetworkError.
// Types: errors.d.ts.

/** The base class: everything the client throws on purpose is one of these. */
export class TetherError extends Error {
  constructor(message, { status = 0, code = "", cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "TetherError";
    /** The HTTP status; 0 when no response arrived. */
    this.status = status;
    /** The gateway's error code, e.g. "INTERRUPT_EXPIRED"; "NETWORK" when no response arrived. */
    this.code = code;
  }

  /** Whether the same request may be sent again (with the same idempotency key). */
  get retryable() {
    return this.status === 0 || this.status === 408 || this.status === 429 || this.status >= 500;
  }
}

/** The gateway answered with an error status. */
export class TetherApiError extends TetherError {
  constructor(status, code, message, { retryAfterMs = null } = {}) {
    super(message || code || `HTTP ${status}`, { status, code: code || `HTTP_${status}` });
    this.name = "TetherApiError";
    /** The `Retry-After` header in milliseconds (429, 503), or null. */
    this.retryAfterMs = retryAfterMs;
  }
}

/** No answer: the gateway could not be reached or the connection broke. */
export class TetherNetworkError extends TetherError {
  constructor(message, cause) {
    super(message, { status: 0, code: "NETWORK", cause });
    this.name = "TetherNetworkError";
  }
}

/** Build the error for a non-2xx response from its JSON error body (or its status alone). */
export async function errorFromResponse(res) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  const err = body && typeof body === "object" ? body.error : null;
  const retryAfter = Number(res.headers.get("Retry-After"));
  return new TetherApiError(
    res.status,
    typeof err?.code === "string" ? err.code : "",
    typeof err?.message === "string" ? err.message : res.statusText,
    { retryAfterMs: Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : null },
  );
}
