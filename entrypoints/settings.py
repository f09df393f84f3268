"""All configuration, from ``PLAITA_*`` environment variables and CLI flags, validated at once."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import attrs
from pydantic import Field, ValidationError, computed_field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from plaita.domain.affinity import DEFAULT_MAX_HANDOVERS, MAX_HANDOVERS_LIMIT
from plaita.domain.budgets import DEFAULT_RETRIES
from plaita.domain.errors import InvalidRedisUrlError
from plaita.domain.http_calls import DEFAULT_MAX_RESPONSE_BYTES
from plaita.domain.startup import (
    OPTIONAL_FALLBACKS,
    ConfigProblem,
    ConfigWarning,
    StartupCheck,
    validate_startup_settings,
)
from plaita.domain.store_urls import check_redis_url


def default_consumer_name() -> str:
    """Unique per process incarnation, so a restarted worker never inherits a dead PEL."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLAITA_", extra="ignore")

    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: ``redis_url`` is a seed node of a Redis Cluster (``--redis-cluster``,
    #: ``PLAITA_REDIS_CLUSTER=1``): the client discovers the nodes and follows MOVED/ASK.
    redis_cluster: bool = False
    #: Where execution state, leases and flow definitions live (S4): ``auto`` = the backend's
    #: own store; ``sql`` = the database at ``database_url`` (queue, events and counters stay
    #: on the backend).
    storage: Literal["auto", "sql"] = "auto"
    database_url: str | None = Field(default=None, min_length=1)
    namespace: str = Field(default="plaita", min_length=1)
    handler_modules: Annotated[tuple[str, ...], NoDecode] = ()
    #: How a flow registered by this process has its handlers checked
    #: (``plaita.application.handlers``): ``import`` imports the allowlisted modules it
    #: names and finds every function, so a misspelt one is refused at registration;
    #: ``names`` only compares module names with the allowlist and never imports. ``plaita
    #: console`` always uses ``names``: it never imports or runs handler code.
    handler_check: Literal["import", "names"] = "import"
    queue_name: str = Field(default="default", min_length=1)
    #: The task queue's partitions (``--partitions``): its stream, DLQ and delay queue split
    #: in P, an execution always on one; the event notification stream too, an event on its
    #: id's. Part of the config family (W12); a worker refuses to start with another count
    #: while the recorded one's layout still holds carriers.
    partitions: int = Field(default=1, ge=1, le=1024)
    consumer_group: str = Field(default="plaita-workers", min_length=1)
    consumer_name: str = Field(default_factory=default_consumer_name, min_length=1)
    concurrency: int = Field(default=16, ge=1, le=10_000)
    read_block_ms: int = Field(default=1000, ge=1, le=60_000)
    #: P6: a dead holder's carriers are taken over after this long (live holders refresh
    #: theirs at every lease renewal, at least every 2 s).
    claim_min_idle_ms: int = Field(default=5_000, ge=1)
    lease_ttl_seconds: float = Field(default=120.0, gt=0)
    execution_deadline_seconds: float = Field(default=1800.0, ge=0)
    max_deliveries: int = Field(default=5, ge=1, le=1000)
    #: E15: the retries of a node without ``retryTimes``.
    default_retries: int = Field(default=DEFAULT_RETRIES, ge=0, le=100)
    max_carrier_age_days: float = Field(default=30.0, ge=0)
    #: S5: how long a terminal execution is kept (state, node results, counters, flags);
    #: fractions of a day are fine, 0 is refused (a terminal state absorbs late carriers).
    retention_days: float = Field(default=7.0, gt=0)
    disable_holder_liveness: bool = False
    #: The dead-letter stream; None is the queue's own (``{ns}:q:{<queue>}:dlq``).
    dlq_key: str | None = Field(default=None, min_length=1)
    #: W10: the DLQ's length cap, a lossy FIFO: every dead letter beyond it drops the oldest
    #: (``plaita_dlq_trimmed_total`` and a WARNING say so). Part of the budget generation.
    dlq_max_len: int = Field(default=10_000, ge=1)
    #: C5: POST a JSON alert for every dead letter here (best effort, bounded queue).
    alert_webhook_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    alert_queue_size: int = Field(default=1000, ge=1, le=1_000_000)
    #: E11: every http node refuses loopback, private, link-local, multicast, unspecified and
    #: reserved targets (a node's ``blockPrivateNetworks`` can only add the rule, never lift it).
    http_block_private: bool = False
    #: E11: an http node's response body is refused once it passes this many bytes.
    http_max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, ge=1, le=1_073_741_824)
    #: Off (False) with ``--no-registry``: no record, and nothing is acked on a lease conflict.
    registry_enabled: bool = True
    #: W25: how often a carrier that names another worker is passed on towards it before its
    #: target is dropped (``--affinity-max-handovers``); 0 drops it at once.
    affinity_max_handovers: int = Field(default=DEFAULT_MAX_HANDOVERS, ge=0, le=MAX_HANDOVERS_LIMIT)
    #: 0 disables the HTTP exporter; bad values fall back to 0 with a WARNING (W21).
    metrics_port: int = 0
    #: 0 disables the disk guard (W18).
    min_free_disk_gib: float = Field(default=0.0, ge=0)
    disk_guard_path: str = "."
    disk_guard_poll_seconds: float = Field(default=15.0, gt=0)
    #: Advisory: after it the worker exits without acking what still runs (W17 I2).
    drain_timeout_seconds: float = Field(default=30.0, ge=0)
    #: S5: how often the worker trims the task stream and the event filter the notification
    #: stream (only below what a consumer group still needs).
    stream_trim_interval_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: E1a: how often the worker sweeps the slot tables (concurrency keys, tenant quotas):
    #: slots of dead workers are freed and handed to waiting carriers.
    slot_sweep_interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    #: The index janitor (V7): a tick every interval prunes at most ``janitor_budget`` index
    #: members per store. Unusable values fall back to 60 s / 500 with a WARNING
    #: (``plan_janitor``); ``janitor_enabled=false`` switches it off, with a WARNING too.
    janitor_enabled: bool = True
    janitor_interval_seconds: float = 60.0
    janitor_budget: int = 500
    #: W20: flow definitions cached per process, by tenant, flow id and version. Unusable
    #: values fall back to 100 / 300 s with a WARNING on the worker (W21).
    flow_cache_size: int = Field(default=100, ge=1)
    flow_cache_ttl_seconds: float = Field(default=300.0, gt=0)
    #: W22: how often a scheduler looks for dues (bounded: a due fires within about one
    #: interval of its time), and how long its claim of a due keeps other schedulers off it
    #: (a scheduler killed mid-tick delays its claimed dues by this much).
    scheduler_poll_interval_seconds: float = Field(default=1.0, ge=0.05, le=60.0)
    scheduler_claim_ttl_seconds: float = Field(default=30.0, ge=0.1, le=3600.0)
    #: The console's tokens (C3): a JSON list of {"token", "name", "role", "tenants"};
    #: ``plaita console --tokens-file`` takes the same JSON from a file instead.
    console_tokens: str | None = None
    #: V10: inbound webhooks defined in a JSON or TOML file, read when the console starts.
    hooks_file: str | None = Field(default=None, min_length=1)
    #: The largest request body the console accepts (413 above it).
    max_body_bytes: int = Field(default=1_048_576, ge=1, le=1_073_741_824)
    #: The deployment epoch (``PLAITA_DEPLOYMENT_EPOCH``): the same positive integer for every
    #: process of a deployment, raised with each new one. Tenant status writes are stamped
    #: with it, and a worker acts only on a tenant status of its own epoch (W24,
    #: ``plaita.domain.tenant_status``); None: no epoch rule.
    deployment_epoch: int | None = Field(default=None, ge=1)

    @field_validator("handler_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(m.strip() for m in value.split(",") if m.strip())
        return value

    @model_validator(mode="after")
    def _a_cluster_has_only_database_0(self) -> Settings:
        database = urlsplit(self.redis_url).path.strip("/")
        if self.redis_cluster and database not in ("", "0"):
            raise ValueError(
                f"redis_url {self.redis_url!r} names database {database}, but a Redis Cluster "
                "has only database 0: drop the '/<db>' from the URL, or drop --redis-cluster "
                "(PLAITA_REDIS_CLUSTER) for a single Redis"
            )
        return self

    @model_validator(mode="after")
    def _redis_url_has_a_redis_scheme(self) -> Settings:
        # Only where Redis is used: a memory process ignores a stray PLAITA_REDIS_URL.
        if self.backend == "redis":
            try:
                check_redis_url(self.redis_url)
            except InvalidRedisUrlError as exc:
                raise ValueError(f"{type(exc).__name__}: {exc}") from None
        return self

    @model_validator(mode="after")
    def _sql_needs_a_database(self) -> Settings:
        if self.storage == "sql" and not self.database_url:
            raise ValueError(
                "storage 'sql' needs a database: set PLAITA_DATABASE_URL (or --database-url), "
                "e.g. sqlite:///plaita.db or postgresql://user@host:5432/plaita"
            )
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl_seconds * 1000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_carrier_age_ms(self) -> int:
        return int(self.max_carrier_age_days * 24 * 3600 * 1000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def execution_deadline_ms(self) -> int:
        return int(self.execution_deadline_seconds * 1000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def flow_cache_ttl_ms(self) -> int:
        return int(self.flow_cache_ttl_seconds * 1000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def scheduler_claim_ttl_ms(self) -> int:
        return int(self.scheduler_claim_ttl_seconds * 1000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def scheduler_poll_interval_ms(self) -> int:
        return int(self.scheduler_poll_interval_seconds * 1000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def retention_ms(self) -> int:
        return max(1, int(self.retention_days * 24 * 3600 * 1000))


# --- the worker's start-up check (W21) ---------------------------------------------------

#: Settings the start-up check reads under another name and unit (it speaks in ms).
_SCALED = {
    "lease_ttl_seconds": ("lease_ttl_ms", 1000),
    "execution_deadline_seconds": ("execution_deadline_ms", 1000),
    "max_carrier_age_days": ("max_carrier_age_ms", 24 * 3600 * 1000),
    "retention_days": ("retention_ms", 24 * 3600 * 1000),
}
_CHECKED = (
    "namespace",
    "queue_name",
    "consumer_group",
    "consumer_name",
    "dlq_key",
    "dlq_max_len",
    "redis_url",
    "claim_min_idle_ms",
    "read_block_ms",
    "max_deliveries",
    "concurrency",
    "min_free_disk_gib",
    "disable_holder_liveness",
    "disk_guard_path",
    "disk_guard_poll_seconds",
    "metrics_port",
    "flow_cache_size",
    "flow_cache_ttl_seconds",
    *_SCALED,
)


#: A check of settings that only the wiring can make (a store's key layout, say): the problems
#: it finds in a valid ``Settings``.
SettingsCheck = Callable[[Settings], list[ConfigProblem]]


def worker_settings(
    values: Mapping[str, object],
    environ: Mapping[str, str] | None = None,
    *,
    checks: Sequence[SettingsCheck] = (),
) -> tuple[Settings, StartupCheck]:
    """A worker's settings from ``values`` (CLI flags; None = not given) and ``PLAITA_*``.

    Every value is checked at once before anything connects (W21): ``InvalidConfigurationError``
    lists every problem, ``checks``' included; optional settings that are not usable fall
    back, and the returned check's warnings say to what.
    """
    environ = os.environ if environ is None else environ
    check = validate_startup_settings(_check_view(values, environ))
    given = {name: value for name, value in values.items() if value is not None}
    given.update(
        {name: used for name, used in check.fallbacks().items() if name in Settings.model_fields}
    )
    problems = list(check.problems)
    settings = None
    try:
        settings = Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        named = {problem.setting for problem in problems}
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "settings"
            name = _SCALED.get(field, (field, 1))[0]
            if name not in named and field not in named:
                problems.append(
                    ConfigProblem(field, f"{error['msg']} (got {error.get('input')!r})")
                )
    if settings is not None:
        for extra in checks:
            problems.extend(extra(settings))
    if problems or settings is None:
        raise attrs.evolve(check, problems=tuple(problems)).error()
    return settings, check


def optional_fallbacks(
    values: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], tuple[ConfigWarning, ...]]:
    """``values`` with every unusable optional setting — given there or as ``PLAITA_*`` —
    replaced by its fallback, and the warnings that say so (W21), for the commands that are
    not the worker (the console, ``plaita dev``, operator commands)."""
    environ = os.environ if environ is None else environ
    view = {
        name: environ.get(f"PLAITA_{name.upper()}") if values.get(name) is None else values[name]
        for name in OPTIONAL_FALLBACKS
    }
    check = validate_startup_settings(view)
    return {**values, **check.fallbacks()}, check.warnings


def _check_view(values: Mapping[str, object], environ: Mapping[str, str]) -> dict[str, object]:
    view: dict[str, object] = {}
    for name in _CHECKED:
        value = values.get(name)
        if value is None:
            value = environ.get(f"PLAITA_{name.upper()}")
        if name in _SCALED:
            check_name, factor = _SCALED[name]
            view[check_name] = _scaled(value, factor)
        else:
            view[name] = value
    return view


def _scaled(value: object, factor: int) -> object:
    if value is None or isinstance(value, bool):
        return value
    try:
        return float(value) * factor  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return value  # reported by the check as it was given
