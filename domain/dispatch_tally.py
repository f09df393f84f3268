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
"""

from __future__ import annotations

import attrs

FAILURE_OUTCOMES = frozenset({"failed", "crashed"})
RETRY_OUTCOME = "retry_scheduled"
LEASE_CONFLICT_OUTCOME = "lease_conflict"
DEAD_LETTER_DISPOSITION = "dead_letter"


@attrs.frozen
class DispatchTally:
    """The series one settled dispatch adds to, besides the steps by outcome."""

    failure: bool
    retry: bool
    lease_conflict: bool


def tally_dispatch(outcome: str, disposition: str) -> DispatchTally:
    """What a dispatch that returned ``outcome`` and was settled by ``disposition`` counts as."""
    return DispatchTally(
        failure=outcome in FAILURE_OUTCOMES or disposition == DEAD_LETTER_DISPOSITION,
        retry=outcome == RETRY_OUTCOME,
        lease_conflict=outcome == LEASE_CONFLICT_OUTCOME,
    )
