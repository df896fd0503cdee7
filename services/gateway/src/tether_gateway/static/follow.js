// The follow loop: one run's events from the client's RunStream (which reconnects from the last
// sequence after any drop, with backoff) into its RunView, and the connection's state for the top
// bar. A run already over when it is followed (204) is read once with GET /v1/runs/{id}.
import { TetherError } from "./client/index.js";

/**
 * Follow `runId` (or a stream already open, from startRun) into `view` until the run ends or
 * `close()`. `onConnection("live" | "reconnecting" | "idle")` drives the top bar;
 * `onError(err)` hears what ends the follow early (401, 404, ...).
 */
export function follow(client, view, { runId, stream, onConnection, onError }) {
  const controller = new AbortController();
  const hooks = {
    signal: controller.signal,
    onConnect: () => onConnection("live"),
    onReconnect: () => onConnection("reconnecting"),
  };
  const events = stream ?? client.streamRun(runId, { after: 0, ...hooks });
  controller.signal.addEventListener("abort", () => events.close(), { once: true });
  const done = (async () => {
    try {
      for await (const ev of events) view.apply(ev);
      if (!events.end && !controller.signal.aborted && !view.terminal) {
        view.applyRun(await client.getRun(events.runId, { signal: controller.signal }));
      }
    } catch (err) {
      if (controller.signal.aborted || err?.name === "AbortError") return;
      if (err instanceof TetherError) view.setNote(`Cannot follow this run: ${err.message}`);
      onError?.(err);
    } finally {
      if (!controller.signal.aborted) onConnection("idle");
    }
  })();
  return { runId: events.runId, done, close: () => controller.abort() };
}

/** The hooks a stream opened by startRun needs to report its connection like follow() does. */
export function streamHooks(onConnection) {
  return {
    onConnect: () => onConnection("live"),
    onReconnect: () => onConnection("reconnecting"),
  };
}
