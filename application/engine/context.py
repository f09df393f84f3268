"""ExecutionContext: the variables, node results and position of one execution (E2)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from plaita.domain.errors import PayloadLimitError
from plaita.domain.execution import ExecutionState
from plaita.domain.failures import DeterministicNodeError, ResultLimitError
from plaita.domain.limits import VARIABLE_LIMIT, check_json_value

JSON = Any


class ExecutionContext:
    """Mutable while a step runs; exported back into an ``ExecutionState`` after it."""

    def __init__(
        self,
        *,
        execution_id: str,
        flow_id: str,
        input: Mapping[str, JSON] | None = None,
        tenant_id: str = "default",
        variables: Mapping[str, JSON] | None = None,
        node_results: Mapping[str, JSON] | None = None,
        last_node_id: str | None = None,
        last_branch: str | None = None,
        attempts: Mapping[str, int] | None = None,
    ) -> None:
        self.execution_id = execution_id
        self.flow_id = flow_id
        self.tenant_id = tenant_id
        self.input: dict[str, JSON] = dict(input or {})
        self.variables: dict[str, JSON] = dict(variables or {})
        self.node_results: dict[str, JSON] = dict(node_results or {})
        self.last_node_id = last_node_id
        self.last_branch = last_branch
        self.cancel_event = threading.Event()
        #: The attempt number of each node's next attempt where it is not 1: attempts made in
        #: earlier deliveries count (E15, ``ctx.attempt``).
        self.attempts: dict[str, int] = dict(attempts or {})
        #: Each task node's params as its handler got them, at its latest attempt (the
        #: worker records them in the node's history).
        self.rendered_params: dict[str, JSON] = {}

    def attempt_of(self, node_id: str) -> int:
        return self.attempts.get(node_id, 1)

    @classmethod
    def from_state(cls, state: ExecutionState) -> ExecutionContext:
        return cls(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            input=state.input,
            tenant_id=state.tenant_id,
            variables=state.variables,
            node_results=state.node_results,
            last_node_id=state.last_node_id,
            last_branch=state.last_branch,
        )

    def apply_to(self, state: ExecutionState) -> ExecutionState:
        return attrs.evolve(
            state,
            variables=dict(self.variables),
            node_results=dict(self.node_results),
            last_node_id=self.last_node_id,
            last_branch=self.last_branch,
        )

    def record_node(self, node_id: str, result: JSON, branch: str | None) -> None:
        # A success clears the node's attempts, as it clears its counters (W8).
        self.attempts.pop(node_id, None)
        self.node_results[node_id] = result
        self.last_node_id = node_id
        self.last_branch = branch

    def names(self) -> dict[str, JSON]:
        """What expressions can see: input and variables by name, then the system names."""
        return {
            **self.input,
            **self.variables,
            "input": self.input,
            "vars": self.variables,
            "NODE": self.node_results,
            "LAST_NODE": None
            if self.last_node_id is None
            else self.node_results.get(self.last_node_id),
            "LAST_NODE_ID": self.last_node_id,
            "BRANCH": self.last_branch,
            "FLOW_ID": self.flow_id,
            "EXECUTION_ID": self.execution_id,
        }

    def to_json(self) -> dict[str, JSON]:
        return {
            "execution_id": self.execution_id,
            "flow_id": self.flow_id,
            "tenant_id": self.tenant_id,
            "input": self.input,
            "variables": self.variables,
            "node_results": self.node_results,
            "last_node_id": self.last_node_id,
            "last_branch": self.last_branch,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> ExecutionContext:
        return cls(**{key: raw.get(key) for key in _FIELDS if key in raw})  # type: ignore[arg-type]


_FIELDS = (
    "execution_id",
    "flow_id",
    "tenant_id",
    "input",
    "variables",
    "node_results",
    "last_node_id",
    "last_branch",
)


@attrs.frozen
class NodeContext:
    """What a task handler receives as ``ctx`` (E1a): ids, attempt, read-only views, cancel."""

    execution_id: str
    flow_id: str
    node_id: str
    attempt: int
    tenant_id: str
    variables: Mapping[str, JSON]
    node_results: Mapping[str, JSON]
    _cancel_event: threading.Event = attrs.field(alias="cancel_event", repr=False)
    _attempt_cancel: threading.Event = attrs.field(alias="attempt_cancel", repr=False)
    _updates: dict[str, JSON] = attrs.field(factory=dict, alias="updates", repr=False)

    @classmethod
    def for_attempt(
        cls,
        context: ExecutionContext,
        node_id: str,
        attempt: int,
        attempt_cancel: threading.Event,
    ) -> NodeContext:
        return cls(
            execution_id=context.execution_id,
            flow_id=context.flow_id,
            node_id=node_id,
            attempt=attempt,
            tenant_id=context.tenant_id,
            variables=MappingProxyType(dict(context.variables)),
            node_results=MappingProxyType(dict(context.node_results)),
            cancel_event=context.cancel_event,
            attempt_cancel=attempt_cancel,
        )

    @property
    def cancelled(self) -> bool:
        """True once the execution is cancelled or this attempt timed out; stop work then."""
        return self._cancel_event.is_set() or self._attempt_cancel.is_set()

    def set_variable(self, name: str, value: JSON) -> None:
        """Set an execution variable; it is kept only if this attempt succeeds (E2).

        A bad name or a value that is not JSON-serialisable raises ``DeterministicNodeError``,
        one over the JSON limits ``ResultLimitError``: retrying the handler cannot fix either.
        """
        if not isinstance(name, str) or not name:
            raise DeterministicNodeError(f"a variable name must be a non-empty string: {name!r}")
        try:
            text = check_json_value(value, VARIABLE_LIMIT, field=f"variable {name!r}")
            self._updates[name] = json.loads(text)
        except PayloadLimitError as exc:
            raise ResultLimitError(str(exc)) from None
        except (TypeError, ValueError) as exc:
            raise DeterministicNodeError(
                f"variable {name!r}: value is not JSON-serialisable: {exc}"
            ) from None

    @property
    def variable_updates(self) -> Mapping[str, JSON]:
        """The variables this attempt set, applied to the execution when it succeeds."""
        return MappingProxyType(self._updates)
