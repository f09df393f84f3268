"""Which operator actions can work on an execution now, and why the others cannot (W23, C2).

One table, read by the use cases (``plaita.domain.operator_controls``'s decisions refuse
what it refuses, with its reason) and by the console (the execution view's ``actions``: a
button is offered only when its action can work, and an absent one says why). The reasons
are written for an operator.

 action           pending   running    suspended  error    completed  cancelled
 resume           -         yes        -          -        -          -
 retry            -         - (busy)   -          yes      -          yes
 retry_from_node  -         - (busy)   yes        yes      -          yes
 cancel           yes       yes        yes        -        -          -
 pause            yes       yes        yes        -        -          -
 unpause          (when paused, or carriers wait parked — any status)
 publish_event    yes       yes        yes        -        -          -
 delete           yes (every status; the console asks an admin)

"resume" queues a fresh step from the last checkpoint: it moves a running execution whose
worker went away, never a suspended one (its event or timer moves it: publish the event, or
retry from a node).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from plaita.domain.execution import ExecutionStatus

if TYPE_CHECKING:  # operator_controls reads this table: no import back at run time
    from plaita.domain.operator_controls import ControlFlags


class ExecutionAction(enum.StrEnum):
    RESUME = "resume"
    RETRY = "retry"
    RETRY_FROM_NODE = "retry_from_node"
    CANCEL = "cancel"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    PUBLISH_EVENT = "publish_event"
    DELETE = "delete"


@attrs.frozen
class Availability:
    """Whether an action can work now; ``reason`` says why not (empty when it can).

    ``code`` names the refusal for programs (``execution_completed``…). ``no_op``: asking
    anyway changes nothing and is not an error (pause when already paused).
    """

    available: bool
    reason: str = ""
    code: str = ""
    no_op: bool = False

    def to_json(self) -> dict[str, bool | str]:
        return {"available": self.available, "reason": self.reason}


_YES = Availability(True)
#: The status as the table reads it; "pending" is an execution accepted, not yet picked up.
_PENDING = ExecutionStatus.PENDING.value
_LIVE = frozenset({_PENDING, "running", "suspended"})


def _no(code: str, reason: str) -> Availability:
    return Availability(False, reason, code)


_NOT_STARTED = _no("execution_pending", "It has not started yet: a worker picks it up shortly.")
_BUSY = _no(
    "execution_running",
    "A worker is running it now: wait for it to stop, or cancel it and then retry.",
)
_COMPLETED_RETRY = _no(
    "execution_completed", "It completed: start a new execution to run the flow again."
)
_ENDED = {
    "completed": _no("execution_completed", "It has completed."),
    "error": _no("execution_error", "It stopped with an error: retry it instead."),
    "cancelled": _no("execution_cancelled", "It was cancelled: retry it instead."),
}

_RESUME = {
    _PENDING: _NOT_STARTED,
    "running": _YES,
    "suspended": _no(
        "execution_suspended",
        "It waits for an event or a timer, which moves it on: publish the event it waits "
        "for, or retry from a node to move it elsewhere.",
    ),
    **_ENDED,
}
_RETRY = {
    _PENDING: _NOT_STARTED,
    "running": _BUSY,
    "suspended": _no(
        "suspended_needs_node",
        "It waits for its event or timer: choose a node to retry from to move it on.",
    ),
    "error": _YES,
    "completed": _COMPLETED_RETRY,
    "cancelled": _YES,
}
_RETRY_FROM_NODE = {**_RETRY, "suspended": _YES}
_CANCEL_ENDED = {
    "completed": _no("execution_completed", "It has already completed."),
    "error": _no(
        "execution_error",
        "It stopped with an error and stays as it is (retry it, or delete it to remove it).",
    ),
    "cancelled": _no("execution_cancelled", "It is already cancelled."),
}
_PAUSE_ENDED = "It has ended: only a live execution takes steps to pause."
_PUBLISH_ENDED = "It has ended: no step of it will read an event any more."


def action_availability(
    action: ExecutionAction, status: ExecutionStatus | str, flags: ControlFlags
) -> Availability:
    """Whether ``action`` can work on an execution in ``status`` with ``flags``."""
    state = status.value if isinstance(status, ExecutionStatus) else status
    if action is ExecutionAction.DELETE:
        return _YES
    if action is ExecutionAction.UNPAUSE:
        if flags.paused or flags.parked > 0:
            return _YES
        return Availability(False, "It is not paused.", "not_paused", no_op=True)
    if action is ExecutionAction.PAUSE and state in _LIVE and flags.paused:
        return Availability(False, "It is already paused.", "already_paused", no_op=True)
    if action in (ExecutionAction.CANCEL, ExecutionAction.PAUSE, ExecutionAction.PUBLISH_EVENT):
        if state in _LIVE:
            return _YES
        if action is ExecutionAction.CANCEL:
            return _CANCEL_ENDED.get(state, _unknown(state))
        reason = _PAUSE_ENDED if action is ExecutionAction.PAUSE else _PUBLISH_ENDED
        return _no(f"execution_{state}", reason)
    table = {
        ExecutionAction.RESUME: _RESUME,
        ExecutionAction.RETRY: _RETRY,
        ExecutionAction.RETRY_FROM_NODE: _RETRY_FROM_NODE,
    }[action]
    return table.get(state, _unknown(state))


def available_actions(
    status: ExecutionStatus | str, flags: ControlFlags
) -> Mapping[ExecutionAction, Availability]:
    """Every action with its availability, in the table's order (the console's buttons)."""
    return {action: action_availability(action, status, flags) for action in ExecutionAction}


def _unknown(state: str) -> Availability:
    return _no("unknown_status", f"Its status {state!r} is not one this console knows.")
