"""The flow graph: node types, validation with named errors, fingerprints (E1, E1a)."""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from plaita.domain.branch_regions import branch_regions
from plaita.domain.children import MAX_MAP_CONCURRENCY, OnItemError
from plaita.domain.durations import MAX_WAIT_MS, parse_duration_ms
from plaita.domain.errors import (
    DuplicateNodeIdError,
    EmptyEventTypeError,
    InvalidChildNodeError,
    InvalidConcurrencyError,
    InvalidFlowDocumentError,
    InvalidForkError,
    InvalidHandlerReferenceError,
    InvalidHttpNodeError,
    MissingStartNodeError,
    PayloadNotUnicodeError,
    UnknownNodeTargetError,
)
from plaita.domain.http_calls import (
    ExpectedStatuses,
    check_header_name,
    check_method,
    check_url,
)
from plaita.domain.ids import id_problem, validate_flow_id
from plaita.domain.limits import check_unicode
from plaita.domain.rate_limits import RateLimitSpec, rule_of
from plaita.domain.slots import check_limit
from plaita.domain.tokens import WaitFor

JSON = Any
# Strict: JSON `true` must not become 1 ms or one retry on its way through pydantic.
Duration = StrictInt | StrictFloat | StrictStr


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class FailureStrategy(_Document):
    """What a node does once its attempts are used up: abort, continue, continue_with."""

    strategy: Literal["abort", "continue", "continue_with"] = "abort"
    default: JSON = None


class BaseNode(_Document):
    id: str = Field(min_length=1)
    type: str
    timeout: Duration | None = None
    #: Retries after the first attempt; None = the deployment's default retries (E15).
    retry_times: StrictInt | None = Field(default=None, ge=0, le=100, alias="retryTimes")
    error_handler: FailureStrategy = Field(default_factory=FailureStrategy, alias="errorHandler")
    timeout_handler: FailureStrategy = Field(
        default_factory=FailureStrategy, alias="timeoutHandler"
    )

    def targets(self) -> tuple[str, ...]:
        return ()


class _RateLimitedNode(BaseNode):
    """A node that may carry a ``rate_limit`` (W23): at most ``burst`` runs at once and
    ``per_second`` after, per key (``rate_limits.py``)."""

    # Left out of dumps when absent: a flow written before rate limits keeps its fingerprint.
    rate_limit: RateLimitSpec | None = Field(default=None, exclude_if=lambda value: value is None)


class TaskNode(_RateLimitedNode):
    type: Literal["task"]
    handler: str
    params: dict[str, JSON] = Field(default_factory=dict)
    next: str

    def targets(self) -> tuple[str, ...]:
        return (self.next,)

    @property
    def handler_module(self) -> str:
        return self.handler.partition(":")[0]


class IfNode(BaseNode):
    type: Literal["if"]
    condition: str = Field(min_length=1)
    then: str
    else_: str = Field(alias="else")

    def targets(self) -> tuple[str, ...]:
        return (self.then, self.else_)


class SwitchCase(_Document):
    when: str = Field(min_length=1)
    next: str


class SwitchNode(BaseNode):
    type: Literal["switch"]
    cases: list[SwitchCase] = Field(min_length=1)
    default: str | None = None

    def targets(self) -> tuple[str, ...]:
        extra = (self.default,) if self.default is not None else ()
        return (*(case.next for case in self.cases), *extra)


class EventNode(BaseNode):
    type: Literal["event"]
    event_type: str
    filter: dict[str, JSON] = Field(default_factory=dict)
    timeout_next: str | None = None
    next: str

    def targets(self) -> tuple[str, ...]:
        extra = (self.timeout_next,) if self.timeout_next is not None else ()
        return (self.next, *extra)


class SleepNode(BaseNode):
    type: Literal["sleep"]
    duration: Duration
    next: str

    def targets(self) -> tuple[str, ...]:
        return (self.next,)


class HttpNode(_RateLimitedNode):
    """Call an HTTP endpoint; the result is ``{status, headers, body}`` (E11). ``url``,
    ``headers`` and ``body`` are templates like a task's params; ``expect`` lists the
    statuses that count as success (codes and classes such as ``"2xx"``; default every 2xx);
    ``blockPrivateNetworks: true`` refuses private targets for this node even where the
    deployment allows them."""

    type: Literal["http"]
    method: str = "GET"
    url: str = Field(min_length=1)
    headers: dict[str, JSON] = Field(default_factory=dict)
    body: JSON = None
    expect: list[StrictInt | StrictStr] | None = None
    block_private_networks: StrictBool | None = Field(default=None, alias="blockPrivateNetworks")
    next: str

    def targets(self) -> tuple[str, ...]:
        return (self.next,)


class ParallelNode(BaseNode):
    """Run ``branches`` side by side, each from its start node until it reaches ``join``;
    the join runs once, after every branch arrived (``wait: all``) or the first one
    (``wait: any``: the others are cancelled). Each branch's node results are visible after
    the join; a branch may wait for its own event or timer while the others go on (E12)."""

    type: Literal["parallel"]
    branches: list[str] = Field(min_length=2)
    join: str
    wait: WaitFor = WaitFor.ALL

    def targets(self) -> tuple[str, ...]:
        return (*self.branches, self.join)


class OnParentEnd(enum.StrEnum):
    """What a parent's cancel or delete does to the children still running (E13, E14)."""

    CANCEL = "cancel"
    ABANDON = "abandon"


class SubflowNode(BaseNode):
    """Start one child execution of ``flow_id`` (``version``: the latest when absent) with
    ``input`` rendered as a template, wait for it to end, and take its output as the node's
    result; its error or cancel is this node's failure, through the ``errorHandler`` (E13)."""

    type: Literal["subflow"]
    flow_id: str = Field(min_length=1)
    version: str | None = Field(default=None, min_length=1)
    input: dict[str, JSON] = Field(default_factory=dict)
    on_parent_end: OnParentEnd = OnParentEnd.CANCEL
    next: str

    def targets(self) -> tuple[str, ...]:
        return (self.next,)


class MapNode(BaseNode):
    """Start one child execution of ``flow_id`` per item of the list ``items`` evaluates
    to, with input ``{"item": ..., "index": ...}``, at most ``concurrency`` at a time; the
    result is the children's outputs in item order (E14). ``on_item_error``: ``fail`` ends
    the node at the first failed item and cancels the rest; ``collect`` records each item as
    ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": ...}`` and goes on."""

    type: Literal["map"]
    items: str = Field(min_length=1)
    flow_id: str = Field(min_length=1)
    version: str | None = Field(default=None, min_length=1)
    concurrency: StrictInt = 10
    on_item_error: OnItemError = OnItemError.FAIL
    on_parent_end: OnParentEnd = OnParentEnd.CANCEL
    next: str

    def targets(self) -> tuple[str, ...]:
        return (self.next,)


#: The node types that start child executions.
ChildNode = SubflowNode | MapNode


class EndNode(BaseNode):
    type: Literal["end"]
    output: str | None = None


Node = Annotated[
    TaskNode
    | IfNode
    | SwitchNode
    | EventNode
    | SleepNode
    | HttpNode
    | SubflowNode
    | MapNode
    | ParallelNode
    | EndNode,
    Field(discriminator="type"),
]
_NODE_LIST = TypeAdapter(list[Node])


class ConcurrencyLimit(_Document):
    """At most ``limit`` executions of the flow with the same ``key`` (an expression over
    the input; absent: the whole flow is one key) run at once; the others wait (E1a)."""

    key: str | None = None
    #: Checked by ``check_concurrency`` so a wrong value gets its own named error.
    limit: JSON = None


class FlowDocument(_Document):
    flow_id: str = Field(min_length=1)
    version: str = Field(default="1", min_length=1)
    start: str = Field(min_length=1)
    timeout: Duration | None = None
    nodes: list[Node] = Field(min_length=1)
    concurrency: ConcurrencyLimit | None = None


class Flow:
    """A validated flow definition. Construct with ``Flow.from_document`` or ``Flow.from_json``."""

    __slots__ = ("_by_id", "_subgraphs", "document", "fingerprint", "timeout_ms")

    def __init__(self, document: FlowDocument) -> None:
        validate_flow_id(document.flow_id)
        self.document = document
        self._by_id = _index_nodes(document)
        _check_graph(document, self._by_id)
        check_concurrency(document)
        self.timeout_ms = (
            None
            if document.timeout is None
            else parse_duration_ms(document.timeout, field="flow.timeout", maximum_ms=MAX_WAIT_MS)
        )
        # A flow without a concurrency limit keeps the fingerprint it had before the field
        # existed: a re-registration of the same version must not look like a change.
        unset = {"concurrency"} if document.concurrency is None else None
        try:
            dumped = document.model_dump(mode="json", by_alias=True, exclude=unset)
        except UnicodeEncodeError:
            # A lone surrogate in an object key: the python form holds the same values,
            # and the check below names the character.
            dumped = document.model_dump(by_alias=True, exclude=unset)
        self.fingerprint = _sha256(dumped, flow_id=document.flow_id)
        self._subgraphs: dict[str, str] = {}

    @classmethod
    def from_document(cls, raw: Mapping[str, JSON]) -> Flow:
        try:
            document = FlowDocument.model_validate(raw)
        except ValidationError as exc:
            raise InvalidFlowDocumentError(_describe(exc, raw)) from None
        return cls(document)

    @classmethod
    def from_json(cls, text: str | bytes) -> Flow:
        try:
            raw = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidFlowDocumentError(f"flow definition is not valid JSON: {exc}") from None
        except RecursionError:
            raise InvalidFlowDocumentError("flow definition is nested too deeply") from None
        if not isinstance(raw, dict):
            raise InvalidFlowDocumentError("flow definition must be a JSON object")
        return cls.from_document(raw)

    @property
    def flow_id(self) -> str:
        return self.document.flow_id

    @property
    def version(self) -> str:
        return self.document.version

    @property
    def start_node(self) -> BaseNode:
        return self._by_id[self.document.start]

    def node(self, node_id: str) -> BaseNode:
        return self._by_id[node_id]

    def has_node(self, node_id: str) -> bool:
        return node_id in self._by_id

    def nodes(self) -> Iterator[BaseNode]:
        return iter(self._by_id.values())

    def handler_modules(self) -> frozenset[str]:
        return frozenset(n.handler_module for n in self.nodes() if isinstance(n, TaskNode))

    def to_document(self) -> dict[str, JSON]:
        return self.document.model_dump(mode="json", by_alias=True, exclude_none=True)

    def subgraph_fingerprint(self, node_id: str) -> str:
        """sha256 of the nodes reachable from ``node_id``: drift elsewhere does not matter (W7)."""
        cached = self._subgraphs.get(node_id)
        if cached is None:
            cached = self._subgraphs[node_id] = self._hash_subgraph(node_id)
        return cached

    def _hash_subgraph(self, node_id: str) -> str:
        seen: dict[str, BaseNode] = {}
        stack = [node_id]
        while stack:
            current = stack.pop()
            if current in seen or current not in self._by_id:
                continue
            seen[current] = self._by_id[current]
            stack.extend(seen[current].targets())
        return _sha256(
            [seen[k].model_dump(mode="json", by_alias=True) for k in sorted(seen)],
            flow_id=self.flow_id,
        )


def _index_nodes(document: FlowDocument) -> dict[str, BaseNode]:
    by_id: dict[str, BaseNode] = {}
    for node in document.nodes:
        if node.id in by_id:
            raise DuplicateNodeIdError(
                f"flow {document.flow_id!r}: node id {node.id!r} is used more than once"
            )
        by_id[node.id] = node
    return by_id


def _check_graph(document: FlowDocument, by_id: Mapping[str, BaseNode]) -> None:
    flow = document.flow_id
    if document.start not in by_id:
        raise MissingStartNodeError(f"flow {flow!r}: start node {document.start!r} does not exist")
    for node in by_id.values():
        for target in node.targets():
            if target not in by_id:
                raise UnknownNodeTargetError(
                    f"flow {flow!r}: node {node.id!r} points at unknown node {target!r}"
                )
        check_node(flow, node)
    _check_forks(by_id)


#: The node types a branch of a parallel node may hold.
_BRANCH_NODE_TYPES = frozenset({"task", "http", "if", "switch", "event", "sleep"})


def _check_forks(by_id: Mapping[str, BaseNode]) -> None:
    """Each parallel node's branches obey the fork's rules (E12): reach the join, never
    cross, no node in two branches, and hold only nodes a branch can run."""
    graph = {node_id: node.targets() for node_id, node in by_id.items()}
    for node in by_id.values():
        if not isinstance(node, ParallelNode):
            continue
        regions = branch_regions(graph, fork=node.id, branches=node.branches, join=node.join)
        for start, region in regions.items():
            for member in sorted(region):
                kind = by_id[member].type
                if kind not in _BRANCH_NODE_TYPES:
                    raise InvalidForkError(
                        f"parallel node {node.id!r}: branch {start!r} holds {kind} node "
                        f"{member!r}; a branch holds only "
                        f"{', '.join(sorted(_BRANCH_NODE_TYPES))} nodes"
                    )


def check_node(flow_id: str, node: BaseNode) -> None:
    """The rules one node obeys on its own (durations, event type, handler reference), each a
    named error; the graph's rules (targets, start) need the whole flow."""
    where = f"flow {flow_id!r} node {node.id!r}"
    if node.timeout is not None:
        if isinstance(node, EventNode):
            parse_duration_ms(node.timeout, field=f"{where} timeout", maximum_ms=MAX_WAIT_MS)
        else:
            parse_duration_ms(node.timeout, field=f"{where} timeout")
    if isinstance(node, EventNode) and not node.event_type.strip():
        raise EmptyEventTypeError(f"{where}: event_type must not be empty")
    if isinstance(node, SleepNode):
        parse_duration_ms(node.duration, field=f"{where} duration", maximum_ms=MAX_WAIT_MS)
    if isinstance(node, HttpNode):
        _check_http(where, node)
    if isinstance(node, SubflowNode | MapNode):
        _check_children(where, node)
    if isinstance(node, TaskNode | HttpNode) and node.rate_limit is not None:
        rule_of(node.rate_limit, where=where)
    if isinstance(node, TaskNode):
        module, sep, function = node.handler.partition(":")
        if not (sep and module and function):
            raise InvalidHandlerReferenceError(
                f"{where}: handler {node.handler!r} must be written as 'module:function'"
            )


def check_concurrency(document: FlowDocument) -> None:
    """A flow's ``concurrency``: a limit from 1 to 10,000, and a key that is not blank."""
    concurrency = document.concurrency
    if concurrency is None:
        return
    where = f"flow {document.flow_id!r} concurrency"
    check_limit(concurrency.limit, where=where)
    if concurrency.key is not None and not concurrency.key.strip():
        raise InvalidConcurrencyError(
            f"{where}: key must be a template over the input, such as '${{customer}}', "
            "or be left out to limit the whole flow"
        )


def _check_children(where: str, node: ChildNode) -> None:
    problems = [id_problem(node.flow_id, f"flow_id {node.flow_id!r}")]
    if isinstance(node, MapNode):
        if not 1 <= node.concurrency <= MAX_MAP_CONCURRENCY:
            problems.append(
                f"concurrency must be 1 to {MAX_MAP_CONCURRENCY}, got {node.concurrency}"
            )
        if not node.items.strip():
            problems.append("items must be an expression that yields a list")
    found = [problem for problem in problems if problem is not None]
    if found:
        raise InvalidChildNodeError(f"{where}: {'; '.join(found)}")


def _check_http(where: str, node: HttpNode) -> None:
    problems = [check_method(node.method), *(check_header_name(n) for n in node.headers)]
    if "${" not in node.url:  # a templated URL is checked once rendered, at run time
        problems.append(check_url(node.url))
    try:
        ExpectedStatuses.parse(node.expect)
    except ValueError as exc:
        problems.append(str(exc))
    found = [problem for problem in problems if problem is not None]
    if found:
        raise InvalidHttpNodeError(f"{where}: {'; '.join(found)}")


def _sha256(value: JSON, *, flow_id: str) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        check_unicode(canonical, field="the definition")
    except PayloadNotUnicodeError as exc:
        raise InvalidFlowDocumentError(
            f"flow {flow_id!r} is not a valid definition: {exc}"
        ) from None
    return hashlib.sha256(canonical.encode()).hexdigest()


def _describe(exc: ValidationError, raw: Mapping[str, JSON]) -> str:
    flow = raw.get("flow_id", "<no flow_id>")
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<document>'}: {err['msg']}"
        for err in exc.errors()
    )
    return f"flow {flow!r} is not a valid definition: {problems}"
