"""Events, subscriptions and how a subscription matches an event (V1, V2, W24)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import InvalidEventError, InvalidEventIdError
from plaita.domain.events import Event, EventSubscription, subscription_matches

from ..strategies import json_objects, valid_ids

ids = st.text(min_size=1, max_size=16).filter(str.strip)
millis = st.integers(min_value=0, max_value=2**53)

events = st.builds(
    Event,
    event_id=valid_ids,
    event_type=ids,
    timestamp_ms=millis,
    data=json_objects,
    correlation_id=st.none() | ids,
    source=st.none() | ids,
    tenant_id=ids,
)
subscriptions = st.builds(
    EventSubscription,
    subscription_id=ids,
    event_type=ids,
    execution_id=ids,
    flow_id=ids,
    node_id=ids,
    created_at_ms=millis,
    correlation_id=st.none() | ids,
    filter_condition=json_objects,
    tenant_id=ids,
)


def event(**overrides: Any) -> Event:
    fields: dict[str, Any] = {
        "event_id": "e-1",
        "event_type": "approval_decision",
        "timestamp_ms": 1_000,
        "data": {"kind": "expense", "approved": True, "amount": 120},
        "correlation_id": "order-7",
    }
    return Event(**(fields | overrides))


def subscription(**overrides: Any) -> EventSubscription:
    fields: dict[str, Any] = {
        "subscription_id": "s-1",
        "event_type": "approval_decision",
        "execution_id": "x-1",
        "flow_id": "approval",
        "node_id": "wait",
        "created_at_ms": 500,
    }
    return EventSubscription(**(fields | overrides))


# --- V1 models ----------------------------------------------------------------------


@pytest.mark.parametrize("field", ["event_id", "event_type"])
@pytest.mark.parametrize("value", ["", " ", "\n\t", None])
def test_an_event_with_an_empty_type_or_id_raises_invalid_event(field: str, value: Any) -> None:
    with pytest.raises(InvalidEventError, match=field.replace("_id", " id")):
        event(**{field: value})


@pytest.mark.parametrize("event_id", ["../e", "e 1", "{e}"])
def test_an_event_id_outside_the_id_rule_is_refused_by_name(event_id: str) -> None:
    """V1, R4: an event the library is handed must be addressable later."""
    with pytest.raises(InvalidEventIdError, match="event id"):
        event(event_id=event_id)


@pytest.mark.parametrize("field", ["subscription_id", "event_type", "execution_id"])
@pytest.mark.parametrize("value", ["", "   ", None])
def test_a_subscription_with_an_empty_type_or_id_raises_invalid_event(
    field: str, value: Any
) -> None:
    with pytest.raises(InvalidEventError, match=field):
        subscription(**{field: value})


def test_an_event_defaults_to_the_default_tenant_and_empty_data() -> None:
    plain = Event(event_id="e", event_type="t", timestamp_ms=0)

    assert (plain.tenant_id, plain.data, plain.correlation_id, plain.source) == (
        "default",
        {},
        None,
        None,
    )


def test_events_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event().event_type = "other"  # type: ignore[misc]


@given(events)
def test_an_event_survives_a_json_round_trip(original: Event) -> None:
    assert Event.from_json(json.loads(json.dumps(original.to_json()))) == original


@given(subscriptions)
def test_a_subscription_survives_a_json_round_trip(original: EventSubscription) -> None:
    assert EventSubscription.from_json(json.loads(json.dumps(original.to_json()))) == original


# --- V2 matching --------------------------------------------------------------------


def test_a_subscription_matches_an_event_of_its_type() -> None:
    assert subscription_matches(subscription(), event())


@pytest.mark.parametrize(
    "event_type", ["approval_decisions", "approval", "Approval_Decision", "approval_decision "]
)
def test_the_event_type_must_be_exactly_equal(event_type: str) -> None:
    assert not subscription_matches(subscription(), event(event_type=event_type))


@pytest.mark.parametrize("pattern", ["approval_*", "*", "approval_?ecision", "approval_[d]ecision"])
def test_subscription_event_types_are_not_wildcards(pattern: str) -> None:
    """V2: fnmatch is for handlers only; a subscription type is compared literally."""
    assert not subscription_matches(subscription(event_type=pattern), event())


def test_a_wildcard_looking_type_matches_only_itself() -> None:
    assert subscription_matches(subscription(event_type="user.*"), event(event_type="user.*"))


def test_another_tenants_event_never_matches() -> None:
    """W24: a tenant's events can never resume another tenant's execution."""
    assert not subscription_matches(subscription(tenant_id="acme"), event(tenant_id="globex"))
    assert not subscription_matches(subscription(tenant_id="acme"), event())
    assert subscription_matches(subscription(tenant_id="acme"), event(tenant_id="acme"))


def test_a_correlation_id_on_the_subscription_must_equal_the_events() -> None:
    correlated = subscription(correlation_id="order-7")

    assert subscription_matches(correlated, event(correlation_id="order-7"))
    assert not subscription_matches(correlated, event(correlation_id="order-8"))
    assert not subscription_matches(correlated, event(correlation_id=None))


@pytest.mark.parametrize("correlation_id", [None, "order-7", "anything"])
def test_a_subscription_without_correlation_id_accepts_any(correlation_id: str | None) -> None:
    assert subscription_matches(subscription(), event(correlation_id=correlation_id))


def test_a_filter_matches_when_every_key_is_equal_in_the_data() -> None:
    assert subscription_matches(
        subscription(filter_condition={"kind": "expense", "amount": 120}), event()
    )


def test_a_filter_fails_when_one_value_differs() -> None:
    assert not subscription_matches(
        subscription(filter_condition={"kind": "expense", "amount": 121}), event()
    )


@pytest.mark.parametrize("expected", ["expense", None, False, 0, ""])
def test_a_filter_key_missing_from_the_data_fails(expected: Any) -> None:
    """Even a filter value of None does not match an absent key."""
    assert not subscription_matches(
        subscription(filter_condition={"region": expected}), event(data={"kind": "expense"})
    )


def test_an_empty_filter_matches_any_data() -> None:
    assert subscription_matches(subscription(filter_condition={}), event(data={}))


def test_filter_equality_is_shallow_nested_values_compare_whole() -> None:
    data = {"approver": {"id": "u-1", "team": "finance"}}

    assert subscription_matches(subscription(filter_condition=data), event(data=data))
    assert not subscription_matches(
        subscription(filter_condition={"approver": {"id": "u-1"}}), event(data=data)
    )
    assert not subscription_matches(subscription(filter_condition={"id": "u-1"}), event(data=data))


@given(
    filter_condition=json_objects.filter(bool),
    extra=json_objects,
    changed=st.data(),
)
def test_data_containing_the_filter_matches_and_changing_one_value_does_not(
    filter_condition: dict[str, Any], extra: dict[str, Any], changed: st.DataObject
) -> None:
    data = extra | filter_condition
    sub = subscription(filter_condition=filter_condition)
    key = changed.draw(st.sampled_from(sorted(filter_condition)))

    assert subscription_matches(sub, event(data=data))
    different = {"changed": data[key]}  # never equal to the value it wraps
    assert not subscription_matches(sub, event(data=data | {key: different}))
    assert not subscription_matches(sub, event(data={k: v for k, v in data.items() if k != key}))


@given(evt=events, subset=st.data(), correlate=st.booleans())
def test_a_subscription_built_from_an_event_matches_it(
    evt: Event, subset: st.DataObject, correlate: bool
) -> None:
    keys = subset.draw(st.sets(st.sampled_from(sorted(evt.data))) if evt.data else st.just(set()))
    sub = subscription(
        event_type=evt.event_type,
        tenant_id=evt.tenant_id,
        correlation_id=evt.correlation_id if correlate else None,
        filter_condition={key: evt.data[key] for key in keys},
    )

    assert subscription_matches(sub, evt)
