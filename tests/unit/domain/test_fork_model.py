"""A stateful model of an open fork in the checkpoint (E12, R1): random interleavings of
branch steps, waits, resumes — duplicated and late ones included —, crashes (a step whose
checkpoint was never written is run again from the last one) and the join, through the one
checkpoint rule, ``apply_step``.

Invariants after every checkpoint: the join is reached once and only when every branch
arrived (``wait: all``) or one did (``any``); no branch is lost (each is ready, waiting,
arrived or — under ``any``, once joined — recorded as cancelled); and a non-terminal
execution always has a way on: running at a ready branch (its carrier), or suspended with
every branch that has not arrived waiting on a registered wait.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension
from plaita.domain.flow import Flow
from plaita.domain.step import CANCELLED_MARKER, StepRecord, apply_step
from plaita.domain.tokens import TokenStatus

BRANCHES = ["a", "b", "c"]


def flow(wait: str) -> Flow:
    nodes: list[dict[str, Any]] = [
        {"id": "fan", "type": "parallel", "branches": BRANCHES, "join": "join", "wait": wait}
    ]
    for branch in BRANCHES:  # each branch: a task, then a wait, then the join
        nodes.append({"id": branch, "type": "task", "handler": "t:f", "next": f"{branch}_w"})
        nodes.append({"id": f"{branch}_w", "type": "event", "event_type": branch, "next": "join"})
    nodes.append({"id": "join", "type": "end"})
    return Flow.from_document({"flow_id": "f", "start": "fan", "nodes": nodes})


def record(node_id: str, **outcome: Any) -> StepRecord:
    return StepRecord(
        node_id=node_id,
        variables={},
        node_results={node_id: 1},
        last_node_id=node_id,
        last_branch=None,
        **outcome,
    )


class ForkModel(RuleBasedStateMachine):
    @initialize(wait=st.sampled_from(["all", "any"]))
    def open(self, wait: str) -> None:
        self.flow = flow(wait)
        self.wait = wait
        start = ExecutionState.new(
            execution_id="x",
            flow_id="f",
            flow_version="1",
            fingerprint="",
            start_node_id="fan",
            input={},
            now_ms=0,
        )
        self.now = 1
        self.state = self.step(start, record("fan", next_node_id="a"))
        self.joins = 0
        self.resumed: set[str] = set()

    def step(self, state: ExecutionState, step: StepRecord) -> ExecutionState:
        self.now += 2
        after = apply_step(state, step, flow=self.flow, started_ms=self.now, now_ms=self.now + 1)
        return ExecutionState.from_json(after.to_json())  # what a store gives back

    @property
    def fork_open(self) -> bool:
        return self.state.fork is not None

    @precondition(lambda self: self.fork_open and self.state.status is ExecutionStatus.RUNNING)
    @rule(crash=st.booleans(), data=st.data())
    def run_a_ready_branch(self, crash: bool, data: st.DataObject) -> None:
        """The worker runs the next ready node; a crash loses the step, and it runs again."""
        node = self.state.next_node_id
        assert node is not None
        if node.endswith("_w"):
            outcome: dict[str, Any] = {"suspension": Suspension(node, f"sub-{node}")}
        else:
            outcome = {"next_node_id": f"{node}_w"}
        if crash:
            self.step(self.state, record(node, **outcome))  # never checkpointed
        before = self.state
        self.state = self.step(self.state, record(node, **outcome))
        self._joined(before)

    @precondition(lambda self: self.fork_open and bool(self.state.waits))
    @rule(data=st.data(), duplicate=st.booleans())
    def an_event_resumes_its_branch(self, data: st.DataObject, duplicate: bool) -> None:
        wait = data.draw(st.sampled_from(list(self.state.waits)))
        before = self.state
        self.state = self.step(self.state, record(wait.node_id, next_node_id="join"))
        self.resumed.add(wait.node_id)
        self._joined(before)
        if duplicate:  # the same event again: its wait is gone, so the worker finds none
            assert self.state.wait_of(wait.subscription_id) is None

    @precondition(lambda self: not self.fork_open)
    @rule(branch=st.sampled_from(BRANCHES))
    def a_late_event_after_the_join_finds_no_wait(self, branch: str) -> None:
        """The fork closed: a late or duplicated event names a wait the state no longer has,
        so the worker runs no step for it (and the join never runs again)."""
        assert self.state.wait_of(f"sub-{branch}_w") is None

    def _joined(self, before: ExecutionState) -> None:
        if before.fork is not None and self.state.fork is None:
            self.joins += 1
            arrived = [t for t in before.fork.tokens if t.status is TokenStatus.ARRIVED]
            assert self.state.next_node_id == "join"
            if self.wait == "all":
                # Every branch but the one that just arrived had arrived already.
                assert len(arrived) == len(BRANCHES) - 1
            else:
                left = [t for t in before.fork.tokens if t.status is not TokenStatus.ARRIVED]
                for token in left:
                    if token.node_id != self.state.last_node_id:
                        assert self.state.node_results[token.node_id] == dict(CANCELLED_MARKER)

    @invariant()
    def the_join_runs_once(self) -> None:
        assert self.joins <= 1
        if self.joins == 0:
            assert self.state.fork is not None

    @invariant()
    def no_branch_is_lost_and_there_is_always_a_way_on(self) -> None:
        fork = self.state.fork
        if fork is None:
            assert self.state.status is ExecutionStatus.RUNNING and self.state.waits == ()
            return
        assert [t.token_id for t in fork.tokens] == [f"fan/{b}" for b in BRANCHES]
        if self.state.status is ExecutionStatus.RUNNING:
            assert self.state.next_node_id in {t.node_id for t in fork.ready}
        else:
            assert self.state.status is ExecutionStatus.SUSPENDED and not fork.ready
            for token in fork.tokens:
                if token.status is not TokenStatus.ARRIVED:
                    assert token.status is TokenStatus.WAITING and token.suspension is not None
            assert self.state.suspension in self.state.waits


TestForkModel = ForkModel.TestCase
