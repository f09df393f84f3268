"""Leases and fences (W3, W4).

A lease says who may advance an execution; its generation is the fence every write carries.
Each acquisition takes the next generation of a counter that is never reset, so a holder that
lost its lease (paused, partitioned) can never write over the one that replaced it.
"""

from __future__ import annotations

import attrs

from plaita.domain.errors import ExecutionLeaseError


@attrs.frozen
class Lease:
    execution_id: str
    holder_id: str
    generation: int

    @property
    def value(self) -> str:
        """The value stored under the lease key: holder and generation."""
        return f"{self.holder_id}|{self.generation}"


def parse_lease_value(execution_id: str, value: str) -> Lease:
    holder, _, generation = value.rpartition("|")
    return Lease(execution_id=execution_id, holder_id=holder, generation=int(generation))


def next_generation(current: int | None) -> int:
    return 1 if current is None else current + 1


def write_allowed(fence: int, current_generation: int | None) -> bool:
    """A write is valid only under the generation the last acquisition handed out (W4)."""
    return current_generation is not None and fence == current_generation


def check_fence(execution_id: str, fence: int, current_generation: int | None) -> None:
    if not write_allowed(fence, current_generation):
        raise ExecutionLeaseError(
            f"execution {execution_id}: write with fence {fence} rejected, the current lease "
            f"generation is {current_generation}; another worker has taken over this execution"
        )


def renewal_interval_seconds(ttl_seconds: float) -> float:
    return ttl_seconds / 3
