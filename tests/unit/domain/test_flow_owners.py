"""Whose a flow definition is and when a registration may write (S2, W24): one test per row
of the tables in ``plaita.domain.flow_owners``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import FlowVersionConflictError, InvalidTenantIdError
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import (
    SHARED,
    FlowOwner,
    RegistrationOutcome,
    listing_owners,
    lookup_order,
    registration_outcome,
)


def flow(output: str = "'a'", version: str = "1") -> Flow:
    return Flow.from_document(
        {
            "flow_id": "pay",
            "version": version,
            "start": "done",
            "nodes": [{"id": "done", "type": "end", "output": output}],
        }
    )


def test_a_tenants_lookup_tries_its_own_catalogue_then_the_shared_one() -> None:
    """L1-L5: first match wins, own before shared, and never another tenant's."""
    assert lookup_order("acme") == (FlowOwner.tenant("acme"), SHARED)


def test_the_default_tenant_has_a_catalogue_of_its_own() -> None:
    """The default tenant is a tenant: its own definitions are not the deployment's."""
    assert FlowOwner.tenant("default") != SHARED
    assert not FlowOwner.tenant("default").shared and SHARED.shared


def test_an_owner_names_itself_for_messages_and_json() -> None:
    assert str(SHARED) == "deployment-wide"
    assert str(FlowOwner.tenant("acme")) == "tenant 'acme'"
    assert FlowOwner.tenant("acme").to_json() == {"tenant_id": "acme", "shared": False}
    assert SHARED.to_json() == {"tenant_id": None, "shared": True}


@pytest.mark.parametrize("bad", ["", "a:b", "{acme}", "*"])
def test_an_owner_is_a_valid_tenant_id_or_none(bad: str) -> None:
    with pytest.raises(InvalidTenantIdError):
        FlowOwner.tenant(bad)


def test_R1_nothing_stored_creates() -> None:
    assert registration_outcome(flow(), None, SHARED) is RegistrationOutcome.CREATED


def test_R2_the_same_document_is_unchanged() -> None:
    assert registration_outcome(flow(), flow(), SHARED) is RegistrationOutcome.UNCHANGED


def test_R3_another_document_is_a_conflict_naming_both_fingerprints() -> None:
    given_flow, stored = flow("'rogue'"), flow("'original'")

    with pytest.raises(FlowVersionConflictError) as raised:
        registration_outcome(given_flow, stored, FlowOwner.tenant("acme"))

    conflict = raised.value
    assert (conflict.flow_id, conflict.version) == ("pay", "1")
    assert conflict.registered_fingerprint == stored.fingerprint
    assert conflict.given_fingerprint == given_flow.fingerprint
    message = str(conflict)
    assert "'pay' version '1'" in message and "tenant 'acme'" in message
    assert stored.fingerprint in message and given_flow.fingerprint in message
    assert "new version" in message


def test_the_listing_gives_each_id_once_with_the_catalogue_a_lookup_finds_it_in() -> None:
    acme = FlowOwner.tenant("acme")

    listed = listing_owners("acme", ["pay", "mine"], ["ship", "pay"])

    assert listed == [("mine", acme), ("pay", acme), ("ship", SHARED)]


@given(
    st.sets(st.sampled_from("abcdef")),
    st.sets(st.sampled_from("abcdef")),
)
def test_a_listed_flow_is_own_exactly_when_the_tenant_has_it(
    own: set[str], shared: set[str]
) -> None:
    listed = dict(listing_owners("acme", own, shared))

    assert set(listed) == own | shared
    assert {flow_id for flow_id, owner in listed.items() if owner == SHARED} == shared - own
