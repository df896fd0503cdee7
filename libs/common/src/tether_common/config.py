"""Settings: read once from the environment into a frozen dataclass, checked before start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal, TypedDict

from tether_common import production_guard
from tether_common.cpus import parse_processes
from tether_common.errors import UnsafeSettings
from tether_common.production_guard import Component
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


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "")
    if raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise UnsafeSettings(f"{name}={raw!r} is not a switch (1/0, true/false)")


MAX_STREAM_TOKEN_TTL_S = 300.0


def _stream_token_ttl(env: Mapping[str, str]) -> float:
    ttl = _float(env, "TETHER_STREAM_TOKEN_TTL_S", 120.0)
    if not 1 <= ttl <= MAX_STREAM_TOKEN_TTL_S:
        raise UnsafeSettings(
            f"TETHER_STREAM_TOKEN_TTL_S must be between 1 and {MAX_STREAM_TOKEN_TTL_S:.0f} "
            f"seconds, not {ttl}: a stream token must be short-lived"
        )
    return ttl


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
MAX_JWT_LEEWAY_S = 300.0


class _IdentitySettings(TypedDict):
    oidc_issuer: str
    oidc_audience: str
    oidc_jwks_url: str
    oidc_jwks_ttl_s: float
    oidc_jwks_refetch_s: float
    jwt_leeway_s: float


def _oidc_settings(e: Mapping[str, str]) -> _IdentitySettings:
    """The token issuer's settings, refused when they could never verify a token."""
    issuer = e.get("TETHER_OIDC_ISSUER", "")
    audience = e.get("TETHER_OIDC_AUDIENCE", "")
    if issuer and not audience:
        raise UnsafeSettings(
            "TETHER_OIDC_ISSUER is set without TETHER_OIDC_AUDIENCE: every token's `aud` "
            "would be refused; set the audience your identity provider puts in Tether's tokens"
        )
    leeway = _float(e, "TETHER_JWT_LEEWAY_S", Settings.jwt_leeway_s)
    if not 0 <= leeway <= MAX_JWT_LEEWAY_S:
        raise UnsafeSettings(
            f"TETHER_JWT_LEEWAY_S must be between 0 and {MAX_JWT_LEEWAY_S:g} seconds, not {leeway}"
        )
    return _IdentitySettings(
        oidc_issuer=issuer,
        oidc_audience=audience,
        oidc_jwks_url=e.get("TETHER_OIDC_JWKS_URL", ""),
        oidc_jwks_ttl_s=_float(e, "TETHER_OIDC_JWKS_TTL_S", Settings.oidc_jwks_ttl_s),
        oidc_jwks_refetch_s=_float(e, "TETHER_OIDC_JWKS_REFETCH_S", Settings.oidc_jwks_refetch_s),
        jwt_leeway_s=leeway,
    )


@dataclass(frozen=True)
class Settings:
    env: Literal["dev", "production"] = "dev"
    database_url: str = "postgresql://postgres@127.0.0.1:5432/tether"
    redis_url: str = "redis://127.0.0.1:6379/0"
    embedded_stores: bool = False
    grpc_addr: str = "127.0.0.1:50051"
    http_addr: str = "127.0.0.1:8080"
    runtime_target: str = "127.0.0.1:50051"
    # The HS256 dev issuer's key: `tether dev` and tests only; refused in production.
    jwt_secret: str = DEV_JWT_SECRET
    # Tokens from the company's OIDC issuer (README, "Identity"): `iss` must equal oidc_issuer,
    # `aud` oidc_audience; keys from its JWKS (discovered unless oidc_jwks_url is set), kept
    # oidc_jwks_ttl_s, refetched for an unknown key id at most once per oidc_jwks_refetch_s.
    oidc_issuer: str = ""
    oidc_audience: str = ""
    oidc_jwks_url: str = ""
    oidc_jwks_ttl_s: float = 600.0
    oidc_jwks_refetch_s: float = 10.0
    # Clock skew allowed on exp/nbf/iat of every token (pods' clocks are never exactly equal).
    jwt_leeway_s: float = 30.0
    sse_heartbeat_s: float = 15.0
    sse_retry_ms: int = 2000
    sse_buffer_bytes: int = 1 << 20
    drain_s: float = 20.0
    lease_ttl_s: float = 15.0
    worker_concurrency: int = 256
    # Postgres connections per process; runs hold one only for the length of a statement batch.
    db_pool_size: int = 20
    # "transaction": DATABASE_URL goes through a transaction-mode pooler (PgBouncer), where a
    # server connection is shared between transactions: no statement cache, no session settings,
    # and LISTEN only on db_listen_url (README, "Running behind PgBouncer").
    db_pooler: Literal["none", "transaction"] = "none"
    # A session-mode DSN (Postgres itself, or a session pool) for the workers' LISTEN connection.
    # Empty: DATABASE_URL without a pooler; behind one, no LISTEN at all (polling only).
    db_listen_url: str = ""
    poll_interval_s: float = 2.0
    # Poison runs: claims a run may have without pausing or ending (its worker died or lost the
    # lease each time) before the next claim fails it with RUN_ATTEMPTS_EXHAUSTED; and the wait
    # past its lease before such a run is claimed again, from its second takeover on (doubling
    # per attempt, at most 60 s).
    max_run_attempts: int = 5
    run_retry_backoff_s: float = 1.0
    # A run's writes wait out a store outage this long (retried every 50-250 ms) before the run
    # is handed back: the run keeps its place instead of re-running its step from the checkpoint.
    store_ride_out_s: float = 30.0
    interrupt_ttl_s: float = 900.0
    # How long an idempotency key's stored answer is kept (AIP-155): longer than any client
    # retries a request; past it the key is free again and a job deletes it.
    idempotency_ttl_s: float = 7 * 86400.0
    # A finished run's checkpoint (its whole transcript) is compacted to its usage figures this
    # long after it ended (the transcript stays in the messages and the event log).
    checkpoint_compact_after_s: float = 86400.0
    # run_event's partitions (one per day of run creation) are dropped once every run in them was
    # created this long ago and has finished; 0 keeps events forever.
    event_retention_s: float = 30 * 86400.0
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
    # Serve Prometheus metrics here ("host:port"). Runtime: empty, not served. Gateway: empty,
    # on its API port's /metrics; set, on this port alone (not on the API port).
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
    # Gateway: continue a caller's `traceparent` and baggage (only internal callers reach it);
    # off: each request starts its own trace and links the caller's (request_tracing.py).
    trust_traceparent: bool = False
    # Issue #16, stream tokens and the gateway's service identity (gateway only). The stream
    # token key: empty in dev means derived from jwt_secret (stream_tokens.stream_token_key).
    stream_token_secret: str = field(default="", repr=False)
    stream_token_ttl_s: float = 120.0
    oidc_client_id: str = ""
    oidc_client_secret: str = field(default="", repr=False)
    oidc_client_secret_file: str = ""
    log_level: str = "INFO"
    service_name: str = "tether"
    # --- deployment: what a pod exposes (deploy/k8s/README.md) ---
    # Gateway: serve POST /v1/dev/token (a token for any user name). Set only by `tether dev`
    # and tests; refused in production; never implied by TETHER_ENV.
    dev_login: bool = False
    # Runtime: serve gRPC over TLS with this certificate chain and key (PEM files).
    grpc_tls_cert_file: str = ""
    grpc_tls_key_file: str = ""
    # Runtime: also serve grpc.health.v1 alone, in plaintext, here ("host:port"; kubelet's
    # native gRPC probes speak no TLS); empty: not served.
    grpc_health_addr: str = ""
    # Runtime: gRPC server reflection (default on in dev, off in production).
    grpc_reflection: bool = True
    # Gateway and other runtime clients: verify the runtime's TLS certificate with this CA
    # bundle (PEM); set, the channel is TLS. The name to verify, when not the target's host.
    runtime_tls_ca_file: str = ""
    runtime_tls_server_name: str = ""
    # `tether runtime` / `tether gateway`: processes behind the one port (SO_REUSEPORT), under
    # one supervisor (tether_cli/pod.py); 1 is a single process and no supervisor.
    processes: int = 1

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
        idem_ttl = _float(e, "TETHER_IDEMPOTENCY_TTL_S", cls.idempotency_ttl_s)
        if idem_ttl < 3600:
            raise UnsafeSettings(
                f"TETHER_IDEMPOTENCY_TTL_S must be at least 3600 (an hour: longer than any client "
                f"retry), not {idem_ttl}"
            )
        compact_after = _float(
            e, "TETHER_CHECKPOINT_COMPACT_AFTER_S", cls.checkpoint_compact_after_s
        )
        if compact_after < 0:
            raise UnsafeSettings(
                f"TETHER_CHECKPOINT_COMPACT_AFTER_S must not be negative, not {compact_after}"
            )
        retention = _float(e, "TETHER_EVENT_RETENTION_S", cls.event_retention_s)
        if retention != 0 and retention < 86400:
            raise UnsafeSettings(
                f"TETHER_EVENT_RETENTION_S must be 0 (keep forever) or at least 86400 (a day: the "
                f"event log is dropped a day's partition at a time), not {retention}"
            )
        rate = _int(e, "TETHER_RATE_LIMIT_PER_MIN", cls.rate_limit_per_min)
        oidc = _oidc_settings(e)
        pooler = e.get("TETHER_DB_POOLER", cls.db_pooler) or cls.db_pooler
        if pooler not in ("none", "transaction"):
            raise UnsafeSettings(
                f"TETHER_DB_POOLER must be 'none' or 'transaction' (DATABASE_URL goes through "
                f"PgBouncer in transaction mode), not {pooler!r}"
            )
        return cls(
            env=mode,  # type: ignore[arg-type]
            database_url=e.get("DATABASE_URL", cls.database_url),
            redis_url=e.get("REDIS_URL", "" if mode == "production" else cls.redis_url),
            embedded_stores=e.get("TETHER_EMBEDDED_STORES", "") in ("1", "true"),
            grpc_addr=grpc_addr,
            http_addr=e.get("TETHER_HTTP_ADDR", cls.http_addr),
            runtime_target=e.get("TETHER_RUNTIME_TARGET", grpc_addr),
            jwt_secret=e.get("TETHER_JWT_SECRET", "" if mode == "production" else DEV_JWT_SECRET),
            **oidc,
            sse_heartbeat_s=_float(e, "TETHER_SSE_HEARTBEAT_S", cls.sse_heartbeat_s),
            sse_retry_ms=_int(e, "TETHER_SSE_RETRY_MS", cls.sse_retry_ms),
            sse_buffer_bytes=_int(e, "TETHER_SSE_BUFFER_BYTES", cls.sse_buffer_bytes),
            drain_s=_float(e, "TETHER_DRAIN_S", cls.drain_s),
            lease_ttl_s=_float(e, "TETHER_LEASE_TTL_S", cls.lease_ttl_s),
            worker_concurrency=_int(e, "TETHER_WORKER_CONCURRENCY", cls.worker_concurrency),
            db_pool_size=_int(e, "TETHER_DB_POOL_SIZE", cls.db_pool_size),
            db_pooler=pooler,  # type: ignore[arg-type]
            db_listen_url=e.get("TETHER_DB_LISTEN_URL", ""),
            poll_interval_s=_float(e, "TETHER_POLL_INTERVAL_S", cls.poll_interval_s),
            max_run_attempts=max_attempts,
            run_retry_backoff_s=backoff,
            store_ride_out_s=_float(e, "TETHER_STORE_RIDE_OUT_S", cls.store_ride_out_s),
            interrupt_ttl_s=_float(e, "TETHER_INTERRUPT_TTL_S", cls.interrupt_ttl_s),
            idempotency_ttl_s=idem_ttl,
            checkpoint_compact_after_s=compact_after,
            event_retention_s=retention,
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
            trust_traceparent=e.get("TETHER_TRUST_TRACEPARENT", "0") in ("1", "true"),
            stream_token_secret=e.get("TETHER_STREAM_TOKEN_SECRET", ""),
            stream_token_ttl_s=_stream_token_ttl(e),
            oidc_client_id=e.get("TETHER_OIDC_CLIENT_ID", ""),
            oidc_client_secret=e.get("TETHER_OIDC_CLIENT_SECRET", ""),
            oidc_client_secret_file=e.get("TETHER_OIDC_CLIENT_SECRET_FILE", ""),
            log_level=e.get("TETHER_LOG_LEVEL", cls.log_level),
            service_name=e.get("OTEL_SERVICE_NAME", cls.service_name),
            **_deployment_settings(e, mode),
        )

    def unsafe_for_production(self, component: Component = "runtime") -> list[str]:
        """Every reason this configuration would break a guarantee in production
        (tether_common.production_guard)."""
        return production_guard.problems(self, component)

    def check(self, component: Component = "runtime") -> None:
        """Refuse to start in production on unsafe settings (tether_common.production_guard)."""
        production_guard.check(self, component)

    def public_view(self) -> dict[str, object]:
        """The live settings with every secret masked, for the start-up log line."""
        return redact_mapping(asdict(self))


class _Deployment(TypedDict):
    dev_login: bool
    grpc_tls_cert_file: str
    grpc_tls_key_file: str
    grpc_health_addr: str
    grpc_reflection: bool
    runtime_tls_ca_file: str
    runtime_tls_server_name: str
    processes: int


def _deployment_settings(e: Mapping[str, str], mode: str) -> _Deployment:
    """The settings of what a pod exposes: dev login, gRPC TLS, reflection, health port."""
    cert = e.get("TETHER_GRPC_TLS_CERT_FILE", "")
    key = e.get("TETHER_GRPC_TLS_KEY_FILE", "")
    if bool(cert) != bool(key):
        raise UnsafeSettings(
            "TETHER_GRPC_TLS_CERT_FILE and TETHER_GRPC_TLS_KEY_FILE go together: set both to "
            "serve gRPC over TLS, or neither"
        )
    return {
        "dev_login": _flag(e, "TETHER_DEV_LOGIN", False),
        "grpc_tls_cert_file": cert,
        "grpc_tls_key_file": key,
        "grpc_health_addr": e.get("TETHER_GRPC_HEALTH_ADDR", ""),
        "grpc_reflection": _flag(e, "TETHER_GRPC_REFLECTION", mode != "production"),
        "runtime_tls_ca_file": e.get("TETHER_RUNTIME_TLS_CA_FILE", ""),
        "runtime_tls_server_name": e.get("TETHER_RUNTIME_TLS_SERVER_NAME", ""),
        "processes": parse_processes("TETHER_PROCESSES", e.get("TETHER_PROCESSES", "1")),
    }


__all__ = ["Component", "Settings", "parse_processes"]
