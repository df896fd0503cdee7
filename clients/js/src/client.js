// TetherClient: the gateway's HTTP/SSE API for browsers and Node 20+ (global fetch,
// ReadableStream, TextDecoder; nothing else). What each caller would otherwise rebuild is done
// here once: a run's events are followed across dropped connections and gateway restarts from the
// last sequence seen (never a gap, never a duplicate) until the run ends, and a start or a
// decision keeps one idempotency key across its own retries, so a retry can never act twice.
// Types: client.d.ts.
import { TetherError, TetherNetworkError, errorFromResponse } from "./errors.js";
import { iterateSse } from "./sse.js";
import { TERMINAL_EVENT_TYPES, TERMINAL_RUN_STATUSES } from "./wire.generated.js";

const TERMINAL_EVENTS = new Set(TERMINAL_EVENT_TYPES);
const TERMINAL_STATUSES = new Set(TERMINAL_RUN_STATUSES);

const DEFAULT_RETRY = Object.freeze({ initialDelayMs: 500, maxDelayMs: 10_000, maxAttempts: 6 });

/** A new idempotency key (a UUID where the platform has one, else 128 random bits in hex). */
export function newIdempotencyKey() {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === "function") return c.randomUUID();
  const bytes = c.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The wait before retry number `attempt` (1, 2, ...): exponential from `baseMs`, capped at
 * `maxDelayMs`, with jitter (half to all of it) so that clients dropped together do not return
 * together.
 */
export function backoffDelay(attempt, baseMs, maxDelayMs, random = Math.random) {
  const exp = Math.min(maxDelayMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(exp * (0.5 + random() / 2));
}

function isAbort(err, signal) {
  return signal?.aborted || err?.name === "AbortError";
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** An AbortSignal that aborts with any of the given ones (some may be undefined). */
function anySignal(...signals) {
  const controller = new AbortController();
  for (const s of signals) {
    if (!s) continue;
    if (s.aborted) controller.abort(s.reason);
    else s.addEventListener("abort", () => controller.abort(s.reason), { once: true });
  }
  return controller;
}

/** A plain object (not an array, not null): a graph's input. */
function isJsonObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * `value` as it is, if JSON holds it as it is; what JSON.stringify would change or drop silently
 * (NaN, Infinity, undefined, a function, a bigint, a cycle) is refused before anything is sent.
 */
function checkedJson(value, name) {
  const bad = (v, open) => {
    if (v === null || typeof v === "string" || typeof v === "boolean") return false;
    if (typeof v === "number") return !Number.isFinite(v);
    if (typeof v !== "object" || open.has(v)) return true;
    open.add(v);
    const found = (Array.isArray(v) ? v : Object.values(v)).some((x) => bad(x, open));
    open.delete(v);
    return found;
  };
  if (bad(value, new Set())) {
    throw new TetherError(`${name} must be JSON (no NaN, Infinity, undefined, function or cycle)`, {
      code: "INVALID_ARGUMENT",
    });
  }
  return value;
}

const SAFE_METHODS = new Set(["GET", "HEAD"]);

export class TetherClient {
  #baseUrl;
  #token;
  #getToken;
  #credentials;
  #csrfToken = "";
  #fetch;
  #retry;

  /**
   * Bearer mode: `token` or `getToken`. Cookie mode (the browser): neither; `openSession(token)`
   * trades a token for the gateway's HttpOnly session cookie, after which requests carry the
   * cookie (`credentials`, default "same-origin") and state-changing ones the session's CSRF
   * token, which this client keeps in memory only.
   */
  constructor({ baseUrl = "", token, getToken, credentials = "same-origin", fetch: fetchImpl, retry } = {}) {
    this.#baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.#token = token;
    this.#getToken = getToken;
    this.#credentials = credentials;
    const f = fetchImpl ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: pass one as options.fetch");
    // A bare reference to the browser's fetch must be called on globalThis ("Illegal invocation").
    this.#fetch = fetchImpl ? fetchImpl : (...args) => globalThis.fetch(...args);
    this.#retry = { ...DEFAULT_RETRY, ...retry };
  }

  /** The retry settings in use: {initialDelayMs, maxDelayMs, maxAttempts}. */
  get retry() {
    return { ...this.#retry };
  }

  // ---- plumbing ------------------------------------------------------------------------------

  async #headers(method, extra) {
    const headers = { ...extra };
    const token = this.#getToken ? await this.#getToken() : this.#token;
    if (token) headers.Authorization = `Bearer ${token}`;
    else if (this.#csrfToken && !SAFE_METHODS.has(method)) headers["X-CSRF-Token"] = this.#csrfToken;
    return headers;
  }

  /** One HTTP exchange; a failure to get any response becomes a TetherNetworkError. */
  async #send(method, path, { body, accept = "application/json", signal, headers: extra, auth = true } = {}) {
    const headers = auth ? await this.#headers(method, { Accept: accept, ...extra }) : { Accept: accept, ...extra };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    try {
      return await this.#fetch(`${this.#baseUrl}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: this.#credentials,
        signal,
      });
    } catch (err) {
      if (isAbort(err, signal)) throw err;
      throw new TetherNetworkError(`${method} ${path}: ${err?.message || err}`, err);
    }
  }

  /**
   * Send until a response other than a retryable error arrives (when `retry` is on: reads, and
   * writes that carry an idempotency key, which the caller fixes before the first attempt).
   */
  async #exchange(method, path, { retry = false, ...options } = {}) {
    const { initialDelayMs, maxDelayMs, maxAttempts } = this.#retry;
    for (let attempt = 1; ; attempt++) {
      let err;
      try {
        const res = await this.#send(method, path, options);
        if (res.ok) return res;
        err = await errorFromResponse(res);
      } catch (e) {
        if (!(e instanceof TetherError)) throw e;
        err = e;
      }
      if (!retry || !err.retryable || attempt >= maxAttempts) throw err;
      const wait = err.retryAfterMs ?? backoffDelay(attempt, initialDelayMs, maxDelayMs);
      await sleep(wait, options.signal);
      if (options.signal?.aborted) throw options.signal.reason ?? new DOMException("aborted", "AbortError");
    }
  }

  async #json(method, path, options) {
    const res = await this.#exchange(method, path, options);
    if (res.status === 204) return null;
    return res.json();
  }

  // ---- resources -----------------------------------------------------------------------------

  /** POST /v1/conversations (not retried: it has no idempotency key). */
  async createConversation({ title, signal } = {}) {
    const body = title === undefined ? {} : { title };
    return (await this.#json("POST", "/v1/conversations", { body, signal })).conversation;
  }

  async listConversations({ pageSize, pageToken, signal } = {}) {
    const q = new URLSearchParams();
    if (pageSize) q.set("pageSize", String(pageSize));
    if (pageToken) q.set("pageToken", pageToken);
    const qs = q.toString() ? `?${q}` : "";
    return this.#json("GET", `/v1/conversations${qs}`, { retry: true, signal });
  }

  async getConversation(conversationId, { signal } = {}) {
    const path = `/v1/conversations/${encodeURIComponent(conversationId)}`;
    return (await this.#json("GET", path, { retry: true, signal })).conversation;
  }

  async listMessages(conversationId, { pageSize, pageToken, signal } = {}) {
    const q = new URLSearchParams();
    if (pageSize) q.set("pageSize", String(pageSize));
    if (pageToken) q.set("pageToken", pageToken);
    const qs = q.toString() ? `?${q}` : "";
    const path = `/v1/conversations/${encodeURIComponent(conversationId)}/messages${qs}`;
    return this.#json("GET", path, { retry: true, signal });
  }

  /** GET /v1/agents: {agents, defaultAgent}. */
  async listAgents({ signal } = {}) {
    return this.#json("GET", "/v1/agents", { retry: true, signal });
  }

  async getRun(runId, { signal } = {}) {
    return (await this.#json("GET", `/v1/runs/${encodeURIComponent(runId)}`, { retry: true, signal })).run;
  }

  // ---- runs ----------------------------------------------------------------------------------

  /**
   * Start a run. With `stream: true` one request starts it and streams its events: resolves to
   * a RunStream (which reconnects like streamRun); else to {run, replayed}. Retried with the same
   * idempotency key, so a start whose answer was lost is answered with the same run.
   * `input`: a graph agent's input whole, a JSON object of its input schema (e.g.
   * `{messages: [{role: "user", content: "hi"}]}`); `text` may then be "" (a native agent takes
   * the input's last user message).
   */
  async startRun(conversationId, text, options = {}) {
    const { agent, idempotencyKey, stream = false, signal, input } = options;
    if (input !== undefined && !isJsonObject(input)) {
      throw new TetherError("input must be a JSON object (a graph's input)", { code: "INVALID_ARGUMENT" });
    }
    const hasInput = input !== undefined && Object.keys(input).length > 0;
    if (!String(text ?? "").trim() && !hasInput) {
      throw new TetherError("give text or input", { code: "INVALID_ARGUMENT" });
    }
    const body = { text: text ?? "", idempotencyKey: idempotencyKey ?? newIdempotencyKey() };
    if (hasInput) body.input = checkedJson(input, "input");
    if (agent) body.agent = agent;
    const path = `/v1/conversations/${encodeURIComponent(conversationId)}/runs`;
    if (!stream) return this.#json("POST", path, { body, retry: true, signal });
    const own = anySignal(signal);
    const res = await this.#exchange("POST", path, {
      body,
      retry: true,
      accept: "text/event-stream",
      signal: own.signal,
    });
    const runId = res.headers.get("X-Run-Id");
    if (!runId) {
      res.body?.cancel().catch(() => {});
      throw new TetherError("the gateway did not name the started run (no X-Run-Id)", { code: "INTERNAL" });
    }
    return new RunStream(this, runId, { ...options, after: 0 }, own, res);
  }

  /**
   * Follow a run's events after `after` (a sequence), reconnecting from the last one seen after
   * any drop, with backoff, until a terminal event. Without `onEvent`: a RunStream to iterate
   * (`for await`). With `onEvent`: resolves, once the run ended, to its terminal event (null when
   * the run had ended before `after`, or when `signal` aborted).
   */
  streamRun(runId, options = {}) {
    const stream = new RunStream(this, runId, options, anySignal(options.signal), null);
    return options.onEvent ? stream.forEach(options.onEvent) : stream;
  }

  /** @internal One GET of the events after `after`; RunStream's reconnects go through here. */
  openEvents(runId, after, signal) {
    const headers = after > 0 ? { "Last-Event-ID": String(after) } : {};
    const path = `/v1/runs/${encodeURIComponent(runId)}/events`;
    return this.#send("GET", path, { accept: "text/event-stream", headers, signal });
  }

  /**
   * Answer an interrupt: approve / reject a confirm_action, respond to a question (`option` or
   * `fill`, or `input` text), retry / mark_done / abandon an outcome_unknown. `value` (any JSON,
   * null too), with "respond" and alone: the exact value a graph's `interrupt()` returns
   * (LangGraph's `Command(resume=value)`). One idempotency key for this decision (given, or made
   * here) is sent on every retry: a decision whose answer was lost is answered from the stored
   * one, and is never applied twice.
   */
  async resume(runId, interruptId, decision, options = {}) {
    const { option, fill, input, idempotencyKey, signal } = options;
    const body = { interruptId, decision, idempotencyKey: idempotencyKey ?? newIdempotencyKey() };
    if (option !== undefined) body.option = option;
    if (fill !== undefined) body.fill = fill;
    if (input !== undefined) body.input = input;
    if (options.value !== undefined) {
      if (decision !== "respond") {
        throw new TetherError("value answers only with decision \"respond\"", { code: "INVALID_ARGUMENT" });
      }
      if (option !== undefined || fill !== undefined || input !== undefined) {
        throw new TetherError("give value alone, without input, option or fill", { code: "INVALID_ARGUMENT" });
      }
      body.value = checkedJson(options.value, "value");
    }
    const path = `/v1/runs/${encodeURIComponent(runId)}/resume`;
    return this.#json("POST", path, { body, retry: true, signal });
  }

  /** resume(..., "approve", ...). */
  approve(runId, interruptId, options) {
    return this.resume(runId, interruptId, "approve", options);
  }

  /** resume(..., "reject", ...). */
  reject(runId, interruptId, options) {
    return this.resume(runId, interruptId, "reject", options);
  }

  /**
   * Cancel a run: resolves to the run (status "cancelled" at once, or still running when a worker
   * holds it and ends it at its next step). Retried: cancelling twice is the same as once.
   */
  async cancel(runId, reason, { signal } = {}) {
    const body = reason ? { reason } : {};
    const path = `/v1/runs/${encodeURIComponent(runId)}/cancel`;
    return (await this.#json("POST", path, { body, retry: true, signal })).run;
  }

  /** A short-lived token that reads one run's events (for EventSource's `?token=`). */
  async streamToken(runId, { signal } = {}) {
    return this.#json("POST", `/v1/runs/${encodeURIComponent(runId)}/stream-token`, { body: {}, signal });
  }

  // ---- the browser's cookie session -----------------------------------------------------------

  /**
   * POST /v1/session: trade `token` for the gateway's HttpOnly session cookie. The token is sent
   * once, in this request's header, and not kept; later requests use the cookie (and the
   * session's CSRF token, kept in memory). Resolves to {user, csrfToken, expiresAt}.
   */
  async openSession(token, { signal } = {}) {
    const headers = { Authorization: `Bearer ${token}` };
    const session = await this.#json("POST", "/v1/session", { signal, headers, auth: false });
    this.#csrfToken = session.csrfToken;
    return session;
  }

  /**
   * GET /v1/session: the session the cookie holds (after a reload: its user and CSRF token), or
   * null when there is none (401).
   */
  async session({ signal } = {}) {
    try {
      const session = await this.#json("GET", "/v1/session", { retry: true, signal });
      this.#csrfToken = session.csrfToken;
      return session;
    } catch (err) {
      if (err instanceof TetherError && err.status === 401) return null;
      throw err;
    }
  }

  /**
   * Sign out: DELETE /v1/session revokes the token (or session cookie) this client sends, on
   * every gateway pod; streams open with it end with a `reauthenticate` frame. The cookie is
   * cleared and the CSRF token forgotten.
   */
  async closeSession({ signal } = {}) {
    try {
      await this.#json("DELETE", "/v1/session", { signal });
    } finally {
      this.#csrfToken = "";
    }
  }

  /** Only a gateway started by `tether dev` (TETHER_DEV_LOGIN=1): a token for `user`, as the demo's sign-in gets one. */
  async devToken(user, { signal } = {}) {
    return this.#json("POST", "/v1/dev/token", { body: { user }, signal, auth: false });
  }
}

/**
 * One run's events, in order, each once, across reconnects: an async iterable (once), or
 * forEach(onEvent). close() (or the caller's signal) ends it quietly.
 */
export class RunStream {
  #client;
  #options;
  #controller;
  #first;
  #started = false;

  constructor(client, runId, options, controller, firstResponse) {
    this.#client = client;
    this.#options = options;
    this.#controller = controller;
    this.#first = firstResponse;
    this.runId = runId;
    /** The sequence of the last event delivered (where a reconnect resumes). */
    this.lastSequence = Math.max(0, Number(options.after) || 0);
    /** The terminal event, once delivered. */
    this.end = null;
    /** True once the stream is over: a terminal event, a finished run (204), or close(). */
    this.finished = false;
  }

  close() {
    this.#controller.abort();
  }

  async forEach(onEvent) {
    for await (const ev of this) await onEvent(ev);
    return this.end;
  }

  [Symbol.asyncIterator]() {
    if (this.#started) throw new TypeError("a RunStream can be iterated once");
    this.#started = true;
    return this.#events();
  }

  async *#events() {
    const signal = this.#controller.signal;
    const { onConnect, onReconnect, onReauthenticate } = this.#options;
    const retry = { ...this.#client.retry, maxAttempts: Infinity, ...this.#options.retry };
    let res = this.#first;
    this.#first = null;
    let failures = 0;
    let serverRetryMs = null;
    let reauthenticating = false; // the last connection ended with `reauthenticate`, no event since
    try {
      while (!signal.aborted) {
        let lastError;
        try {
          res ??= await this.#client.openEvents(this.runId, this.lastSequence, signal);
          if (res.status === 204) return; // over, and nothing after our position
          if (!res.ok) throw await errorFromResponse(res);
          onConnect?.({ after: this.lastSequence });
          const body = res.body;
          res = null;
          let reauthenticate = null;
          for await (const msg of iterateSse(body, { onRetry: (ms) => (serverRetryMs = ms) })) {
            if (msg.event === "reauthenticate") {
              // The token that opened this stream expired or was revoked: the gateway ends it.
              reauthenticate = parseEvent(msg.data) ?? { type: "reauthenticate", reason: "expired" };
              break;
            }
            const ev = parseEvent(msg.data);
            if (!ev) continue;
            if (ev.type === "reset") {
              // The stream could not resume where asked: the run's state, and the log goes on
              // from its position. The consumer redraws from ev.run.
              this.lastSequence = Number(ev.run?.lastSequence) || 0;
              failures = 0;
              yield ev;
              if (TERMINAL_STATUSES.has(ev.run?.status)) return;
              continue;
            }
            if (!(ev.sequence > this.lastSequence)) continue; // already delivered
            this.lastSequence = ev.sequence;
            failures = 0;
            reauthenticating = false;
            if (TERMINAL_EVENTS.has(ev.type)) this.end = ev;
            yield ev;
            if (this.end) return;
          }
          if (reauthenticate && !reauthenticating) {
            // A new token (the caller's getToken, or onReauthenticate's doing), then resume
            // after the last event at once: no backoff, not a failure. A second one in a row
            // with nothing delivered between goes the failure path's backoff.
            reauthenticating = true;
            await onReauthenticate?.({ reason: reauthenticate.reason, after: this.lastSequence });
            continue;
          }
          lastError = reauthenticate
            ? new TetherError(`the stream's authorisation ended (${reauthenticate.reason})`, {
                code: "REAUTHENTICATE",
              })
            : new TetherNetworkError("the event stream ended before the run did");
        } catch (err) {
          if (isAbort(err, signal)) return;
          if (err instanceof TetherError && !err.retryable) throw err;
          lastError = err instanceof TetherError ? err : new TetherNetworkError(String(err?.message || err), err);
        }
        res = null;
        failures += 1;
        if (failures > retry.maxAttempts) throw lastError;
        const base = serverRetryMs ?? retry.initialDelayMs;
        const delayMs = lastError.retryAfterMs ?? backoffDelay(failures, base, retry.maxDelayMs);
        onReconnect?.({ attempt: failures, delayMs, error: lastError, after: this.lastSequence });
        await sleep(delayMs, signal);
      }
    } finally {
      this.finished = true;
      if (res) res.body?.cancel().catch(() => {});
    }
  }
}

function parseEvent(data) {
  try {
    const ev = JSON.parse(data);
    return ev && typeof ev === "object" && typeof ev.type === "string" ? ev : null;
  } catch {
    return null;
  }
}
