"""Operator controls (W23): flags and parked carriers beside an execution's checkpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from plaita.domain.envelope import TaskEnvelope
from plaita.domain.operator_controls import ControlFlags


@attrs.frozen
class ParkedCarrier:
    """A carrier of a paused execution, kept until the execution is unpaused (W23, I0)."""

    carrier_id: str
    envelope: TaskEnvelope


@attrs.frozen
class Admission:
    """What the pause gate found, and whether it parked the carrier (one atomic step)."""

    flags: ControlFlags
    parked: bool = False
    #: Carriers parked while the execution is no longer paused (an unpause that crashed
    #: half-way): the worker re-enqueues them. Empty unless that happened.
    stranded: tuple[ParkedCarrier, ...] = ()


class ExecutionControls(Protocol):
    """Operator flags of an execution, apart from its checkpoint, and its parked carriers (W23).

    Kept in the execution's tenant namespace and hash tag; written without the lease. They
    last while the execution is live, expire with it once it is terminal (``retain``, S5) and
    go with its delete (W13).
    """

    async def get(self, execution_id: str) -> ControlFlags:
        """The flags and the number of parked carriers (all false/0 when never set)."""
        ...

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, ControlFlags]:
        """``get`` for several executions of the current tenant, in one round trip."""
        ...

    async def set_flags(
        self,
        execution_id: str,
        *,
        paused: bool | None = None,
        cancel_requested: bool | None = None,
    ) -> ControlFlags:
        """Set or clear the given flags (None leaves one as it is); the flags after."""
        ...

    async def admit(self, envelope: TaskEnvelope, *, parkable: bool) -> Admission:
        """The worker's pause gate, atomic: park the carrier when ``should_park`` says so.

        Park = keep it among the execution's parked carriers (the same carrier once); the
        caller then acks it. When the execution is not paused but carriers are still parked,
        they are returned as ``stranded`` (and stay parked until ``unpark``).
        """
        ...

    async def parked(self, execution_id: str) -> Sequence[ParkedCarrier]:
        """The parked carriers, oldest carrier timestamp first."""
        ...

    async def unpark(self, execution_id: str, carrier_ids: Sequence[str]) -> int:
        """Forget these parked carriers (re-enqueued by the caller); how many were parked."""
        ...

    async def retain(self, execution_id: str, *, ttl_ms: int | None) -> None:
        """Let the flags and parked carriers expire ``ttl_ms`` from now, or never (None).

        ``ttl_ms``: the execution ended (S5); None: it is live again, keep them until
        ``clear``. A carrier parked after the end expires with the flags. The execution
        repository calls it with every checkpoint that changes the lifetime (on Redis
        storage inside the checkpoint's own script instead).
        """
        ...

    async def clear(self, execution_id: str) -> None:
        """Remove the flags and every parked carrier (the execution was deleted, W13)."""
        ...
