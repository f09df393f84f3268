"""Events and subscriptions, how they match, handler retry policies, the inbox rule and the
listing queries (V1, V2, V3, V6, V7)."""

from __future__ import annotations

import enum
import fnmatch
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from plaita.domain.errors import (
    InvalidEventError,
    InvalidEventQueryError,
    InvalidRetryPolicyError,
)
from plaita.domain.ids import validate_event_id
from plaita.domain.tracing import parse_traceparent

JSON = Any


def _non_empty(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEventError(f"{attribute.name} must be a non-empty string, got {value!r}")


def _event_id(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    validate_event_id(value)


@attrs.frozen
class Event:
    event_id: str = attrs.field(validator=_event_id)
    event_type: str = attrs.field(validator=_non_empty)
    timestamp_ms: int
    data: Mapping[str, JSON] = attrs.field(factory=dict)
    correlation_id: str | None = None
    source: str | None = None
    tenant_id: str = "default"
    #: The publisher's trace context (a W3C traceparent, C6), which the step it resumes links
    #: to; None when it was published without one. Written only when set.
    traceparent: str | None = None

    def to_json(self) -> dict[str, JSON]:
        document: dict[str, JSON] = {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "timestamp_ms": self.timestamp_ms,
            "data": dict(self.data),
            "correlation_id": self.correlation_id,
            "source": self.source,
            "tenant_id": self.tenant_id,
        }
        if self.traceparent is not None:
            document["traceparent"] = self.traceparent
        return document

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
            traceparent=parse_traceparent(raw.get("traceparent")),
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


# --- handlers (V2, V3) --------------------------------------------------------------------


def handler_matches(pattern: str, event_type: str) -> bool:
    """Handlers match event types with shell wildcards (``user.*``); subscriptions never do.

    Case-sensitive on every platform (``fnmatchcase``): ``User.created`` is another type.
    """
    return fnmatch.fnmatchcase(event_type, pattern)


@attrs.frozen
class RetryPolicy:
    """How often and how patiently a failing event handler is retried (V3).

    ``max_retries`` retries after the first attempt; the n-th retry waits
    ``min(max_delay, initial_delay * backoff_factor ** (n - 1))`` seconds.
    """

    max_retries: int = 3
    initial_delay: float = 1.0
    backoff_factor: float = 2.0
    max_delay: float = 60.0

    def __attrs_post_init__(self) -> None:
        problems = []
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            problems.append(f"max_retries must be an integer, got {self.max_retries!r}")
        elif self.max_retries < 0:
            problems.append(f"max_retries must be >= 0, got {self.max_retries}")
        for name in ("initial_delay", "max_delay"):
            value = getattr(self, name)
            if not _finite(value) or value < 0:
                problems.append(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if not _finite(self.backoff_factor) or self.backoff_factor < 1:
            problems.append(
                f"backoff_factor must be a finite number >= 1, got {self.backoff_factor!r}"
            )
        if problems:
            raise InvalidRetryPolicyError("; ".join(problems))

    def delay_before_retry(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        if retry < 1:
            raise ValueError(f"retries are numbered from 1, got {retry}")
        exponent = min(retry - 1, 64)  # beyond this the cap has long been reached
        return float(min(self.max_delay, self.initial_delay * self.backoff_factor**exponent))


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --- the inbox (V6) -----------------------------------------------------------------------


@attrs.frozen
class InboxEntry:
    """An event kept in its correlation's inbox, and which wait of an execution took it."""

    event: Event
    #: The subscription of the asking execution that already took this event, if any.
    taken_by: str | None = None


def pick_inbox_event(
    subscription: EventSubscription, entries: Sequence[InboxEntry]
) -> Event | None:
    """The event a new wait takes from the inbox: the oldest matching one still free for it.

    An event another wait of the same execution already took is never taken again (V6: a
    duplicate or earlier event is never applied to a later wait by accident); one this very
    subscription took (a step re-run after a crash) is taken again, so the re-run decides as
    the first run did.
    """
    candidates = [
        entry.event
        for entry in entries
        if entry.taken_by in (None, subscription.subscription_id)
        and subscription_matches(subscription, entry.event)
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda event: (event.timestamp_ms, event.event_id))


def wait_subscription_id(tenant_id: str, execution_id: str, node_id: str, steps: int) -> str:
    """The id of the subscription a wait registers: the same for a re-run of the same step.

    A step re-run after a crash registers the same subscription and so finds the inbox event
    it took the first time; the next wait of the same node (a loop) has more steps behind it
    and gets another id. The tenant is part of it: subscriptions are stored deployment-wide,
    and the same execution id under two tenants names two executions (W24).
    """
    name = f"{tenant_id}\x1f{execution_id}\x1f{node_id}\x1f{steps}"
    return str(uuid.uuid5(_WAIT_NAMESPACE, name))


_WAIT_NAMESPACE = uuid.UUID("6f1d8a52-3b7e-5c1a-9a43-2f5e0c9d7b11")


# --- listing (V7) -------------------------------------------------------------------------

MAX_LISTING_LIMIT = 10_000


@attrs.frozen
class SubscriptionQuery:
    """Subscriptions matching **every** given field (AND); None = any."""

    event_type: str | None = None
    correlation_id: str | None = None
    flow_id: str | None = None
    node_id: str | None = None
    tenant_id: str | None = None
    limit: int = 100

    def __attrs_post_init__(self) -> None:
        _check_limit(self.limit)

    def matches(self, subscription: EventSubscription) -> bool:
        return all(
            wanted is None or wanted == actual
            for wanted, actual in (
                (self.event_type, subscription.event_type),
                (self.correlation_id, subscription.correlation_id),
                (self.flow_id, subscription.flow_id),
                (self.node_id, subscription.node_id),
                (self.tenant_id, subscription.tenant_id),
            )
        )


class SubscriptionIndex(enum.StrEnum):
    """The four subscription indexes (V7), most selective first."""

    CORRELATION = "correlation"
    NODE = "node"
    FLOW = "flow"
    TYPE = "type"


def choose_subscription_index(
    query: SubscriptionQuery, sizes: Mapping[SubscriptionIndex, int] | None = None
) -> SubscriptionIndex | None:
    """The index to take candidates from: the smallest among those the query names.

    Without ``sizes`` the static order (correlation, node, flow, type) decides; None means
    the query names no indexed field and every subscription is a candidate.
    """
    named = [
        index
        for index, value in (
            (SubscriptionIndex.CORRELATION, query.correlation_id),
            (SubscriptionIndex.NODE, query.node_id),
            (SubscriptionIndex.FLOW, query.flow_id),
            (SubscriptionIndex.TYPE, query.event_type),
        )
        if value is not None
    ]
    if not named:
        return None
    if sizes is None:
        return named[0]
    order = list(SubscriptionIndex)
    return min(named, key=lambda index: (sizes.get(index, 0), order.index(index)))


@attrs.frozen
class EventQuery:
    """Stored events in ``[since_ms, until_ms)`` matching every given field, oldest first."""

    event_type: str | None = None
    correlation_id: str | None = None
    tenant_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = 100

    def __attrs_post_init__(self) -> None:
        _check_limit(self.limit)
        if (
            self.since_ms is not None
            and self.until_ms is not None
            and self.until_ms < self.since_ms
        ):
            raise InvalidEventQueryError(
                f"until_ms {self.until_ms} is before since_ms {self.since_ms}: the window is empty"
            )

    def matches(self, event: Event) -> bool:
        return (
            (self.event_type is None or event.event_type == self.event_type)
            and (self.correlation_id is None or event.correlation_id == self.correlation_id)
            and (self.tenant_id is None or event.tenant_id == self.tenant_id)
            and (self.since_ms is None or event.timestamp_ms >= self.since_ms)
            and (self.until_ms is None or event.timestamp_ms < self.until_ms)
        )


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTING_LIMIT:
        raise InvalidEventQueryError(
            f"limit must be an integer from 1 to {MAX_LISTING_LIMIT}, got {limit!r}"
        )
