"""Events and subscriptions, and how a subscription matches an event (V1, V2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import InvalidEventError

JSON = Any


def _non_empty(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEventError(f"{attribute.name} must be a non-empty string, got {value!r}")


@attrs.frozen
class Event:
    event_id: str = attrs.field(validator=_non_empty)
    event_type: str = attrs.field(validator=_non_empty)
    timestamp_ms: int
    data: Mapping[str, JSON] = attrs.field(factory=dict)
    correlation_id: str | None = None
    source: str | None = None
    tenant_id: str = "default"

    def to_json(self) -> dict[str, JSON]:
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "timestamp_ms": self.timestamp_ms,
            "data": dict(self.data),
            "correlation_id": self.correlation_id,
            "source": self.source,
            "tenant_id": self.tenant_id,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> Event:
        return cls(
            event_id=raw["event_id"],
            event_type=raw["event_type"],
            timestamp_ms=int(raw["timestamp_ms"]),
            data=raw.get("data") or {},
            correlation_id=raw.get("correlation_id"),
            source=raw.get("source"),
            tenant_id=raw.get("tenant_id", "default"),
        )


@attrs.frozen
class EventSubscription:
    subscription_id: str = attrs.field(validator=_non_empty)
    event_type: str = attrs.field(validator=_non_empty)
    execution_id: str = attrs.field(validator=_non_empty)
    flow_id: str
    node_id: str
    created_at_ms: int
    correlation_id: str | None = None
    filter_condition: Mapping[str, JSON] = attrs.field(factory=dict)
    tenant_id: str = "default"

    def to_json(self) -> dict[str, JSON]:
        return {
            "subscription_id": self.subscription_id,
            "event_type": self.event_type,
            "execution_id": self.execution_id,
            "flow_id": self.flow_id,
            "node_id": self.node_id,
            "created_at_ms": self.created_at_ms,
            "correlation_id": self.correlation_id,
            "filter_condition": dict(self.filter_condition),
            "tenant_id": self.tenant_id,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> EventSubscription:
        return cls(
            subscription_id=raw["subscription_id"],
            event_type=raw["event_type"],
            execution_id=raw["execution_id"],
            flow_id=raw["flow_id"],
            node_id=raw["node_id"],
            created_at_ms=int(raw["created_at_ms"]),
            correlation_id=raw.get("correlation_id"),
            filter_condition=raw.get("filter_condition") or {},
            tenant_id=raw.get("tenant_id", "default"),
        )


def subscription_matches(subscription: EventSubscription, event: Event) -> bool:
    """Exact type (no wildcards), same tenant, equal correlation when set, shallow filter (V2)."""
    if subscription.event_type != event.event_type:
        return False
    if subscription.tenant_id != event.tenant_id:
        return False
    if (
        subscription.correlation_id is not None
        and subscription.correlation_id != event.correlation_id
    ):
        return False
    return all(
        key in event.data and _same_json(event.data[key], expected)
        for key, expected in subscription.filter_condition.items()
    )


def _same_json(actual: JSON, expected: JSON) -> bool:
    # JSON equality: `true` is not `1`, although Python says True == 1.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    return bool(actual == expected)
