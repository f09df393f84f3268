"""Branch tokens of an open fork (E12): the rules of a step, a suspension, a resume and the
join, as tables and as a stateful model over random interleavings with duplicate resumes."""

from __future__ import annotations

import re

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from plaita.domain.errors import TokenStateError
from plaita.domain.execution import Suspension
from plaita.domain.tokens import (
    OpenFork,
    TokenStatus,
    WaitFor,
    advance,
    fork,
    resume,
    run_join,
    suspend,
)


def opened(wait: WaitFor = WaitFor.ALL) -> OpenFork:
    return fork("fan", ["a", "b"], join="merge", wait=wait)


def test_a_fork_opens_one_ready_token_per_branch_with_ids_under_the_fork() -> None:
    state = opened()
    assert [(t.token_id, t.node_id, t.status) for t in state.tokens] == [
        ("fan/a", "a", TokenStatus.READY),
        ("fan/b", "b", TokenStatus.READY),
    ]
    assert not state.join_due and not state.suspended


def test_wait_all_runs_the_join_once_every_branch_arrived() -> None:
    state = advance(opened(), "fan/a", "a2")
    state = advance(state, "fan/a", "merge")
    assert not state.join_due
    state = advance(state, "fan/b", "merge")
    assert state.join_due and run_join(state).cancelled == ()


def test_wait_any_runs_the_join_at_the_first_arrival_and_cancels_the_rest() -> None:
    wait_b = Suspension("b", subscription_id="sub-b")
    state = suspend(opened(WaitFor.ANY), "fan/b", wait_b)
    state = advance(state, "fan/a", "merge")
    assert state.join_due
    joined = run_join(state)
    assert [(t.token_id, t.status) for t in joined.cancelled] == [("fan/b", TokenStatus.CANCELLED)]
    assert joined.dropped_waits == (wait_b,)


def test_two_branches_can_wait_at_once_and_the_execution_is_suspended() -> None:
    state = suspend(opened(), "fan/a", Suspension("a", subscription_id="s-a"))
    assert not state.suspended  # b can still run
    state = suspend(state, "fan/b", Suspension("b", wake_at_ms=5))
    assert state.suspended and not state.ready


def test_a_resume_wakes_only_its_token_and_a_duplicate_changes_nothing() -> None:
    state = suspend(opened(), "fan/a", Suspension("a", subscription_id="s-a"))
    woken = resume(state, "fan/a", node_id="a")
    assert not woken.duplicate and woken.state.token("fan/a").status is TokenStatus.READY
    again = resume(woken.state, "fan/a", node_id="a")
    assert again.duplicate and again.state == woken.state
    moved = advance(woken.state, "fan/a", "merge")
    assert resume(moved, "fan/a", node_id="a").duplicate


@pytest.mark.parametrize(
    ("act", "message"),
    [
        (lambda s: advance(suspend(s, "fan/a", Suspension("a")), "fan/a", "x"), "it is waiting"),
        (lambda s: advance(advance(s, "fan/a", "merge"), "fan/a", "x"), "it is arrived"),
        (lambda s: suspend(s, "fan/a", Suspension("elsewhere")), "is at 'a', not at"),
        (lambda s: advance(s, "fan/zzz", "x"), "has no token 'fan/zzz'"),
        (lambda s: run_join(advance(s, "fan/a", "merge")), "['fan/b'] have not arrived"),
    ],
)
def test_what_a_token_cannot_do_is_a_named_error(act, message: str) -> None:
    with pytest.raises(TokenStateError, match=re.escape(message)):
        act(opened())


def test_a_fork_needs_two_branches() -> None:
    with pytest.raises(TokenStateError, match="at least two"):
        fork("fan", ["a"], join="merge", wait=WaitFor.ALL)


NODES = ["a", "b", "c", "x"]


class ForkModel(RuleBasedStateMachine):
    """Random steps, waits, resumes (duplicates and stale ones included) and joins: the join
    runs at most once and only when due, no token is lost, an arrived token never moves,
    and a fork with nothing to run and no join due is exactly a suspended one."""

    def __init__(self) -> None:
        super().__init__()
        self.wait = WaitFor.ALL
        self.state = fork("fan", ["a", "b", "c"], join="merge", wait=self.wait)
        self.joins = 0
        self.arrived: dict[str, str] = {}

    @rule(wait=st.sampled_from(list(WaitFor)))
    @precondition(lambda self: all(t.status is TokenStatus.READY for t in self.state.tokens))
    def choose_wait(self, wait: WaitFor) -> None:
        self.wait = wait
        self.state = fork("fan", ["a", "b", "c"], join="merge", wait=wait)

    @rule(data=st.data(), to=st.sampled_from([*NODES, "merge"]))
    @precondition(lambda self: self.joins == 0 and bool(self.state.ready))
    def step(self, data: st.DataObject, to: str) -> None:
        token = data.draw(st.sampled_from(self.state.ready))
        self.state = advance(self.state, token.token_id, to)

    @rule(data=st.data(), timer=st.booleans())
    @precondition(lambda self: self.joins == 0 and bool(self.state.ready))
    def wait_somewhere(self, data: st.DataObject, timer: bool) -> None:
        token = data.draw(st.sampled_from(self.state.ready))
        suspension = (
            Suspension(token.node_id, wake_at_ms=1)
            if timer
            else Suspension(token.node_id, subscription_id=f"s-{token.token_id}")
        )
        self.state = suspend(self.state, token.token_id, suspension)

    @rule(data=st.data(), node=st.sampled_from(NODES))
    def deliver_a_resume(self, data: st.DataObject, node: str) -> None:
        token = data.draw(st.sampled_from(self.state.tokens))
        before = self.state
        outcome = resume(before, token.token_id, node_id=node)
        if outcome.duplicate:
            assert outcome.state == before
        else:
            assert before.token(token.token_id).status is TokenStatus.WAITING
        if self.joins == 0:
            self.state = outcome.state

    @rule()
    @precondition(lambda self: self.joins == 0 and self.state.join_due)
    def join(self) -> None:
        joined = run_join(self.state)
        self.joins += 1
        if self.wait is WaitFor.ALL:
            assert joined.cancelled == ()
        assert all(t.status is TokenStatus.CANCELLED for t in joined.cancelled)

    @invariant()
    def the_rules_hold(self) -> None:
        assert self.joins <= 1
        assert [t.token_id for t in self.state.tokens] == ["fan/a", "fan/b", "fan/c"]
        for token in self.state.tokens:
            if token.status is TokenStatus.ARRIVED:
                assert token.node_id == "merge"
                assert self.arrived.setdefault(token.token_id, token.node_id) == "merge"
            assert (token.status is TokenStatus.WAITING) is (token.suspension is not None)
        assert self.state.suspended == (not self.state.ready and not self.state.join_due)


TestForkModel = ForkModel.TestCase
