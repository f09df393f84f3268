"""Where a suspended execution waits (its ``Suspension``): an event subscription, a timer,
or its children (E1a, V8, E13, E14)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.children import MapProgress

JSON = Any


@attrs.frozen
class Suspension:
    """Where a suspended execution waits: an event subscription, a timer, or its children.

    A wait for children (a ``subflow`` or ``map`` node, E13, E14) names them — the one
    ``child_id`` of a subflow, the ``map`` progress of a map — and keeps a timer too
    (``subscription_id`` and ``wake_at_ms``): the parent's own check on its children.
    """

    node_id: str
    subscription_id: str | None = None
    wake_at_ms: int | None = None
    child_id: str | None = None
    map: MapProgress | None = None
    #: The node says ``on_parent_end: abandon``: the parent's cancel or delete leaves its
    #: running children be.
    abandon_children: bool = False

    @property
    def waits_for_children(self) -> bool:
        return self.child_id is not None or self.map is not None

    def to_json(self) -> dict[str, JSON]:
        raw: dict[str, JSON] = {
            "node_id": self.node_id,
            "subscription_id": self.subscription_id,
            "wake_at_ms": self.wake_at_ms,
        }
        if self.child_id is not None:
            raw["child_id"] = self.child_id
        if self.map is not None:
            raw["map"] = self.map.to_json()
        if self.abandon_children:
            raw["abandon_children"] = True
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> Suspension:
        progress = raw.get("map")
        return cls(
            node_id=str(raw["node_id"]),
            subscription_id=raw.get("subscription_id"),
            wake_at_ms=raw.get("wake_at_ms"),
            child_id=raw.get("child_id"),
            map=None if progress is None else MapProgress.from_json(progress),
            abandon_children=bool(raw.get("abandon_children", False)),
        )
