"""A child's end notice lost with the worker that saved the end (E14, R2): the child's
carrier, reclaimed from the dead worker, meets the ended child and sends the notice again,
so the parent hears of the end within the claim idle rather than at its own check a minute
later. A carrier that was not reclaimed (a plain duplicate) sends nothing.

The twin's store announces nothing, as a worker killed between the save and the notice.
"""

from __future__ import annotations

from typing import Any

import pytest

from plaita.application.use_cases.children import ChildLinks, WorkerChildren
from plaita.domain.envelope import LEGACY_GENERATIONS, CarrierKind, ResumeType
from plaita.domain.execution import ParentLink

from .twin import Twin

CHILD = "p-1.each.3"
LINK = ParentLink("p-1", "parent_flow", "each", 3)


async def _never(*args: Any, **kwargs: Any) -> object:
    raise AssertionError("this test starts and cancels no child")


def with_children(twin: Twin) -> Twin:
    links = ChildLinks(
        queue=twin.queue, cancel=_never, clock=twin.clock, generations=LEGACY_GENERATIONS
    )
    twin.children = WorkerChildren(
        start=_never,
        cancel=_never,
        executions=twin.executions,
        delay=twin.delay,
        clock=twin.clock,
        ids=twin.ids,
        generations=LEGACY_GENERATIONS,
        links=links,
    )
    return twin


async def ended_child(twin: Twin) -> Any:
    """The child run to its end; its start carrier, as the dead worker left it."""
    await twin.start_execution("approval", params={"amount": 10}, execution_id=CHILD, parent=LINK)
    (delivery,) = await twin.queue.read("dead", count=10, block_ms=1)
    assert (await twin.process(delivery.envelope)).outcome == "completed"
    state = await twin.executions.load(CHILD)
    assert state is not None and state.is_terminal and state.parent == LINK
    return delivery


async def notices(twin: Twin) -> list[Any]:
    found = [d.envelope for d in await twin.queue.read("reader", count=100, block_ms=1)]
    return [e for e in found if e is not None and e.kind is CarrierKind.RESUME]


async def test_a_reclaimed_carrier_of_an_ended_child_tells_its_parent_again(twin: Twin) -> None:
    delivery = await ended_child(with_children(twin))
    assert await notices(twin) == []  # the notice died with the worker
    result = await twin.process(delivery.envelope, message_id=delivery.message_id, reclaimed=True)
    assert result.disposition.value == "ack"
    (notice,) = await notices(twin)
    assert (notice.execution_id, notice.resume_type) == ("p-1", ResumeType.CHILD)
    assert notice.event == {"child_id": CHILD, "node_id": "each", "index": 3, "status": "completed"}


@pytest.mark.parametrize("reclaimed", [False, True])
async def test_only_a_reclaimed_carrier_of_a_child_repeats_the_notice(
    twin: Twin, reclaimed: bool
) -> None:
    delivery = await ended_child(with_children(twin))
    await twin.process(delivery.envelope, message_id=delivery.message_id, reclaimed=reclaimed)
    assert len(await notices(twin)) == (1 if reclaimed else 0)


async def test_a_reclaimed_carrier_of_an_ended_top_level_execution_sends_nothing(
    twin: Twin,
) -> None:
    with_children(twin)
    await twin.start_execution("approval", params={"amount": 10}, execution_id="top")
    (delivery,) = await twin.queue.read("dead", count=10, block_ms=1)
    await twin.process(delivery.envelope)
    await twin.process(delivery.envelope, message_id=delivery.message_id, reclaimed=True)
    assert await notices(twin) == []
