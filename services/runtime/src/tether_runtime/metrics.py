"""The runtime's Prometheus metrics, defined once."""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from tether_runtime.store.statement_count import StatementCollector

RUNS_STARTED = Counter("tether_runs_started_total", "Runs queued by StartRun")
RUNS_FINISHED = Counter("tether_runs_finished_total", "Runs that left a worker", ["status"])
QUEUE_DEPTH = Gauge("tether_queue_depth", "Queued runs waiting for a worker")
QUEUE_OLDEST_AGE = Gauge("tether_queue_oldest_age_seconds", "Age of the oldest queued run")
LEASE_TAKEOVERS = Counter("tether_lease_takeovers_total", "Runs claimed after a lease expired")
LEASES_LOST = Counter("tether_leases_lost_total", "Runs a worker lost to another")
RUNS_POISONED = Counter(
    "tether_runs_poisoned_total",
    "Runs failed with RUN_ATTEMPTS_EXHAUSTED: their worker stopped on every attempt",
)
RESUME_OUTCOMES = Counter("tether_resume_outcomes_total", "ResumeRun answers", ["outcome"])
TOOL_GATE_VIOLATIONS = Counter(
    "tether_tool_gate_violations_total",
    "Tool calls outside the agent's allowlist",
    ["mode", "agent", "tool"],
)
TOOL_CALLS = Counter("tether_tool_calls_total", "Tool calls executed", ["tool", "status"])
TOOL_RECOVERIES = Counter(
    "tether_tool_recoveries_total", "Write calls found mid-call after a crash", ["tool"]
)
OUTCOME_UNKNOWN = Counter(
    "tether_tool_outcome_unknown_total",
    "Write calls whose outcome nobody could tell, handed to a person",
    ["tool"],
)
EVENTS_APPENDED = Counter("tether_events_appended_total", "Events committed to the log")
WRITE_RETRIES = Counter(
    "tether_run_write_retries_total", "Run writes retried while the store was unreachable"
)
STREAMS_ACTIVE = Gauge("tether_event_streams_active", "Open StreamRunEvents calls")
STREAM_GAP_FILLS = Counter("tether_stream_gap_fills_total", "Gaps filled from Postgres")
GRPC_LATENCY = Histogram(
    "tether_grpc_request_seconds",
    "Unary gRPC latency",
    ["method", "code"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
MODEL_TOKENS = Counter(
    "tether_model_tokens_total",
    "Tokens model steps used, as the provider counted them",
    ["agent", "provider", "model", "direction"],
)
MODEL_RETRIES = Counter(
    "tether_model_retries_total",
    "Model steps tried again after a transient provider error",
    ["agent", "provider", "code"],
)
MODEL_FAILURES = Counter(
    "tether_model_failures_total",
    "Runs a provider error ended (permanent, or transient past the retries)",
    ["agent", "provider", "code"],
)
CONVERSATION_SUMMARIES = Counter(
    "tether_conversation_summaries_total",
    "Background summaries of earlier turns: stored, superseded (another pod's was newer), failed",
    ["result"],
)
# tether_db_statements_total{kind}: read from the pool's counting connections when scraped
REGISTRY.register(StatementCollector())
