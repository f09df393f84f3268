"""``plaita.Flow``: a typed builder of the E1a flow document (L2).

The builder holds the domain's own node models (``plaita.domain.flow``): every node is
validated by them as it is added, and ``build()`` hands the whole document to the domain's
``Flow`` and to the expression compiler, so a built flow and the same flow loaded from JSON
pass the same rules and raise the same named errors::

    flow = (
        Flow("expense_approval")
        .task("submit", submit, params={"amount": "${amount}"})   # next: the node added next
        .event("wait", "expense.decided", timeout="P7D", timeout_next="expired")
        .end("done", output="NODE['wait']['data']")
        .end("expired", output="{'approved': False}")
    )
    flow.to_json()       # the E1a document, in canonical form
    flow.build()         # plaita.domain.flow.Flow, what a client registers

Rules: the first node added is the start unless ``start=`` names another. ``next=None`` on
``task``, ``event`` and ``sleep`` means "the node added right after this one"; when nothing
is added after it, ``build()`` refuses the flow with ``InvalidFlowDocumentError`` naming the
node. A handler is a ``"module:function"`` string or a module-level function, stored as
``"module:qualname"``; a callable a worker could not import back by that name is refused at
once with ``HandlerNotImportableError``.

The canonical dict (``to_dict``) is the document with its defaults left out: no
``version`` when it is ``"1"``, no empty ``params`` / ``filter``, no ``None`` fields, no
handler that is the default ``abort``; field names as in JSON (``retryTimes``,
``errorHandler``, ``else``). ``Flow.from_dict(doc).to_dict() == doc`` for every canonical
document, and any accepted document comes back as one with the same fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, NotRequired, Self, TypeAlias, TypedDict, TypeVar

from pydantic import ValidationError

from plaita.application.engine.context import NodeContext
from plaita.application.engine.expressions import compile_flow_expressions
from plaita.application.handlers import handler_reference
from plaita.domain.durations import MAX_WAIT_MS, parse_duration_ms
from plaita.domain.errors import (
    DuplicateNodeIdError,
    InvalidConcurrencyError,
    InvalidFlowDocumentError,
    InvalidHandlerReferenceError,
    MissingStartNodeError,
)
from plaita.domain.flow import (
    BaseNode,
    ConcurrencyLimit,
    EndNode,
    EventNode,
    FailureStrategy,
    FlowDocument,
    HttpNode,
    IfNode,
    MapNode,
    ParallelNode,
    SleepNode,
    SubflowNode,
    SwitchNode,
    TaskNode,
    check_node,
)
from plaita.domain.flow import Flow as Definition
from plaita.domain.ids import validate_flow_id
from plaita.domain.slots import check_limit

__all__ = [
    "ContinueWith",
    "Duration",
    "FailureStrategySpec",
    "Flow",
    "Handler",
    "JSONValue",
    "OnFailure",
    "RateLimit",
    "Strategy",
    "SwitchCases",
    "handler_reference",
]

#: A JSON value as a flow document holds it (params, filters, defaults). Mappings and
#: sequences are read-only views so that ``dict[str, int]`` or a tuple fits; the builder
#: copies them into plain dicts and lists.
JSONValue: TypeAlias = (
    bool | int | float | str | Sequence["JSONValue"] | Mapping[str, "JSONValue"] | None
)
#: Milliseconds (``5000``, ``"5000"``), an ISO-8601 duration (``"PT5S"``, ``"P1D"``) or a
#: ``timedelta``, which is written as whole milliseconds.
Duration: TypeAlias = int | float | str | timedelta
#: What a task handler is: ``handler(params, ctx)``, sync or async, or ``"module:function"``.
Handler: TypeAlias = Callable[[Any, NodeContext], object] | str
#: The strategies of ``errorHandler`` / ``timeoutHandler`` (docs/flows.md).
Strategy: TypeAlias = Literal["abort", "continue", "continue_with"]
#: ``switch`` cases in order, the first true condition wins: ``{condition: node id}`` or a
#: sequence of ``(condition, node id)`` pairs.
SwitchCases: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]]


class FailureStrategySpec(TypedDict):
    """The JSON form of a handler: ``{"strategy": "continue_with", "default": {...}}``."""

    strategy: Strategy
    default: NotRequired[JSONValue]


@dataclass(frozen=True, slots=True)
class ContinueWith:
    """The ``continue_with`` strategy: the node's result becomes ``default`` and the flow goes
    on. Written ``Flow.continue_with(default)``."""

    default: JSONValue


class RateLimit(TypedDict):
    """A task or http node's ``rate_limit``: at most ``burst`` runs at once and ``per_second``
    after, per value of the ``key`` template (without one: one bucket for the node)."""

    per_second: float
    key: NotRequired[str]
    burst: NotRequired[int]


#: ``error_handler`` / ``timeout_handler``: ``"abort"`` (the default), ``"continue"``,
#: ``Flow.continue_with(default)`` or the JSON form.
OnFailure: TypeAlias = Literal["abort", "continue"] | ContinueWith | FailureStrategySpec

_DEFAULT_VERSION = "1"
_N = TypeVar("_N", bound=BaseNode)


class Flow:
    """A flow definition under construction; node methods add to it and return it.

    ``Flow(flow_id, version="1", timeout=None, *, start=None)``: ``timeout`` is the budget
    of a whole execution; ``start`` the first node, by default the first node added.
    """

    __slots__ = (
        "_awaiting_next",
        "_concurrency",
        "_flow_id",
        "_nodes",
        "_start",
        "_timeout",
        "_version",
    )

    def __init__(
        self,
        flow_id: str,
        version: str = _DEFAULT_VERSION,
        timeout: Duration | None = None,
        *,
        start: str | None = None,
    ) -> None:
        validate_flow_id(flow_id)
        if not isinstance(version, str) or not version:
            raise InvalidFlowDocumentError(
                f"flow {flow_id!r}: version must be a non-empty string such as '1' or "
                f"'2025-03', got {version!r}"
            )
        if start is not None and (not isinstance(start, str) or not start):
            raise MissingStartNodeError(
                f"flow {flow_id!r}: start must be the id of a node, got {start!r}"
            )
        self._flow_id = flow_id
        self._version = version
        self._timeout = _duration(timeout)
        if self._timeout is not None:
            parse_duration_ms(self._timeout, field="flow.timeout", maximum_ms=MAX_WAIT_MS)
        self._start = start
        self._nodes: dict[str, BaseNode] = {}
        #: The node whose ``next`` was left to the node added after it.
        self._awaiting_next: str | None = None
        self._concurrency: ConcurrencyLimit | None = None

    def concurrency(self, limit: int, *, key: str | None = None) -> Self:
        """At most ``limit`` executions with the same ``key`` (a template over the input such
        as ``"${customer}"``; None: the whole flow) run at once; the others wait their turn
        (E1a)."""
        where = f"flow {self._flow_id!r} concurrency"
        check_limit(limit, where=where)
        if key is not None and (not isinstance(key, str) or not key.strip()):
            raise InvalidConcurrencyError(
                f"{where}: key must be a template over the input such as '${{customer}}', "
                f"got {key!r}; or leave it out to limit the whole flow"
            )
        self._concurrency = ConcurrencyLimit(key=key, limit=limit)
        return self

    # --- nodes ------------------------------------------------------------------------------

    def task(
        self,
        id: str,
        handler: Handler,
        *,
        params: Mapping[str, JSONValue] | None = None,
        next: str | None = None,
        timeout: Duration | None = None,
        retry_times: int | None = None,
        error_handler: OnFailure | None = None,
        timeout_handler: OnFailure | None = None,
        rate_limit: RateLimit | None = None,
    ) -> Self:
        """Call ``handler(params, ctx)``; ``timeout`` is per attempt (at most 24 h),
        ``retry_times`` the retries after the first attempt (0-100; None: the deployment's);
        ``rate_limit`` e.g. ``{"key": "${customer}", "per_second": 10}`` (docs/flows.md)."""
        where = self._where(id)
        fields: dict[str, Any] = {
            "handler": handler if isinstance(handler, str) else _reference(handler, where),
            "params": _plain(params or {}, f"{where} params"),
            "timeout": _duration(timeout),
            "retry_times": retry_times,
            "rate_limit": _rate_limit(rate_limit, where),
        }
        fields |= _handlers(where, error_handler=error_handler, timeout_handler=timeout_handler)
        return self._add(TaskNode, id, fields, next=next)

    def if_(
        self,
        id: str,
        condition: str,
        *,
        then: str,
        else_: str,
        error_handler: OnFailure | None = None,
    ) -> Self:
        """Go to ``then`` when the expression ``condition`` is true, else to ``else_``."""
        fields = {"condition": condition, "then": then, "else_": else_}
        fields |= _handlers(self._where(id), error_handler=error_handler)
        return self._add(IfNode, id, fields)

    def switch(
        self,
        id: str,
        cases: SwitchCases,
        *,
        default: str | None = None,
        error_handler: OnFailure | None = None,
    ) -> Self:
        """Go to the node of the first case whose condition is true; else to ``default``
        (without one, no match fails the execution with ``BranchMissError``)."""
        where = self._where(id)
        fields = {"cases": _cases(cases, where), "default": default}
        fields |= _handlers(where, error_handler=error_handler)
        return self._add(SwitchNode, id, fields)

    def event(
        self,
        id: str,
        event_type: str,
        *,
        filter: Mapping[str, JSONValue] | None = None,
        timeout: Duration | None = None,
        timeout_next: str | None = None,
        next: str | None = None,
        timeout_handler: OnFailure | None = None,
    ) -> Self:
        """Wait for an event of ``event_type`` whose data contains ``filter``; ``timeout``
        (at most 366 days) ends the wait at ``timeout_next``, or by ``timeout_handler``."""
        where = self._where(id)
        fields: dict[str, Any] = {
            "event_type": event_type,
            "filter": _plain(filter or {}, f"{where} filter"),
            "timeout": _duration(timeout),
            "timeout_next": timeout_next,
        }
        fields |= _handlers(where, timeout_handler=timeout_handler)
        return self._add(EventNode, id, fields, next=next)

    def http(
        self,
        id: str,
        url: str,
        *,
        method: str = "GET",
        headers: Mapping[str, JSONValue] | None = None,
        body: JSONValue = None,
        expect: Sequence[int | str] | None = None,
        block_private_networks: bool | None = None,
        next: str | None = None,
        timeout: Duration | None = None,
        retry_times: int | None = None,
        error_handler: OnFailure | None = None,
        timeout_handler: OnFailure | None = None,
        rate_limit: RateLimit | None = None,
    ) -> Self:
        """Call ``method url``; the result is ``{"status", "headers", "body"}`` (a JSON body
        parsed). ``url``, ``headers`` and ``body`` are templates like a task's params;
        ``expect`` the statuses that count as success (codes, classes like ``"2xx"``; default
        every 2xx); ``timeout`` per attempt (default 30 s); 429, 5xx and connection failures
        are retried, other statuses go to ``error_handler``."""
        where = self._where(id)
        fields: dict[str, Any] = {
            "method": method,
            "url": url,
            "headers": _plain(headers or {}, f"{where} headers"),
            "body": _plain(body, f"{where} body"),
            "expect": None if expect is None else list(expect),
            "block_private_networks": block_private_networks,
            "timeout": _duration(timeout),
            "retry_times": retry_times,
            "rate_limit": _rate_limit(rate_limit, where),
        }
        fields |= _handlers(where, error_handler=error_handler, timeout_handler=timeout_handler)
        return self._add(HttpNode, id, fields, next=next)

    def sleep(self, id: str, duration: Duration, *, next: str | None = None) -> Self:
        """Wait ``duration`` (at most 366 days), then go on."""
        return self._add(SleepNode, id, {"duration": _duration(duration)}, next=next)

    def parallel(self, id: str, branches: Sequence[str], *, join: str, wait: str = "all") -> Self:
        """Run ``branches`` (their start nodes) side by side until each reaches ``join``,
        which runs once: after every branch (``wait="all"``) or the first (``"any"``)."""
        fields = {"branches": list(branches), "join": join, "wait": wait}
        return self._add(ParallelNode, id, fields)

    def subflow(
        self,
        id: str,
        flow_id: str,
        *,
        version: str | None = None,
        input: Mapping[str, JSONValue] | None = None,
        on_parent_end: str = "cancel",
        next: str | None = None,
        error_handler: OnFailure | None = None,
    ) -> Self:
        """Start a child execution of ``flow_id`` with ``input`` (templates), wait for it to
        end and take its result; its failure goes to ``error_handler``."""
        fields: dict[str, Any] = {
            "flow_id": flow_id,
            "version": version,
            "input": _plain(input or {}, f"{self._where(id)} input"),
            "on_parent_end": on_parent_end,
        }
        fields |= _handlers(self._where(id), error_handler=error_handler)
        return self._add(SubflowNode, id, fields, next=next)

    def map(
        self,
        id: str,
        items: str,
        flow_id: str,
        *,
        version: str | None = None,
        concurrency: int = 10,
        on_item_error: str = "fail",
        on_parent_end: str = "cancel",
        next: str | None = None,
        error_handler: OnFailure | None = None,
    ) -> Self:
        """Start a child execution of ``flow_id`` per item of the list the expression
        ``items`` yields (input ``{"item", "index"}``), ``concurrency`` at a time; the
        result is their results in item order (``on_item_error="collect"``: one
        ``{"ok", "result" | "error"}`` per item)."""
        fields: dict[str, Any] = {
            "items": items,
            "flow_id": flow_id,
            "version": version,
            "concurrency": concurrency,
            "on_item_error": on_item_error,
            "on_parent_end": on_parent_end,
        }
        fields |= _handlers(self._where(id), error_handler=error_handler)
        return self._add(MapNode, id, fields, next=next)

    def end(
        self, id: str, output: str | None = None, *, error_handler: OnFailure | None = None
    ) -> Self:
        """End the execution; its result is the expression ``output`` (default: the result of
        the node that ran last)."""
        fields = {"output": output} | _handlers(self._where(id), error_handler=error_handler)
        return self._add(EndNode, id, fields)

    @staticmethod
    def continue_with(default: JSONValue) -> ContinueWith:
        """The ``continue_with`` strategy: ``error_handler=Flow.continue_with({"ok": False})``."""
        return ContinueWith(default)

    # --- the document -----------------------------------------------------------------------

    @property
    def flow_id(self) -> str:
        return self._flow_id

    @property
    def version(self) -> str:
        return self._version

    @property
    def start(self) -> str | None:
        """``start=`` when given, else the first node added (None while there is none)."""
        return self._start if self._start is not None else next(iter(self._nodes), None)

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def build(self) -> Definition:
        """The validated definition (``plaita.domain.flow.Flow``): the graph is checked (start,
        targets, a ``next`` left to a node never added) and every expression parsed."""
        start = self.start
        if start is None:
            raise MissingStartNodeError(
                f"flow {self._flow_id!r} has no nodes: add one (the first node added is the start)"
            )
        if self._awaiting_next is not None:
            node = self._nodes[self._awaiting_next]
            raise InvalidFlowDocumentError(
                f"flow {self._flow_id!r} node {node.id!r} ({node.type}) has no next: next=None "
                "leads to the node added after it, and none was; add that node, or pass "
                "next='<node id>'"
            )
        definition = Definition.from_document(
            {
                "flow_id": self._flow_id,
                "version": self._version,
                "start": start,
                "timeout": self._timeout,
                **(
                    {}
                    if self._concurrency is None
                    else {"concurrency": self._concurrency.model_dump(exclude_none=True)}
                ),
                "nodes": [
                    node.model_dump(mode="json", by_alias=True) for node in self._nodes.values()
                ],
            }
        )
        compile_flow_expressions(definition)
        return definition

    def to_dict(self) -> dict[str, Any]:
        """The E1a document in canonical form (see the module's docstring); validates first."""
        return canonical_document(self.build().document)

    def to_json(self, *, indent: int | None = None) -> str:
        """``to_dict()`` as JSON text, fields in document order."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_definition(cls, definition: Definition) -> Self:
        """A builder holding ``definition``'s document, e.g. to add nodes to a loaded flow."""
        document = definition.document
        builder = cls(document.flow_id, document.version, document.timeout, start=document.start)
        builder._nodes = {node.id: node for node in document.nodes}
        builder._concurrency = document.concurrency
        return builder

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Self:
        """Load an E1a document, validated exactly as ``plaita flows register`` does."""
        if not isinstance(document, Mapping):
            raise InvalidFlowDocumentError("flow definition must be a JSON object")
        raw = _plain(document, f"flow {document.get('flow_id', '<no flow_id>')!r}")
        definition = Definition.from_document(raw)
        compile_flow_expressions(definition)
        return cls.from_definition(definition)

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        definition = Definition.from_json(text)
        compile_flow_expressions(definition)
        return cls.from_definition(definition)

    def __repr__(self) -> str:
        nodes = ", ".join(f"{node.id}:{node.type}" for node in self._nodes.values())
        parts = [f"plaita.Flow {self._flow_id!r} version={self._version!r}"]
        if self._timeout is not None:
            parts.append(f"timeout={self._timeout!r}")
        parts.append(f"start={self.start!r} nodes=[{nodes}]")
        if self._awaiting_next is not None:
            parts.append(f"({self._awaiting_next!r} leads to the next node added)")
        return f"<{' '.join(parts)}>"

    # --- internals --------------------------------------------------------------------------

    def _where(self, node_id: object) -> str:
        return f"flow {self._flow_id!r} node {node_id!r}"

    def _add(
        self, model: type[_N], node_id: str, fields: dict[str, Any], *, next: str | None = None
    ) -> Self:
        chained = "next" in model.model_fields and next is None
        if "next" in model.model_fields:
            fields["next"] = "" if chained else next  # the empty target is filled in below
        node = _validate(
            model, self._where(node_id), {"id": node_id, "type": _type(model), **fields}
        )
        if node.id in self._nodes:
            raise DuplicateNodeIdError(
                f"{self._where(node.id)}: the id is already used by the "
                f"{self._nodes[node.id].type} node added earlier; give each node its own id"
            )
        check_node(self._flow_id, node)
        if self._awaiting_next is not None:
            waiting = self._nodes[self._awaiting_next]
            self._nodes[waiting.id] = waiting.model_copy(update={"next": node.id})
        self._nodes[node.id] = node
        self._awaiting_next = node.id if chained else None
        return self


def canonical_document(document: FlowDocument) -> dict[str, Any]:
    """``document`` as the compact E1a dict: defaults left out, fields in document order."""
    canonical: dict[str, Any] = {"flow_id": document.flow_id}
    if document.version != _DEFAULT_VERSION:
        canonical["version"] = document.version
    canonical["start"] = document.start
    if document.timeout is not None:
        canonical["timeout"] = document.timeout
    if document.concurrency is not None:
        canonical["concurrency"] = document.concurrency.model_dump(exclude_none=True)
    canonical["nodes"] = [_canonical_node(node) for node in document.nodes]
    return canonical


# --- helpers ---------------------------------------------------------------------------------


def _reference(handler: object, where: str) -> str:
    if not callable(handler):
        raise InvalidHandlerReferenceError(
            f"{where}: handler must be a function or a 'module:function' string, "
            f"got {type(handler).__name__} {handler!r}"
        )
    return handler_reference(handler, where=where)


def _type(model: type[BaseNode]) -> str:
    node_types: tuple[str, ...] = getattr(model.model_fields["type"].annotation, "__args__", ())
    return node_types[0]


def _validate(model: type[_N], where: str, fields: dict[str, Any]) -> _N:
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()
        )
        raise InvalidFlowDocumentError(f"{where} ({_type(model)}): {problems}") from None


def _rate_limit(value: RateLimit | None, where: str) -> Any:
    return None if value is None else _plain(value, f"{where} rate_limit")


def _handlers(where: str, **given: OnFailure | None) -> dict[str, Any]:
    return {
        field: _strategy(value, f"{where} {field}")
        for field, value in given.items()
        if value is not None
    }


def _strategy(value: object, where: str) -> dict[str, Any]:
    if isinstance(value, ContinueWith):
        return {"strategy": "continue_with", "default": _plain(value.default, where)}
    if isinstance(value, str):
        return {"strategy": value}
    if isinstance(value, Mapping):
        spec = dict(value)
        if "default" in spec:
            spec["default"] = _plain(spec["default"], where)
        return spec
    raise InvalidFlowDocumentError(
        f"{where}: expected 'abort', 'continue', Flow.continue_with(default) or "
        f"{{'strategy': ..., 'default': ...}}, got {value!r}"
    )


def _cases(cases: object, where: str) -> list[dict[str, Any]]:
    if isinstance(cases, Mapping):
        pairs: list[object] = list(cases.items())
    elif isinstance(cases, Sequence) and not isinstance(cases, str | bytes):
        pairs = list(cases)
    else:
        pairs = [cases]
    shaped = []
    for pair in pairs:
        if not (
            isinstance(pair, Sequence) and not isinstance(pair, str | bytes) and len(pair) == 2
        ):
            raise InvalidFlowDocumentError(
                f"{where} cases: expected {{condition: node id}} or (condition, node id) pairs, "
                f"got {pair!r}"
            )
        shaped.append({"when": pair[0], "next": pair[1]})
    return shaped


def _duration(value: Duration | None) -> int | float | str | None:
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    return value


def _plain(value: object, where: str) -> Any:
    """``value`` as plain JSON (dicts, lists, str, int, float, bool, None), or a named error:
    what the builder emits must be exactly what a JSON document could have said."""
    try:
        return _plain_value(value, where)
    except RecursionError:
        raise InvalidFlowDocumentError(f"{where}: the value is nested too deeply") from None


def _plain_value(value: object, where: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)  # an IntEnum or a StrEnum becomes its plain value
    if isinstance(value, Mapping):
        plain = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidFlowDocumentError(
                    f"{where}: key {key!r} is not a string; JSON objects have string keys"
                )
            plain[str(key)] = _plain_value(item, where)
        return plain
    if isinstance(value, list | tuple):
        return [_plain_value(item, where) for item in value]
    raise InvalidFlowDocumentError(
        f"{where}: {value!r} ({type(value).__name__}) is not JSON; use dicts, lists, strings, "
        "numbers, booleans and None"
    )


_COMMON_FIELDS = ("timeout", "retryTimes", "errorHandler", "timeoutHandler")


def _canonical_node(node: BaseNode) -> dict[str, Any]:
    dumped = node.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    common = {name: dumped.pop(name) for name in _COMMON_FIELDS if name in dumped}
    for alias, strategy in (
        ("errorHandler", node.error_handler),
        ("timeoutHandler", node.timeout_handler),
    ):
        common.pop(alias, None)
        if strategy.strategy != "abort" or strategy.default is not None:
            common[alias] = _canonical_strategy(strategy)
    return {**dumped, **common}


def _canonical_strategy(strategy: FailureStrategy) -> dict[str, Any]:
    dumped = strategy.model_dump(mode="json")
    if strategy.strategy != "continue_with" and strategy.default is None:
        del dumped["default"]
    return dumped
