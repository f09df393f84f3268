"""All configuration, from ``PLAITA_*`` environment variables and CLI flags, validated at once."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Annotated, Literal

from pydantic import Field, computed_field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def default_consumer_name() -> str:
    """Unique per process incarnation, so a restarted worker never inherits a dead PEL."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLAITA_", extra="ignore")

    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    namespace: str = Field(default="plaita", min_length=1)
    handler_modules: Annotated[tuple[str, ...], NoDecode] = ()
    queue_name: str = Field(default="default", min_length=1)
    consumer_group: str = Field(default="plaita-workers", min_length=1)
    consumer_name: str = Field(default_factory=default_consumer_name, min_length=1)
    concurrency: int = Field(default=16, ge=1, le=10_000)
    read_block_ms: int = Field(default=1000, ge=1, le=60_000)
    claim_min_idle_ms: int = Field(default=60_000, ge=1)
    lease_ttl_seconds: float = Field(default=120.0, gt=0)
    execution_deadline_seconds: float = Field(default=1800.0, ge=0)
    max_deliveries: int = Field(default=5, ge=1, le=1000)
    max_carrier_age_days: float = Field(default=30.0, ge=0)
    disable_holder_liveness: bool = False

    @field_validator("handler_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(m.strip() for m in value.split(",") if m.strip())
        return value

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
