"""Leases and fences: one advancer per execution, stale writes rejected (W3, W4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import ExecutionLeaseError, LeaseConflictError
from plaita.domain.lease import (
    Lease,
    check_fence,
    next_generation,
    parse_lease_value,
    renewal_interval_seconds,
    write_allowed,
)

generations = st.integers(min_value=0, max_value=2**63 - 1)


def test_lease_value_embeds_holder_and_generation() -> None:
    """W3: the stored value names the holder's instance id and its fence generation."""
    assert Lease(execution_id="x", holder_id="worker-a", generation=7).value == "worker-a|7"


@pytest.mark.parametrize("holder", ["worker|a", "|", "a||b", "host:1|pid:2|", ""])
def test_a_holder_id_containing_the_separator_survives_parsing(holder: str) -> None:
    lease = Lease(execution_id="x", holder_id=holder, generation=3)

    assert parse_lease_value("x", lease.value) == lease


@given(holder=st.text(max_size=30), generation=generations, execution_id=st.text(min_size=1))
def test_lease_value_round_trips(holder: str, generation: int, execution_id: str) -> None:
    lease = Lease(execution_id=execution_id, holder_id=holder, generation=generation)

    assert parse_lease_value(execution_id, lease.value) == lease


def test_the_first_acquisition_takes_generation_one() -> None:
    assert next_generation(None) == 1


@given(generations)
def test_every_acquisition_takes_a_strictly_newer_generation(current: int) -> None:
    """W4: the counter is never reset, so an old holder's fence can never come back."""
    assert next_generation(current) == current + 1


@given(generations)
def test_a_write_under_the_current_generation_is_allowed(generation: int) -> None:
    assert write_allowed(generation, generation)
    check_fence("x", generation, generation)


@given(fence=generations, current=generations)
def test_a_write_under_any_other_generation_is_rejected(fence: int, current: int) -> None:
    if fence == current:
        return
    assert not write_allowed(fence, current)
    with pytest.raises(ExecutionLeaseError):
        check_fence("x", fence, current)


def test_a_stale_holders_write_raises_execution_lease_error_naming_the_execution() -> None:
    """W4: a holder paused past its lease comes back with fence 4 after a takeover at 5."""
    with pytest.raises(ExecutionLeaseError, match="x-42") as caught:
        check_fence("x-42", 4, 5)

    assert "4" in str(caught.value) and "5" in str(caught.value)


def test_a_write_when_no_generation_was_ever_handed_out_is_rejected() -> None:
    """A deleted or never-leased execution has no current generation: nothing may write."""
    assert not write_allowed(1, None)
    with pytest.raises(ExecutionLeaseError):
        check_fence("x", 1, None)


def test_a_lease_conflict_is_an_execution_lease_error() -> None:
    assert issubclass(LeaseConflictError, ExecutionLeaseError)


@pytest.mark.parametrize(("ttl", "interval"), [(120, 2), (6, 2), (3, 1), (1.5, 0.5)])
def test_the_watchdog_renews_every_third_of_the_ttl_or_2_s(ttl: float, interval: float) -> None:
    """W3, P6: renewal every min(TTL/3, 2 s) (default TTL 120 s → every 2 s), so a live
    holder's carriers are never idle long enough for a short claim idle to take them."""
    assert renewal_interval_seconds(ttl) == pytest.approx(interval)
