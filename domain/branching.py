"""Which way an ``if`` or ``switch`` node goes, and what a branch miss does (E7).

The engine evaluates the conditions; these functions only choose. A miss is a decision, not a
silent end: the node's errorHandler either fails the execution with an error naming the node
(``abort``, the default) or ends the flow at the node with null or its default. Nothing here
leaves an execution ``running`` — incident #53: a false condition with no successor once left
runs in ``running`` for 88 minutes with no error and no end.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import attrs

from plaita.domain.failures import BranchMissError
from plaita.domain.flow import FailureStrategy, IfNode, SwitchNode

JSON = Any

#: WARNING logged when a miss ends the flow because the errorHandler said continue.
BRANCH_MISS_EVENT = "flow.branch_miss"


class BranchKind(enum.StrEnum):
    THEN = "then"
    ELSE = "else"
    CASE = "case"
    DEFAULT = "default"


@attrs.frozen
class BranchTaken:
    node_id: str
    kind: BranchKind
    target: str
    case_index: int | None = None

    @property
    def label(self) -> str:
        """The ``$BRANCH`` value: ``then``, ``else``, ``case:<index>`` or ``default``."""
        return f"case:{self.case_index}" if self.kind is BranchKind.CASE else self.kind.value

    @property
    def result(self) -> JSON:
        """The node's ``$NODE[id]``: the if's truth, the matching case's index, or null."""
        if self.kind is BranchKind.CASE:
            return self.case_index
        if self.kind is BranchKind.DEFAULT:
            return None
        return self.kind is BranchKind.THEN


@attrs.frozen
class BranchMiss:
    node_id: str
    node_type: str

    @property
    def message(self) -> str:
        if self.node_type == "if":
            return f"if node {self.node_id!r}: the condition is false and there is no else"
        return f"switch node {self.node_id!r}: no case matched and there is no default"

    def error(self) -> BranchMissError:
        """The error that fails the execution, naming the node (raise it)."""
        return BranchMissError(self.message, node_id=self.node_id)


def decide_if(node: IfNode, condition: bool) -> BranchTaken | BranchMiss:
    if condition:
        return BranchTaken(node.id, BranchKind.THEN, node.then)
    # An empty else (``else_next=""`` in #53): no successor, which is a miss, not an end.
    if not node.else_:
        return BranchMiss(node.id, node.type)
    return BranchTaken(node.id, BranchKind.ELSE, node.else_)


def decide_switch(node: SwitchNode, matches: Iterable[bool]) -> BranchTaken | BranchMiss:
    """The first matching case, else the default, else a miss.

    ``matches`` is read lazily and only up to the first true value, so the engine may pass a
    generator and cases after the match are never evaluated.
    """
    for index, (case, matched) in enumerate(zip(node.cases, matches, strict=False)):
        if matched:
            return BranchTaken(node.id, BranchKind.CASE, case.next, index)
    if node.default is not None:
        return BranchTaken(node.id, BranchKind.DEFAULT, node.default)
    return BranchMiss(node.id, node.type)


class MissAction(enum.StrEnum):
    #: ``abort``: the execution fails with ``BranchMissError`` naming the node.
    FAIL = "fail"
    #: ``continue``: the flow ends at the node with null (logged at WARNING).
    END_WITH_NULL = "end_with_null"
    #: ``continue_with``: the flow ends at the node with the handler's default.
    END_WITH_DEFAULT = "end_with_default"


@attrs.frozen
class MissOutcome:
    miss: BranchMiss
    action: MissAction
    #: The node's result when the flow ends here; ``None`` for FAIL and END_WITH_NULL.
    value: JSON = None

    @property
    def ends_flow(self) -> bool:
        return self.action is not MissAction.FAIL


def resolve_branch_miss(miss: BranchMiss, error_handler: FailureStrategy) -> MissOutcome:
    """The node's errorHandler applied to a miss; never "stay running" (E7, #53)."""
    if error_handler.strategy == "continue":
        return MissOutcome(miss, MissAction.END_WITH_NULL)
    if error_handler.strategy == "continue_with":
        return MissOutcome(miss, MissAction.END_WITH_DEFAULT, error_handler.default)
    return MissOutcome(miss, MissAction.FAIL)
