"""Whose a flow definition is, which one a tenant's lookup finds, and when a registration
may write (S2, W20, W24).

A definition belongs to one **owner**: a tenant — only that tenant's executions, lookups and
listings see it — or the deployment (a *shared* definition, seen by every tenant). A
lookup for tenant T tries T's own catalogue first, then the shared one:

 #  asked for              T has it   shared has it  -> found
 L1 (flow_id, version)     yes        any            -> T's
 L2 (flow_id, version)     no         yes            -> the shared one
 L3 (flow_id, version)     no         no             -> nothing (UnknownFlowError)
 L4 flow_id, no version    yes        any            -> T's latest
 L5 flow_id, no version    no         yes            -> the shared latest

So a tenant's copy of a flow overrides the shared one for that tenant alone, a latest always
comes whole from one catalogue (never another owner's version), and nothing one tenant
registers is ever found by another.

Within one owner a (flow_id, version) is immutable once registered:

 #  stored under (owner, flow_id, version)  -> outcome
 R1 nothing                                 -> CREATED: stored
 R2 the same document (fingerprint)         -> UNCHANGED: the document is not written again
 R3 another document                        -> FlowVersionConflictError naming both; nothing
                                               is written and the latest stays

After R1 and R2 the latest rule applies (V1-V5 of ``plaita.domain.flow_versions``): whether
this version becomes the owner's latest depends on the version order or an explicit choice,
never on the order of the registrations.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from plaita.domain.errors import FlowVersionConflictError
from plaita.domain.flow import Flow
from plaita.domain.tenancy import validate_tenant_id


def _tenant_or_none(_instance: object, _attribute: object, value: str | None) -> None:
    if value is not None:
        validate_tenant_id(value)


@attrs.frozen
class FlowOwner:
    """A tenant's catalogue (``tenant_id``), or the deployment-wide one (``tenant_id=None``)."""

    tenant_id: str | None = attrs.field(default=None, validator=_tenant_or_none)

    @classmethod
    def tenant(cls, tenant_id: str) -> FlowOwner:
        return cls(tenant_id)

    @property
    def shared(self) -> bool:
        return self.tenant_id is None

    def __str__(self) -> str:
        return "deployment-wide" if self.tenant_id is None else f"tenant {self.tenant_id!r}"

    def to_json(self) -> dict[str, str | bool | None]:
        return {"tenant_id": self.tenant_id, "shared": self.shared}


#: The deployment-wide catalogue: every tenant's lookups fall back to it.
SHARED = FlowOwner()


def lookup_order(tenant_id: str) -> tuple[FlowOwner, FlowOwner]:
    """The catalogues a lookup for ``tenant_id`` tries, first match wins (L1-L5)."""
    return FlowOwner.tenant(tenant_id), SHARED


def listing_owners(
    tenant_id: str, own_ids: Iterable[str], shared_ids: Iterable[str]
) -> list[tuple[str, FlowOwner]]:
    """Each flow id a tenant sees, with the catalogue its lookups find it in, sorted by id."""
    own = FlowOwner.tenant(tenant_id)
    seen = {flow_id: own for flow_id in own_ids}
    for flow_id in shared_ids:
        seen.setdefault(flow_id, SHARED)
    return sorted(seen.items())


class RegistrationOutcome(enum.Enum):
    CREATED = "created"
    UNCHANGED = "unchanged"


def registration_outcome(given: Flow, stored: Flow | None, owner: FlowOwner) -> RegistrationOutcome:
    """R1-R3 for ``given`` against what ``owner`` holds under its (flow_id, version)."""
    if stored is None:
        return RegistrationOutcome.CREATED
    if stored.fingerprint == given.fingerprint:
        return RegistrationOutcome.UNCHANGED
    raise FlowVersionConflictError(
        f"flow {given.flow_id!r} version {given.version!r} is already registered ({owner}) "
        f"with fingerprint {stored.fingerprint}; the document given has fingerprint "
        f"{given.fingerprint}. A registered version never changes: register the new document "
        "under a new version",
        flow_id=given.flow_id,
        version=given.version,
        registered_fingerprint=stored.fingerprint,
        given_fingerprint=given.fingerprint,
    )
