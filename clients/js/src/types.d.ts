// The gateway's JSON shapes (services/gateway/src/tether_gateway/openapi.json): resources and
// the run's events, a discriminated union on `type`. The enums' names are the protos'
// (wire.generated.d.ts, written by `make gen`).
import type {
  Answer,
  InterruptKind,
  InterruptStatus,
  MessageRole,
  ResolvedDecision,
  RunStatus,
  ToolStatus,
} from "./wire.generated.js";

export type { InterruptKind, InterruptStatus, ResolvedDecision, RunStatus };
/** What a person sends to POST /v1/runs/{id}/resume. */
export type Decision = Answer;

export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  modelSteps: number;
}

export interface InterruptOption {
  value: string;
  label: string;
  description: string;
}

export interface InterruptPayload {
  risk: "low" | "medium" | "high" | "";
  target: string;
  tool: string;
  parameterSummary: string;
  reason: string;
  /** The card's heading; empty for the default one. */
  title: string;
  /** Longer, masked text; a question's prompt. */
  details: string;
  /** A masked preview of the change. */
  preview: string;
  /** select_option: the options offered; [] for other kinds. */
  options: InterruptOption[];
  /** provide_input: the JSON schema (type object) the fill must satisfy; null otherwise. */
  inputSchema: Record<string, unknown> | null;
  /** A graph's interrupt: the value it passed to `interrupt(value)`, whole; null for a native card. */
  value: unknown;
}

export interface Interrupt {
  id: string;
  runId: string;
  kind: InterruptKind;
  status: InterruptStatus;
  payload: InterruptPayload;
  expiresAt: string | null;
  resolvedAt: string | null;
  resolvedBy: string | null;
  decision: string | null;
}

export interface Run {
  id: string;
  conversationId: string;
  userMessageId: string;
  agent: string;
  status: RunStatus;
  lastSequence: number;
  cancelRequested: boolean;
  pendingInterrupt: Interrupt | null;
  createdAt: string | null;
  updatedAt: string | null;
  usage: TokenUsage;
  /** Retention removed the run's events: its state is all that is left (its stream answers `reset`). */
  eventsExpired: boolean;
  /** A completed graph run's final state; null for a native agent or a run not completed. */
  output: Record<string, unknown> | null;
}

export interface Conversation {
  id: string;
  title: string;
  facts: Record<string, unknown>;
  summary: string;
  version: number;
  createdAt: string | null;
  updatedAt: string | null;
}

export interface Message {
  id: string;
  conversationId: string;
  runId: string | null;
  role: MessageRole | "unspecified";
  content: string;
  toolCallId: string | null;
  createdAt: string | null;
}

export interface AgentTool {
  name: string;
  description: string;
  effect: "read" | "write";
  action: string;
  risk: string;
}

export interface Agent {
  name: string;
  description: string;
  tools: AgentTool[];
}

// ---- events --------------------------------------------------------------------------------

interface EventBase {
  runId: string;
  /** The run's dense sequence, 1, 2, 3, ...; the SSE `id:`. */
  sequence: number;
  time: string | null;
}

export interface RunStartedEvent extends EventBase {
  type: "run_started";
  conversationId: string;
}
export interface TextDeltaEvent extends EventBase {
  type: "text_delta";
  messageId: string;
  /** An increment of the assistant's text (never the whole text). */
  delta: string;
}
export interface ToolStartedEvent extends EventBase {
  type: "tool_started";
  callId: string;
  tool: string;
  argsSummary: string;
}
export interface ToolProgressEvent extends EventBase {
  type: "tool_progress";
  callId: string;
  tool: string;
  /** The share done, 0 to 1. */
  fraction: number;
  text: string;
}
export interface ToolFinishedEvent extends EventBase {
  type: "tool_finished";
  callId: string;
  tool: string;
  status: ToolStatus;
  summary: string;
}
export interface InterruptEvent extends EventBase {
  type: "interrupt";
  interruptId: string;
  kind: InterruptKind;
  payload: InterruptPayload;
  expiresAt: string | null;
}
export interface InterruptResolvedEvent extends EventBase {
  type: "interrupt_resolved";
  interruptId: string;
  decision: ResolvedDecision;
  /** Who decided (a user id); null for an expiry or a gateway older than this field. */
  resolvedBy?: string | null;
}
export interface DoneEvent extends EventBase {
  type: "done";
  messageId: string;
  /** What the whole run used. */
  usage: TokenUsage;
  /** A graph agent's final state; null for a native agent. */
  output: Record<string, unknown> | null;
}
export interface ErrorEvent extends EventBase {
  type: "error";
  code: string;
  message: string;
}
export interface CancelledEvent extends EventBase {
  type: "cancelled";
  reason: string;
}
/** A graph agent's node update of one step (LangGraph's `updates` stream mode). */
export interface GraphUpdateEvent extends EventBase {
  type: "graph_update";
  node: string;
  update: unknown;
  /** The graph step (checkpoint step) the update goes into. */
  step: number;
}
/** A graph agent's whole state after a step (LangGraph's `values` stream mode). */
export interface GraphValuesEvent extends EventBase {
  type: "graph_values";
  values: Record<string, unknown> | null;
  /** The graph step whose state this is. */
  step: number;
}
/** What a graph wrote with `get_stream_writer()(data)` (LangGraph's `custom` stream mode). */
export interface CustomDataEvent extends EventBase {
  type: "custom_data";
  data: unknown;
  /** The graph step of the node that wrote it. */
  step: number;
}
/** Not a position in the log: the run's state, when the stream cannot resume where asked. */
export interface ResetEvent extends EventBase {
  type: "reset";
  run: Run;
}

export type TerminalEvent = DoneEvent | ErrorEvent | CancelledEvent;

export type RunEvent =
  | RunStartedEvent
  | TextDeltaEvent
  | ToolStartedEvent
  | ToolProgressEvent
  | ToolFinishedEvent
  | InterruptEvent
  | InterruptResolvedEvent
  | GraphUpdateEvent
  | GraphValuesEvent
  | CustomDataEvent
  | TerminalEvent
  | ResetEvent;

export type RunEventType = RunEvent["type"];
