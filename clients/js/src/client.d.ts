// Types of client.js.
import type {
  Agent,
  Conversation,
  Decision,
  Message,
  Run,
  RunEvent,
  TerminalEvent,
} from "./types.js";
import type { TetherError } from "./errors.js";

export interface RetryOptions {
  /** The first wait before a retry (a stream uses the server's `retry:` when it sent one). */
  initialDelayMs?: number;
  /** The longest wait between two attempts. */
  maxDelayMs?: number;
  /** Attempts of a request in all (default 6); a stream's consecutive failed reconnects (default unlimited). */
  maxAttempts?: number;
}

export interface TetherClientOptions {
  /** The gateway, e.g. "http://127.0.0.1:8080"; "" (the default) for the page's own origin. */
  baseUrl?: string;
  /** A bearer token. */
  token?: string;
  /** Called before every request instead of `token`: for tokens that are refreshed. */
  getToken?: () => string | undefined | null | Promise<string | undefined | null>;
  /**
   * fetch's `credentials` (default "same-origin"). Cookie mode, for browsers: no `token` nor
   * `getToken`; `openSession()` or `session()` starts it.
   */
  credentials?: RequestCredentials;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  retry?: RetryOptions;
}

/** A cookie session: who it is, the CSRF token its state-changing requests send, its end. */
export interface Session {
  user: string;
  csrfToken: string;
  expiresAt: string;
}

export interface ReconnectInfo {
  /** Consecutive failures so far (1 for the first reconnect after a drop). */
  attempt: number;
  /** The wait before this reconnect. */
  delayMs: number;
  /** Why the last connection ended or failed. */
  error: TetherError;
  /** The sequence the reconnect resumes after. */
  after: number;
}

export interface StreamOptions {
  /** Resume after this sequence (0: from the run's first event). */
  after?: number;
  /** Ends the stream quietly (the iterator returns; onEvent's promise resolves to null). */
  signal?: AbortSignal;
  /** Each connection opened (the first and every reconnect). */
  onConnect?: (info: { after: number }) => void;
  /** A connection dropped or failed; the stream waits `delayMs`, then reconnects. */
  onReconnect?: (info: ReconnectInfo) => void;
  /**
   * The token that opened the stream expired or was revoked (the gateway's `reauthenticate`
   * frame). Awaited, then the stream reconnects at once after the last event, with the token
   * `getToken` gives then: refresh it here (or in getToken). A second one in a row with no
   * event between is treated as a failed connection (backoff, onReconnect).
   */
  onReauthenticate?: (info: { reason: "expired" | "revoked"; after: number }) => void | Promise<void>;
  retry?: RetryOptions;
}

export interface StreamRunCallbackOptions extends StreamOptions {
  /** Each event, in order, once; awaited before the next one. */
  onEvent: (event: RunEvent) => void | Promise<void>;
}

export interface StartRunOptions extends StreamOptions {
  /** One of listAgents(); the runtime's default agent when left out. */
  agent?: string;
  /** Made for this call when left out; reused by its retries. */
  idempotencyKey?: string;
  /** One request starts the run and streams its events (resolves to a RunStream). */
  stream?: boolean;
  /**
   * A graph agent's input whole: a JSON object of its input schema (sent as `input`); `text`
   * may then be "". A native agent takes the input's last user message.
   */
  input?: Record<string, unknown>;
}

export interface ResumeOptions {
  /** select_option: the chosen option's `value` (with decision "respond"). */
  option?: string;
  /** provide_input: an object valid against the payload's `inputSchema` (with "respond"). */
  fill?: Record<string, unknown>;
  /** The answer as text. */
  input?: string;
  /**
   * With decision "respond", alone: the exact value (any JSON, null too) a graph's `interrupt()`
   * returns, as LangGraph's `Command(resume=value)`.
   */
  value?: unknown;
  /** Made for this decision when left out; reused by its retries. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface Page {
  pageSize?: number;
  pageToken?: string;
  signal?: AbortSignal;
}

/** One run's events, in order, each once, across reconnects. Iterable once. */
export class RunStream implements AsyncIterable<RunEvent> {
  private constructor();
  readonly runId: string;
  /** The sequence of the last event delivered (where a reconnect resumes). */
  readonly lastSequence: number;
  /** The terminal event, once delivered. */
  readonly end: TerminalEvent | null;
  /** True once the stream is over: a terminal event, a finished run, or close(). */
  readonly finished: boolean;
  /** End the stream quietly. */
  close(): void;
  /** Call `onEvent` for each event; resolves to the terminal event (null if closed first). */
  forEach(onEvent: (event: RunEvent) => void | Promise<void>): Promise<TerminalEvent | null>;
  [Symbol.asyncIterator](): AsyncIterator<RunEvent>;
}

export function newIdempotencyKey(): string;
export function backoffDelay(attempt: number, baseMs: number, maxDelayMs: number, random?: () => number): number;

export class TetherClient {
  constructor(options?: TetherClientOptions);
  readonly retry: Required<RetryOptions>;

  createConversation(options?: { title?: string; signal?: AbortSignal }): Promise<Conversation>;
  listConversations(options?: Page): Promise<{ conversations: Conversation[]; nextPageToken: string | null }>;
  getConversation(conversationId: string, options?: { signal?: AbortSignal }): Promise<Conversation>;
  listMessages(conversationId: string, options?: Page): Promise<{ messages: Message[]; nextPageToken: string | null }>;
  listAgents(options?: { signal?: AbortSignal }): Promise<{ agents: Agent[]; defaultAgent: string }>;
  getRun(runId: string, options?: { signal?: AbortSignal }): Promise<Run>;

  startRun(conversationId: string, text: string, options: StartRunOptions & { stream: true }): Promise<RunStream>;
  startRun(
    conversationId: string,
    text: string,
    options?: StartRunOptions & { stream?: false },
  ): Promise<{ run: Run; replayed: boolean }>;

  streamRun(runId: string, options: StreamRunCallbackOptions): Promise<TerminalEvent | null>;
  streamRun(runId: string, options?: StreamOptions & { onEvent?: undefined }): RunStream;

  resume(
    runId: string,
    interruptId: string,
    decision: Decision,
    options?: ResumeOptions,
  ): Promise<{ run: Run; replayed: boolean }>;
  approve(runId: string, interruptId: string, options?: ResumeOptions): Promise<{ run: Run; replayed: boolean }>;
  reject(runId: string, interruptId: string, options?: ResumeOptions): Promise<{ run: Run; replayed: boolean }>;
  cancel(runId: string, reason?: string, options?: { signal?: AbortSignal }): Promise<Run>;
  streamToken(
    runId: string,
    options?: { signal?: AbortSignal },
  ): Promise<{ token: string; expiresAt: string; eventsUrl: string }>;
  /** Trade a bearer token for the HttpOnly session cookie (cookie mode); the token is not kept. */
  openSession(token: string, options?: { signal?: AbortSignal }): Promise<Session>;
  /** The cookie's session (user, CSRF token), or null without one. */
  session(options?: { signal?: AbortSignal }): Promise<Session | null>;
  /** Sign out: revokes this client's token (or session cookie) on every gateway pod. */
  closeSession(options?: { signal?: AbortSignal }): Promise<void>;
  /** Only a gateway started by `tether dev` (TETHER_DEV_LOGIN=1); 404 elsewhere. */
  devToken(user: string, options?: { signal?: AbortSignal }): Promise<{ token: string; user: string }>;
  /** @internal */
  openEvents(runId: string, after: number, signal?: AbortSignal): Promise<Response>;
}
