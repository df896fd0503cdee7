// Checked by `tsc -p clients/js` (never run): the declarations type a real program, the event
// union narrows on `type`, and misuse does not compile.
import {
  TERMINAL_EVENT_TYPES,
  TERMINAL_RUN_STATUSES,
  TetherApiError,
  TetherClient,
  type RunEvent,
  type RunStatus,
  type RunStream,
  type TerminalEvent,
  createSseParser,
} from "@tether/client";
import { iterateSse } from "@tether/client/sse";

export async function flow(): Promise<TerminalEvent | null> {
  const client = new TetherClient({ baseUrl: "http://127.0.0.1:8080", getToken: async () => "t" });
  const conversation = await client.createConversation({ title: "x" });
  const stream: RunStream = await client.startRun(conversation.id, "hello", { stream: true, agent: "opspilot" });
  for await (const ev of stream) {
    if (ev.type === "interrupt") {
      const options: string[] = ev.payload.options.map((o) => o.value);
      await client.resume(stream.runId, ev.interruptId, "respond", { option: options[0] });
    }
    if (ev.type === "text_delta") ev.delta.toUpperCase();
    if (ev.type === "graph_update") void [ev.node.toUpperCase(), ev.update];
    if (ev.type === "graph_values") void ev.values?.["messages"];
    if (ev.type === "custom_data") void ev.data;
    if (ev.type === "interrupt") void ev.payload.value;
    if (ev.type === "done") return ev.usage.inputTokens > 0 || ev.output !== null ? ev : null;
  }
  const { run, replayed } = await client.startRun(conversation.id, "again");
  const status: "queued" | "running" | "interrupted" | "completed" | "failed" | "cancelled" | "waiting" =
    run.status;
  void status;
  void replayed;
  void run.output?.["messages"];
  const end = await client.streamRun(run.id, {
    after: 3,
    onEvent: (e: RunEvent) => void e.sequence,
    onReauthenticate: async ({ reason, after }) => void (reason === "revoked" ? after : 0),
  });
  await client.closeSession();
  try {
    await client.cancel(run.id, "bored");
  } catch (err) {
    if (err instanceof TetherApiError && err.code === "RUN_NOT_CANCELLABLE") return end;
  }
  createSseParser({ onEvent: (m) => void m.data.length }).feed("data: x\n\n");
  for await (const m of iterateSse(new ReadableStream<Uint8Array>())) void m.id;
  return end;
}

export function narrowing(ev: RunEvent): string {
  switch (ev.type) {
    case "tool_progress":
      return `${ev.tool} ${Math.round(ev.fraction * 100)}%`;
    case "interrupt_resolved":
      return `${ev.decision} by ${ev.resolvedBy ?? "?"}`;
    case "reset":
      return ev.run.status;
    default:
      return ev.type;
  }
}

export async function browserSession(devToken: string): Promise<string> {
  // Cookie mode: no token kept; the session's CSRF token rides along on writes.
  const client = new TetherClient({ credentials: "same-origin" });
  const opened = await client.openSession(devToken);
  const again = await client.session();
  await client.closeSession();
  return `${opened.user} ${opened.expiresAt} ${again?.csrfToken ?? "signed out"}`;
}

// The wire's names (wire.generated.js) type what they list.
export function wireNames(status: RunStatus, ev: RunEvent): boolean {
  const ended: readonly ["completed", "failed", "cancelled"] = TERMINAL_RUN_STATUSES;
  const last: readonly ["done", "error", "cancelled"] = TERMINAL_EVENT_TYPES;
  const waiting: RunStatus = "waiting";
  return (ended as readonly string[]).includes(status) || (last as readonly string[]).includes(ev.type) || status === waiting;
}

export async function graphRun(client: TetherClient, conversationId: string): Promise<unknown> {
  const { run } = await client.startRun(conversationId, "", { agent: "hitl", input: { title: "disk full" } });
  await client.resume(run.id, "intr", "respond", { value: { type: "edit", args: null } });
  await client.resume(run.id, "intr", "respond", { value: null });
  for await (const ev of client.streamRun(run.id)) {
    if (ev.type === "graph_update") return [ev.node, ev.update, ev.step];
  }
  return null;
}

export function misuse(client: TetherClient, ev: RunEvent): void {
  // @ts-expect-error: a graph's input is an object, not a list
  void client.startRun("conv", "", { input: [1, 2] });
  // @ts-expect-error: "paused" is no run status
  const paused: RunStatus = "paused";
  void paused;
  // @ts-expect-error: "approved" is an event's decision, not one a person sends
  void client.resume("run", "intr", "approved");
  // @ts-expect-error: only text_delta has a delta
  void ev.delta;
  // @ts-expect-error: the stream's iterator yields events, not strings
  const s: AsyncIterable<string> = client.streamRun("run");
  void s;
}
