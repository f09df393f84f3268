"""Why an execution waits for room to run: the flow-control note an operator reads.

A carrier that meets a limit is kept (in a slot table's queue, a tenant's parked carriers, or
the delay queue) and acked; the execution then waits for a reason that is nowhere in its
checkpoint. The step that kept it writes a ``Waiting`` beside the execution, the console and
``plaita executions show`` read it, and the step that lets the execution run again clears it.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs


class WaitReason(enum.StrEnum):
    #: The flow's concurrency key has ``limit`` executions running.
    CONCURRENCY = "concurrency"
    #: A task or http node's rate limit has no token until ``due_ms``.
    RATE_LIMIT = "rate_limit"
    #: The tenant runs as many executions as its quota allows.
    TENANT_QUOTA = "tenant_quota"
    #: The tenant is suspended: its carriers are parked until it is resumed.
    TENANT_SUSPENDED = "tenant_suspended"
    #: The tenant's status was written under another deployment epoch than this worker's.
    TENANT_STATUS_STALE = "tenant_status_stale"


@attrs.frozen
class Waiting:
    """One execution's reason to wait, with what an operator needs to act on it."""

    reason: WaitReason
    since_ms: int
    #: One sentence for a person: what it waits for and what frees it.
    detail: str
    #: The concurrency key, rate-limit key or tenant the limit belongs to.
    key: str | None = None
    #: The executions holding the slots it waits for (concurrency, quota).
    holders: tuple[str, ...] = ()
    limit: int | None = None
    #: When it runs again at the latest, if that is known (a rate limit's token).
    due_ms: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"), sort_keys=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason.value,
            "since_ms": self.since_ms,
            "detail": self.detail,
            "key": self.key,
            "holders": list(self.holders),
            "limit": self.limit,
            "due_ms": self.due_ms,
        }

    @classmethod
    def from_json(cls, text: str | bytes) -> Waiting | None:
        """The note stored as ``text``; None for one this build cannot read (a newer reason),
        so an unknown note hides itself instead of breaking a listing."""
        try:
            raw = json.loads(text)
            return cls.from_dict(raw)
        except (ValueError, TypeError, KeyError):
            return None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Waiting:
        return cls(
            reason=WaitReason(raw["reason"]),
            since_ms=int(raw["since_ms"]),
            detail=str(raw["detail"]),
            key=None if raw.get("key") is None else str(raw["key"]),
            holders=tuple(str(holder) for holder in raw.get("holders") or ()),
            limit=None if raw.get("limit") is None else int(raw["limit"]),
            due_ms=None if raw.get("due_ms") is None else int(raw["due_ms"]),
        )


#: How long a note outlives the step that wrote it at most, should nothing clear it (the
#: execution was deleted meanwhile, or ended by a path that never met the limit again).
WAITING_NOTE_TTL_MS = 7 * 24 * 3600 * 1000
