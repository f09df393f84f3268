"""What a settled dispatch counts as in the metrics (C5).

The worker reports each dispatch by its outcome and disposition; which of them are failures
of the execution's work, node retries or lease conflicts is this table, so every recorder of
metrics counts them alike:

| outcome | disposition | failure | retry | lease conflict |
| --- | --- | --- | --- | --- |
| ``failed``, ``crashed`` | any | yes | | |
| any | ``dead_letter`` | yes | | |
| ``retry_scheduled`` | any | | yes | |
| ``lease_conflict`` | any | | | yes |

``handed_over`` and ``target_stripped`` (W25) are counted by their outcome in the affinity
series too (``affinity``).
"""

from __future__ import annotations

import attrs

from plaita.domain.affinity import HANDED_OVER, TARGET_STRIPPED

FAILURE_OUTCOMES = frozenset({"failed", "crashed"})
RETRY_OUTCOME = "retry_scheduled"
LEASE_CONFLICT_OUTCOME = "lease_conflict"
DEAD_LETTER_DISPOSITION = "dead_letter"
#: W25: a carrier passed on towards its target, or its target dropped.
AFFINITY_OUTCOMES = frozenset({HANDED_OVER, TARGET_STRIPPED})


@attrs.frozen
class DispatchTally:
    """The series one settled dispatch adds to, besides the steps by outcome."""

    failure: bool
    retry: bool
    lease_conflict: bool
    #: The affinity action (``handed_over``, ``target_stripped``), or None.
    affinity: str | None = None


def tally_dispatch(outcome: str, disposition: str) -> DispatchTally:
    """What a dispatch that returned ``outcome`` and was settled by ``disposition`` counts as."""
    return DispatchTally(
        failure=outcome in FAILURE_OUTCOMES or disposition == DEAD_LETTER_DISPOSITION,
        retry=outcome == RETRY_OUTCOME,
        lease_conflict=outcome == LEASE_CONFLICT_OUTCOME,
        affinity=outcome if outcome in AFFINITY_OUTCOMES else None,
    )
