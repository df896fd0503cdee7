// Types of errors.js.

/** Codes the gateway sends in `{"error": {code, message}}`; others may be added. */
export type TetherErrorCode =
  | "INVALID_ARGUMENT"
  | "AGENT_NOT_FOUND"
  | "INVALID_ANSWER"
  | "UNAUTHENTICATED"
  | "PERMISSION_DENIED"
  | "NOT_FOUND"
  | "RUN_NOT_FOUND"
  | "CONVERSATION_NOT_FOUND"
  | "INTERRUPT_NOT_FOUND"
  | "INTERRUPT_ALREADY_RESOLVED"
  | "INTERRUPT_EXPIRED"
  | "RUN_NOT_CANCELLABLE"
  | "FAILED_PRECONDITION"
  | "IDEMPOTENCY_KEY_REUSED"
  | "RATE_LIMITED"
  | "PAYLOAD_TOO_LARGE"
  | "UNAVAILABLE"
  | "INTERNAL"
  | "NETWORK"
  | (string & {});

/** Everything the client throws on purpose. */
export class TetherError extends Error {
  constructor(message: string, options?: { status?: number; code?: string; cause?: unknown });
  /** The HTTP status; 0 when no response arrived. */
  readonly status: number;
  /** The gateway's error code; "NETWORK" when no response arrived. */
  readonly code: TetherErrorCode;
  /** Whether the same request may be sent again (network errors, 408, 429, 5xx). */
  readonly retryable: boolean;
}

/** The gateway answered with an error status; `code` and `message` come from its JSON body. */
export class TetherApiError extends TetherError {
  constructor(status: number, code: string, message: string, options?: { retryAfterMs?: number | null });
  /** The `Retry-After` header in milliseconds, or null. */
  readonly retryAfterMs: number | null;
}

/** No answer: the gateway could not be reached or the connection broke. */
export class TetherNetworkError extends TetherError {
  constructor(message: string, cause?: unknown);
}

/** The error for a non-2xx response, from its JSON error body. */
export function errorFromResponse(res: Response): Promise<TetherApiError>;
