"""Settings: read once from the environment into a frozen dataclass, checked before start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal

from tether_common.errors import UnsafeSettings
from tether_common.redaction import redact_mapping

DEV_JWT_SECRET = "tether-dev-secret-do-not-use-in-production"  # noqa: S105 - a known dev value
MIN_SECRET_BYTES = 32


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as err:
        raise UnsafeSettings(f"{name}={raw!r} is not a number") from err


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return int(_float(env, name, default))


def _tool_pairs(env: Mapping[str, str], name: str) -> frozenset[str]:
    """Comma-separated `agent:tool` (or `agent:*`) entries; a malformed one fails the start
    (a typo would otherwise leave a tool open to everyone)."""
    pairs = frozenset(s.strip() for s in env.get(name, "").split(",") if s.strip())
    for pair in pairs:
        agent, _, tool = pair.partition(":")
        if not agent.strip() or not tool.strip() or "/" in pair or ":" in tool:
            raise UnsafeSettings(f"{name}: {pair!r} is not 'agent:tool' or 'agent:*'")
    return pairs


MODEL_CHOICES = ("agent", "openai", "anthropic")


@dataclass(frozen=True)
class Settings:
    env: Literal["dev", "production"] = "dev"
    database_url: str = "postgresql://postgres@127.0.0.1:5432/tether"
    redis_url: str = "redis://127.0.0.1:6379/0"
    embedded_stores: bool = False
    grpc_addr: str = "127.0.0.1:50051"
    http_addr: str = "127.0.0.1:8080"
    runtime_target: str = "127.0.0.1:50051"
    jwt_secret: str = DEV_JWT_SECRET
    sse_heartbeat_s: float = 15.0
    sse_retry_ms: int = 2000
    sse_buffer_bytes: int = 1 << 20
    drain_s: float = 20.0
    lease_ttl_s: float = 15.0
    worker_concurrency: int = 256
    # Postgres connections per process; runs hold one only for the length of a statement batch.
    db_pool_size: int = 20
    poll_interval_s: float = 2.0
    # Poison runs: claims a run may have without pausing or ending (its worker died or lost the
    # lease each time) before the next claim fails it with RUN_ATTEMPTS_EXHAUSTED; and the wait
    # past its lease before such a run is claimed again, from its second takeover on (doubling
    # per attempt, at most 60 s).
    max_run_attempts: int = 5
    run_retry_backoff_s: float = 1.0
    interrupt_ttl_s: float = 900.0
    tool_gate_mode: Literal["observe", "enforce"] = "enforce"
    # "agent:tool" pairs the tool gate refuses (an operator's switch for one tool, fleet-wide).
    tool_deny: frozenset[str] = frozenset()
    # "agent:tool" (or "agent:*") entries offered only to users holding `tool.use` on
    # "agent/tool" (TETHER_TOOL_ALLOW_GRANT); other users are never offered them.
    tool_allow_grant: frozenset[str] = frozenset()
    # The agent a run gets when it names none (when only one agent is loaded: that one).
    default_agent: str = "opspilot"
    # Agents to load: `module:attribute` specs, and whether the `tether.agents` entry points too.
    agents: tuple[str, ...] = ()
    agent_entry_points: bool = True
    # Set only by `tether conformance` for the runtimes it starts (refused in production).
    conformance_plan: str = ""
    # What a runtime process does: serve the gRPC API, execute runs (the worker), or both. Split,
    # the API's event loop is not shared with agent loops (README, "Splitting the runtime"):
    # accepting RPCs and streaming stay prompt however busy the runs are.
    runtime_role: Literal["all", "api", "worker"] = "all"
    # "agent": each agent's own model (its ScriptedModel or provider); "openai" / "anthropic":
    # every agent on the provider configured below. Anything else is refused at start.
    model: str = "agent"
    scripted_delay_s: float = 0.02
    # Text deltas arriving within this window become one text_delta event (0: one per delta).
    coalesce_s: float = 0.04
    openai_base_url: str = ""
    openai_api_key: str = field(default="", repr=False)
    # A mounted secret holding the key (wins over TETHER_OPENAI_API_KEY).
    openai_api_key_file: str = ""
    openai_model: str = "gpt-4o-mini"
    anthropic_base_url: str = ""
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_api_key_file: str = ""
    anthropic_model: str = "claude-sonnet-4-5"
    stream_quiet_check_s: float = 1.0
    # Runtime: close HTTP/2 connections after this age, so clients rebalance over new pods.
    grpc_max_connection_age_s: float = 300.0
    # Runtime: serve Prometheus metrics here ("host:port"); empty: not served.
    metrics_addr: str = ""
    max_body_bytes: int = 64 * 1024
    rate_limit_per_min: int = 120
    # Per user, per minute; 0 turns a limit off (load tests). Default: rate_limit_per_min.
    rate_limit_start_per_min: int = 120
    rate_limit_resume_per_min: int = 120
    rate_limit_conversation_per_min: int = 120
    rate_limit_events_per_min: int = 120  # SSE opens (EventSource reconnects count too)
    rate_limit_stream_token_per_min: int = 120
    rate_limit_cancel_per_min: int = 120
    # Gateway: open SSE streams per user across every gateway pod (counted in Redis); 0: no cap.
    max_streams_per_user: int = 20
    log_level: str = "INFO"
    service_name: str = "tether"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        mode = e.get("TETHER_ENV", "dev")
        if mode not in ("dev", "production"):
            raise UnsafeSettings(f"TETHER_ENV must be 'dev' or 'production', not {mode!r}")
        gate = e.get("TETHER_TOOL_GATE", "enforce")
        if gate not in ("observe", "enforce"):
            raise UnsafeSettings(f"TETHER_TOOL_GATE must be 'observe' or 'enforce', not {gate!r}")
        model = e.get("TETHER_MODEL", cls.model) or cls.model
        model = "agent" if model == "scripted" else model  # the name it had before providers
        if model not in MODEL_CHOICES:
            raise UnsafeSettings(
                f"TETHER_MODEL must be one of {', '.join(MODEL_CHOICES)}, not {model!r} "
                "(agent: each agent's own model; openai / anthropic: every agent on that provider)"
            )
        role = e.get("TETHER_RUNTIME_ROLE", cls.runtime_role)
        if role not in ("all", "api", "worker"):
            raise UnsafeSettings(
                f"TETHER_RUNTIME_ROLE must be 'all', 'api' or 'worker', not {role!r}"
            )
        grpc_addr = e.get("TETHER_GRPC_ADDR", cls.grpc_addr)
        max_attempts = _int(e, "TETHER_MAX_RUN_ATTEMPTS", cls.max_run_attempts)
        if max_attempts < 1:
            raise UnsafeSettings(f"TETHER_MAX_RUN_ATTEMPTS must be at least 1, not {max_attempts}")
        backoff = _float(e, "TETHER_RUN_RETRY_BACKOFF_S", cls.run_retry_backoff_s)
        if backoff < 0:
            raise UnsafeSettings(f"TETHER_RUN_RETRY_BACKOFF_S must not be negative, not {backoff}")
        rate = _int(e, "TETHER_RATE_LIMIT_PER_MIN", cls.rate_limit_per_min)
        return cls(
            env=mode,  # type: ignore[arg-type]
            database_url=e.get("DATABASE_URL", cls.database_url),
            redis_url=e.get("REDIS_URL", "" if mode == "production" else cls.redis_url),
            embedded_stores=e.get("TETHER_EMBEDDED_STORES", "") in ("1", "true"),
            grpc_addr=grpc_addr,
            http_addr=e.get("TETHER_HTTP_ADDR", cls.http_addr),
            runtime_target=e.get("TETHER_RUNTIME_TARGET", grpc_addr),
            jwt_secret=e.get("TETHER_JWT_SECRET", "" if mode == "production" else DEV_JWT_SECRET),
            sse_heartbeat_s=_float(e, "TETHER_SSE_HEARTBEAT_S", cls.sse_heartbeat_s),
            sse_retry_ms=_int(e, "TETHER_SSE_RETRY_MS", cls.sse_retry_ms),
            sse_buffer_bytes=_int(e, "TETHER_SSE_BUFFER_BYTES", cls.sse_buffer_bytes),
            drain_s=_float(e, "TETHER_DRAIN_S", cls.drain_s),
            lease_ttl_s=_float(e, "TETHER_LEASE_TTL_S", cls.lease_ttl_s),
            worker_concurrency=_int(e, "TETHER_WORKER_CONCURRENCY", cls.worker_concurrency),
            db_pool_size=_int(e, "TETHER_DB_POOL_SIZE", cls.db_pool_size),
            poll_interval_s=_float(e, "TETHER_POLL_INTERVAL_S", cls.poll_interval_s),
            max_run_attempts=max_attempts,
            run_retry_backoff_s=backoff,
            interrupt_ttl_s=_float(e, "TETHER_INTERRUPT_TTL_S", cls.interrupt_ttl_s),
            tool_gate_mode=gate,  # type: ignore[arg-type]
            tool_deny=frozenset(
                s.strip() for s in e.get("TETHER_TOOL_DENY", "").split(",") if s.strip()
            ),
            tool_allow_grant=_tool_pairs(e, "TETHER_TOOL_ALLOW_GRANT"),
            default_agent=e.get("TETHER_DEFAULT_AGENT", cls.default_agent),
            agents=tuple(s.strip() for s in e.get("TETHER_AGENTS", "").split(",") if s.strip()),
            agent_entry_points=e.get("TETHER_AGENT_ENTRY_POINTS", "1") not in ("0", "false"),
            conformance_plan=e.get("TETHER_CONFORMANCE_PLAN", ""),
            runtime_role=role,  # type: ignore[arg-type]
            model=model,
            scripted_delay_s=_float(e, "TETHER_SCRIPTED_DELAY_S", cls.scripted_delay_s),
            coalesce_s=_float(e, "TETHER_COALESCE_MS", cls.coalesce_s * 1000) / 1000,
            openai_base_url=e.get("TETHER_OPENAI_BASE_URL", ""),
            openai_api_key=e.get("TETHER_OPENAI_API_KEY", ""),
            openai_api_key_file=e.get("TETHER_OPENAI_API_KEY_FILE", ""),
            openai_model=e.get("TETHER_OPENAI_MODEL", cls.openai_model),
            anthropic_base_url=e.get("TETHER_ANTHROPIC_BASE_URL", ""),
            anthropic_api_key=e.get("TETHER_ANTHROPIC_API_KEY", ""),
            anthropic_api_key_file=e.get("TETHER_ANTHROPIC_API_KEY_FILE", ""),
            anthropic_model=e.get("TETHER_ANTHROPIC_MODEL", cls.anthropic_model),
            stream_quiet_check_s=_float(e, "TETHER_STREAM_QUIET_CHECK_S", cls.stream_quiet_check_s),
            grpc_max_connection_age_s=_float(
                e, "TETHER_GRPC_MAX_CONNECTION_AGE_S", cls.grpc_max_connection_age_s
            ),
            metrics_addr=e.get("TETHER_METRICS_ADDR", ""),
            max_body_bytes=_int(e, "TETHER_MAX_BODY_BYTES", cls.max_body_bytes),
            rate_limit_per_min=rate,
            rate_limit_start_per_min=_int(e, "TETHER_RATE_LIMIT_START_PER_MIN", rate),
            rate_limit_resume_per_min=_int(e, "TETHER_RATE_LIMIT_RESUME_PER_MIN", rate),
            rate_limit_conversation_per_min=_int(e, "TETHER_RATE_LIMIT_CONVERSATION_PER_MIN", rate),
            rate_limit_events_per_min=_int(e, "TETHER_RATE_LIMIT_EVENTS_PER_MIN", rate),
            rate_limit_stream_token_per_min=_int(e, "TETHER_RATE_LIMIT_STREAM_TOKEN_PER_MIN", rate),
            rate_limit_cancel_per_min=_int(e, "TETHER_RATE_LIMIT_CANCEL_PER_MIN", rate),
            max_streams_per_user=_int(e, "TETHER_MAX_STREAMS_PER_USER", cls.max_streams_per_user),
            log_level=e.get("TETHER_LOG_LEVEL", cls.log_level),
            service_name=e.get("OTEL_SERVICE_NAME", cls.service_name),
        )

    def unsafe_for_production(self) -> list[str]:
        """Every reason this configuration would break a guarantee in production."""
        problems: list[str] = []
        if self.embedded_stores:
            problems.append(
                "TETHER_EMBEDDED_STORES is set: embedded Postgres/Redis are single-process and "
                "live on one pod's disk: runs, interrupts and approvals would be lost or "
                "invisible to other pods"
            )
        if not self.redis_url:
            problems.append(
                "REDIS_URL is not set: events could not fan out across pods, so a browser "
                "connected to one gateway would never see a run executing on another runtime"
            )
        if not self.jwt_secret or self.jwt_secret == DEV_JWT_SECRET:
            problems.append(
                "TETHER_JWT_SECRET is missing or the public dev value: anyone could mint a "
                "token and approve another person's actions"
            )
        elif len(self.jwt_secret.encode()) < MIN_SECRET_BYTES:
            problems.append(
                f"TETHER_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes: tokens could be "
                "forged"
            )
        for name, url in (("DATABASE_URL", self.database_url), ("REDIS_URL", self.redis_url)):
            if (
                "127.0.0.1" in url
                or "localhost" in url
                or url.startswith("redis+unix")
                or ("host=/" in url)
            ):
                problems.append(
                    f"{name} points at this machine (or is unset and defaults to it): other pods "
                    "cannot share it, so a run paused on one pod could not be resumed on another"
                )
        return problems

    def check(self) -> None:
        """Refuse to start in production on unsafe settings (invariant 8)."""
        if self.env != "production":
            return
        problems = self.unsafe_for_production()
        if problems:
            raise UnsafeSettings(
                "refusing to start with TETHER_ENV=production, because:\n"
                + "".join(f"  - {p}\n" for p in problems)
                + "Fix these settings, or unset TETHER_ENV for a development run."
            )

    def public_view(self) -> dict[str, object]:
        """The live settings with every secret masked, for the start-up log line."""
        return redact_mapping(asdict(self))
