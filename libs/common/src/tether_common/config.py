"""Settings: read once from the environment (`Settings.from_env`, at start) into a frozen,
validated pydantic-settings model, and checked by the production guard before start."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_origin

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from tether_common import env_values, production_guard
from tether_common.cpus import parse_processes
from tether_common.errors import UnsafeSettings
from tether_common.production_guard import Component
from tether_common.redaction import redact_mapping

DEV_JWT_SECRET = "tether-dev-secret-do-not-use-in-production"  # noqa: S105 - a known dev value
MIN_SECRET_BYTES = 32
MAX_STREAM_TOKEN_TTL_S = 300.0
MAX_JWT_LEEWAY_S = 300.0
MODEL_CHOICES = ("agent", "openai", "anthropic")
COALESCE_MS = "TETHER_COALESCE_MS"
# The per-route limits whose default is TETHER_RATE_LIMIT_PER_MIN.
ROUTE_RATE_LIMITS = (
    "rate_limit_start_per_min",
    "rate_limit_resume_per_min",
    "rate_limit_conversation_per_min",
    "rate_limit_events_per_min",
    "rate_limit_stream_token_per_min",
    "rate_limit_cancel_per_min",
)
# Webhook delivery (README, "Webhooks"): each number's least value.
WEBHOOK_MINIMUMS = {
    "webhook_poll_s": 0.01,
    "webhook_timeout_s": 0.1,
    "webhook_max_attempts": 1,
    "webhook_backoff_s": 0.0,
    "webhook_backoff_max_s": 0.0,
    "webhook_per_endpoint": 1,
    "webhook_max_in_flight": 1,
}


_ORIGIN = re.compile(
    r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?"
)


class _MappingSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (tests pass dicts). Names are
    matched as written, upper case (pydantic-settings alone would also take `tether_env`)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        exact = {k: v for k, v in self._env.items() if k == k.upper()}
        return parse_env_vars(exact, self.case_sensitive, False, None)


class Settings(BaseSettings):
    """Every deployment setting; the README's settings table documents each one's variable
    (TETHER_ and the field's name, unless its alias says otherwise) and default."""

    model_config = SettingsConfigDict(
        frozen=True,
        env_prefix="TETHER_",
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
    )

    env: Literal["dev", "production"] = "dev"
    database_url: str = Field(
        default="postgresql://postgres@127.0.0.1:5432/tether", validation_alias="DATABASE_URL"
    )
    # Default: this in dev, empty (no Redis) in production.
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    embedded_stores: bool = False
    grpc_addr: str = "127.0.0.1:50051"
    http_addr: str = "127.0.0.1:8080"
    runtime_target: str = "127.0.0.1:50051"  # default: grpc_addr
    # The HS256 dev issuer's key: `tether dev` and tests only; refused in production (where
    # its default is empty).
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
    # Gateway: a run's stream from the runtime silent this long is reopened from the last
    # sequence the gateway has (doubling while the run stays quiet, up to 5 min).
    feed_quiet_reopen_s: float = Field(default=15.0, gt=0)
    # Gateway, with Redis: a run it starts with a streaming POST is followed on the Redis bus
    # (the runtime's stream only after a gap, or once the run is quiet for stream_quiet_check_s);
    # false: on the runtime's stream, as a reconnect's run is.
    feed_on_bus: bool = True
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
    # A call waiting for a person's answer (an MCP server's elicitation) is woken by NOTIFY; it
    # reads its card this often anyway (a lost notification). Without LISTEN: every 0.2 s.
    held_poll_s: float = Field(default=5.0, gt=0)
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
    tool_gate_mode: Literal["observe", "enforce"] = Field(
        default="enforce", validation_alias="TETHER_TOOL_GATE"
    )
    # "agent:tool" pairs the tool gate refuses (an operator's switch for one tool, fleet-wide).
    tool_deny: Annotated[frozenset[str], NoDecode] = frozenset()
    # "agent:tool" (or "agent:*") entries offered only to users holding `tool.use` on
    # "agent/tool" (TETHER_TOOL_ALLOW_GRANT); other users are never offered them.
    tool_allow_grant: Annotated[frozenset[str], NoDecode] = frozenset()
    # An operator's JSON file of MCP tool overrides, over the agents' own and the tools'
    # annotations: {"agent": {"server": {"tool": {"effect": "write", "deny": true, ...}}}}.
    mcp_overrides: str = ""
    # The agent a run gets when it names none; empty: the one loaded agent when only one is
    # loaded, else such a run is refused.
    default_agent: str = ""
    # Agents to load: `module:attribute` specs, and whether the `tether.agents` entry points too.
    agents: Annotated[tuple[str, ...], NoDecode] = ()
    agent_entry_points: bool = True
    # Set only by `tether conformance` for the runtimes it starts (refused in production).
    conformance_plan: str = ""
    # What a runtime process does: serve the gRPC API, execute runs (the worker), or both. Split,
    # the API's event loop is not shared with agent loops (README, "Splitting the runtime"):
    # accepting RPCs and streaming stay prompt however busy the runs are.
    runtime_role: Literal["all", "api", "worker"] = "all"
    # "agent": each agent's own model (its ScriptedModel or provider); "openai" / "anthropic":
    # every agent on the provider configured below. Anything else is refused at start.
    model: Literal["agent", "openai", "anthropic"] = "agent"
    scripted_delay_s: float = 0.02
    # Text deltas arriving within this window become one text_delta event (0: one per delta).
    # Set in milliseconds: TETHER_COALESCE_MS.
    coalesce_s: float = Field(default=0.04, validation_alias=COALESCE_MS)
    openai_base_url: str = ""
    openai_api_key: str = Field(default="", repr=False)
    # A mounted secret holding the key (wins over TETHER_OPENAI_API_KEY).
    openai_api_key_file: str = ""
    openai_model: str = "gpt-4o-mini"
    anthropic_base_url: str = ""
    anthropic_api_key: str = Field(default="", repr=False)
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
    # Gateway: the web origins (`https://app.example.com`) whose pages may call /langgraph from
    # the browser (CORS, bearer tokens only, never cookies); empty: none.
    langgraph_cors_origins: Annotated[frozenset[str], NoDecode] = frozenset()
    # Gateway: the same for /agui (AG-UI pages on another origin).
    agui_cors_origins: Annotated[frozenset[str], NoDecode] = frozenset()
    # Gateway: continue a caller's `traceparent` and baggage (only internal callers reach it);
    # off: each request starts its own trace and links the caller's (request_tracing.py).
    trust_traceparent: bool = False
    # Issue #16, stream tokens and the gateway's service identity (gateway only). The stream
    # token key: empty in dev means derived from jwt_secret (stream_tokens.stream_token_key).
    stream_token_secret: str = Field(default="", repr=False)
    stream_token_ttl_s: float = 120.0
    oidc_client_id: str = ""
    oidc_client_secret: str = Field(default="", repr=False)
    oidc_client_secret_file: str = ""
    log_level: str = "INFO"
    # Gateway: log every answer of 400 and above and one in N of the others (1: every request;
    # 0: none of the others). tether_gateway.access_log.
    access_log_sample: int = 100
    # OpenTelemetry's service.name; empty: the process's own (tether-runtime, tether-gateway).
    service_name: str = Field(default="", validation_alias="OTEL_SERVICE_NAME")
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
    # Bind the listen address with SO_REUSEPORT, beside the other processes of a
    # `--processes N` pod (its supervisor sets this for its children). Off, a second process
    # on a port in use fails to start instead of silently taking part of its connections.
    shared_port: bool = False
    # `tether runtime` / `tether gateway`: run on uvloop (off: asyncio's own loop; tether_common.event_loop).
    uvloop: bool = True
    # --- webhook delivery (README, "Webhooks"; tether_runtime.webhooks.settings) ---
    webhook_delivery: bool = True
    webhook_poll_s: float = 1.0
    webhook_timeout_s: float = 10.0
    webhook_max_attempts: int = 12
    webhook_backoff_s: float = 2.0
    webhook_backoff_max_s: float = 3600.0
    webhook_per_endpoint: int = 4
    webhook_max_in_flight: int = 64
    # The chaos suite's fault: silently skip every Nth Redis publish (0: none). Never in
    # production, where it is ignored.
    fault_drop_publish_every: int = 0

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only from_env reads an environment: Settings(...) is its arguments over the defaults.
        return (init_settings,)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings from `env` alone (the process environment when None)."""
        return cls(**_MappingSource(cls, os.environ if env is None else env)())

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable a field is read from."""
        alias = cls.model_fields[field].validation_alias
        return alias if isinstance(alias, str) else f"TETHER_{field.upper()}"

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """Defaults that depend on other settings; an empty number or switch is its default."""
        if not isinstance(data, dict):
            return data
        given = {k: v for k, v in data.items() if v != "" or _is_text(cls, k)}
        production = given.get("env") == "production"
        for name in ("redis_url", "jwt_secret"):  # keyed by REDIS_URL when read from env
            if name not in given and cls.model_fields[name].validation_alias not in given:
                given[name] = "" if production else cls.model_fields[name].default
        given.setdefault("grpc_reflection", not production)
        given.setdefault(
            "runtime_target", given.get("grpc_addr", cls.model_fields["grpc_addr"].default)
        )
        rate = given.get("rate_limit_per_min", cls.model_fields["rate_limit_per_min"].default)
        for name in ROUTE_RATE_LIMITS:
            given.setdefault(name, rate)
        if COALESCE_MS in given:
            given["coalesce_s"] = env_values.number(COALESCE_MS, given.pop(COALESCE_MS)) / 1000
        return given

    @field_validator("*", mode="before")
    @classmethod
    def _from_text(cls, value: Any, info: ValidationInfo) -> Any:
        """The environment's text as the field's type, refused with the variable's name."""
        name = info.field_name
        if not isinstance(value, str) or name is None:
            return value
        kind = cls.model_fields[name].annotation
        var = cls.env_name(name)
        if name == "processes":
            return parse_processes(var, value)
        if kind is bool:
            return env_values.switch(var, value)
        if kind is int:
            return env_values.whole(var, value)
        if kind is float:
            return env_values.number(var, value)
        if name == "tool_allow_grant":
            return env_values.tool_pairs(var, value)
        if get_origin(kind) is frozenset:
            return frozenset(env_values.items(value))
        if get_origin(kind) is tuple:
            return env_values.items(value)
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        if value not in ("dev", "production"):
            raise UnsafeSettings(f"TETHER_ENV must be 'dev' or 'production', not {value!r}")
        return value

    @field_validator("tool_gate_mode", mode="before")
    @classmethod
    def _tool_gate(cls, value: Any) -> Any:
        if value not in ("observe", "enforce"):
            raise UnsafeSettings(f"TETHER_TOOL_GATE must be 'observe' or 'enforce', not {value!r}")
        return value

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        value = value or "agent"
        value = "agent" if value == "scripted" else value  # the name it had before providers
        if value not in MODEL_CHOICES:
            raise UnsafeSettings(
                f"TETHER_MODEL must be one of {', '.join(MODEL_CHOICES)}, not {value!r} "
                "(agent: each agent's own model; openai / anthropic: every agent on that provider)"
            )
        return value

    @field_validator("runtime_role", mode="before")
    @classmethod
    def _runtime_role(cls, value: Any) -> Any:
        if value not in ("all", "api", "worker"):
            raise UnsafeSettings(
                f"TETHER_RUNTIME_ROLE must be 'all', 'api' or 'worker', not {value!r}"
            )
        return value

    @field_validator("db_pooler", mode="before")
    @classmethod
    def _db_pooler(cls, value: Any) -> Any:
        value = value or "none"
        if value not in ("none", "transaction"):
            raise UnsafeSettings(
                f"TETHER_DB_POOLER must be 'none' or 'transaction' (DATABASE_URL goes through "
                f"PgBouncer in transaction mode), not {value!r}"
            )
        return value

    @field_validator("max_run_attempts")
    @classmethod
    def _max_run_attempts(cls, value: int) -> int:
        if value < 1:
            raise UnsafeSettings(f"TETHER_MAX_RUN_ATTEMPTS must be at least 1, not {value}")
        return value

    @field_validator("run_retry_backoff_s", "checkpoint_compact_after_s")
    @classmethod
    def _not_negative(cls, value: float, info: ValidationInfo) -> float:
        if value < 0:
            raise UnsafeSettings(
                f"{cls.env_name(str(info.field_name))} must not be negative, not {value}"
            )
        return value

    @field_validator("langgraph_cors_origins", "agui_cors_origins")
    @classmethod
    def _cors_origins(cls, value: frozenset[str], info: ValidationInfo) -> frozenset[str]:
        for origin in value:
            if not _ORIGIN.fullmatch(origin):
                raise UnsafeSettings(
                    f"{cls.env_name(str(info.field_name))} takes origins, scheme://host[:port] "
                    f"with no path and no wildcard, comma-separated, not {origin!r}"
                )
        return value

    @field_validator("idempotency_ttl_s")
    @classmethod
    def _idempotency_ttl(cls, value: float) -> float:
        if value < 3600:
            raise UnsafeSettings(
                f"TETHER_IDEMPOTENCY_TTL_S must be at least 3600 (an hour: longer than any client "
                f"retry), not {value}"
            )
        return value

    @field_validator("event_retention_s")
    @classmethod
    def _event_retention(cls, value: float) -> float:
        if value != 0 and value < 86400:
            raise UnsafeSettings(
                f"TETHER_EVENT_RETENTION_S must be 0 (keep forever) or at least 86400 (a day: the "
                f"event log is dropped a day's partition at a time), not {value}"
            )
        return value

    @field_validator("jwt_leeway_s")
    @classmethod
    def _jwt_leeway(cls, value: float) -> float:
        if not 0 <= value <= MAX_JWT_LEEWAY_S:
            raise UnsafeSettings(
                f"TETHER_JWT_LEEWAY_S must be between 0 and {MAX_JWT_LEEWAY_S:g} seconds, "
                f"not {value}"
            )
        return value

    @field_validator("stream_token_ttl_s")
    @classmethod
    def _stream_token_ttl(cls, value: float) -> float:
        if not 1 <= value <= MAX_STREAM_TOKEN_TTL_S:
            raise UnsafeSettings(
                f"TETHER_STREAM_TOKEN_TTL_S must be between 1 and {MAX_STREAM_TOKEN_TTL_S:.0f} "
                f"seconds, not {value}: a stream token must be short-lived"
            )
        return value

    @field_validator(*WEBHOOK_MINIMUMS)
    @classmethod
    def _webhook_minimum(cls, value: float, info: ValidationInfo) -> float:
        name = str(info.field_name)
        minimum = WEBHOOK_MINIMUMS[name]
        if not value >= minimum or not math.isfinite(value):  # also refuses NaN
            raise UnsafeSettings(
                f"{cls.env_name(name)} must be at least {minimum:g}, not {value:g}"
            )
        return value

    @model_validator(mode="after")
    def _pairs(self) -> Settings:
        """Settings that only work together."""
        if self.oidc_issuer and not self.oidc_audience:
            raise UnsafeSettings(
                "TETHER_OIDC_ISSUER is set without TETHER_OIDC_AUDIENCE: every token's `aud` "
                "would be refused; set the audience your identity provider puts in Tether's tokens"
            )
        if bool(self.grpc_tls_cert_file) != bool(self.grpc_tls_key_file):
            raise UnsafeSettings(
                "TETHER_GRPC_TLS_CERT_FILE and TETHER_GRPC_TLS_KEY_FILE go together: set both to "
                "serve gRPC over TLS, or neither"
            )
        return self

    def unsafe_for_production(self, component: Component = "runtime") -> list[str]:
        """Every reason this configuration would break a guarantee in production
        (tether_common.production_guard)."""
        return production_guard.problems(self, component)

    def check(self, component: Component = "runtime") -> None:
        """Refuse to start in production on unsafe settings (tether_common.production_guard)."""
        production_guard.check(self, component)

    def public_view(self) -> dict[str, object]:
        """The live settings with every secret masked, for the start-up log line."""
        return redact_mapping(self.model_dump())


def _is_text(cls: type[Settings], key: str) -> bool:
    """Whether an empty value is a value (text) rather than "unset" (numbers, switches, lists)."""
    field = cls.model_fields.get(key) or next(
        (f for f in cls.model_fields.values() if f.validation_alias == key), None
    )
    return field is None or field.annotation is str or get_origin(field.annotation) is Literal


__all__ = ["Component", "Settings", "parse_processes"]
