"""The worker step (W1-W15): ``ProcessTask`` takes one carrier from the gates to the ack.

``process_task`` is the orchestration, top to bottom; every other module is one stage of it:
``gates`` (before and instead of the lease), ``lease_keeper`` (the watchdog beside it),
``attempts`` (crashed attempts, W2), ``starts`` and ``resumes`` (what a carrier means),
``advance`` (the step loop), ``waits`` (how a step suspends), ``writes`` (fenced writes)
and ``dispatch`` (the values they pass along).
"""

from plaita.application.use_cases.step.dispatch import (
    Carrier,
    DispatchResult,
    Disposition,
    StepSettings,
    ack,
)
from plaita.application.use_cases.step.gates import RECLAIM_SKIPPED
from plaita.application.use_cases.step.process_task import ProcessTask

__all__ = [
    "RECLAIM_SKIPPED",
    "Carrier",
    "DispatchResult",
    "Disposition",
    "ProcessTask",
    "StepSettings",
    "ack",
]
