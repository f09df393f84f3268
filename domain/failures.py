"""Flow and node failures: the exceptions handlers raise and how each one is classified (E3, E8).

Handlers signal intent by raising ``TransientNodeError`` (retry me) or
``DeterministicNodeError`` (retrying cannot help). Unknown exceptions count as transient; a
plain ``ValueError`` counts as deterministic (E3).
"""

from __future__ import annotations

import enum

from plaita.domain.errors import FlowDefinitionError, PlaitaError

CODE_DETERMINISTIC = 1001
CODE_TRANSIENT = 1002
CODE_TRANSIENT_RESOURCE = 1003
CODE_FLOW_ERROR = -500
CODE_TIMEOUT = -408
CODE_CANCELLED = -499
CODE_BRANCH_MISS = -404


class FlowExecutionException(PlaitaError):
    """A flow failed; ``code`` says how, ``node_id`` where."""

    code = CODE_FLOW_ERROR

    def __init__(self, message: str, *, node_id: str | None = None, code: int | None = None):
        super().__init__(message)
        self.message = message
        self.node_id = node_id
        if code is not None:
            self.code = code


class FlowErrorException(FlowExecutionException):
    """The single error shape of distributed mode and the wrapper for unknown errors (E8)."""


class NodeExecutionError(FlowExecutionException):
    """A node's handler failed and its errorHandler said abort."""


class NodeRetryRequested(NodeExecutionError):
    """A node's attempt failed transiently with retries left, on a worker (E15).

    Raised instead of applying the errorHandler: the worker retries it durably, with a
    delayed copy of its carrier after ``delay_ms``. Its ``__cause__`` is the failure.
    """

    def __init__(self, message: str, *, node_id: str, attempt: int, delay_ms: int) -> None:
        super().__init__(message, node_id=node_id)
        self.attempt = attempt
        self.delay_ms = delay_ms


class BranchMissError(FlowExecutionException):
    """An if/switch node matched no branch and has no default (E7)."""

    code = CODE_BRANCH_MISS


class FlowTimeoutError(FlowExecutionException):
    """A node or the flow ran out of time."""

    code = CODE_TIMEOUT


class NodeTimeoutError(FlowTimeoutError):
    """A node's attempt exceeded its timeout and its timeoutHandler said abort."""


class ExecutionDeadlineError(FlowTimeoutError):
    """The execution's whole budget is spent; terminal, never retried (E5)."""


class ExecutionCancelledError(FlowExecutionException):
    """The execution was cancelled while a node ran."""

    code = CODE_CANCELLED


class NodeError(PlaitaError):
    """Raise from a handler to say how the failure should be treated."""

    code = CODE_TRANSIENT


class TransientNodeError(NodeError):
    """A failure that may pass: the node is retried within its budget."""

    code = CODE_TRANSIENT


class ResourceExhaustedNodeError(TransientNodeError):
    """A transient failure caused by a busy or rate-limited resource."""

    code = CODE_TRANSIENT_RESOURCE


class DeterministicNodeError(NodeError):
    """A failure that retrying cannot fix (bad input, bad configuration)."""

    code = CODE_DETERMINISTIC


class ResultLimitError(DeterministicNodeError):
    """A node's result, or a variable it set, is over the JSON depth or size limit: the same
    handler would produce it again, so it is not retried."""


class InvalidMapError(DeterministicNodeError):
    """A map node's list has more items than a map runs over, or its concurrency is out of
    bounds (E14): the same list fails the same way."""


class ChildExecutionError(DeterministicNodeError):
    """A subflow's child execution, or an item's child of a map under ``on_item_error:
    fail``, ended in error or was cancelled (E13, E14): the parent node fails with it, through
    its errorHandler."""


# --- the http node's failures (E11) ------------------------------------------------------


class HttpTargetBlockedError(DeterministicNodeError):
    """An http node's target is not one it may call: it resolves to an address the SSRF
    policy blocks, to none, or it redirected too often. Deterministic: the same call fails
    the same way, so it is never retried."""


class HttpRequestError(DeterministicNodeError):
    """An http node's rendered request cannot be sent: its URL is not an http(s) URL with a
    host, a header is not text, the body is not JSON-serialisable."""


class HttpConnectionError(TransientNodeError):
    """The connection to an http node's target could not be made or broke mid-response:
    transient, retried within the node's budget."""


class HttpTlsError(DeterministicNodeError):
    """An https target's certificate could not be verified for the URL's host name."""


class HttpResponseTooLargeError(DeterministicNodeError):
    """An http node's response body went over ``PLAITA_HTTP_MAX_RESPONSE_BYTES``; the rest
    was never read."""


class HttpResponseNotJsonError(DeterministicNodeError):
    """An http node's response says it is JSON (its content type) and is not."""


class HttpTransientStatusError(TransientNodeError):
    """An http node got 429 or a 5xx that its ``expect`` does not list: retried."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class HttpDeterministicStatusError(DeterministicNodeError):
    """An http node got a status that is neither expected nor transient (a 4xx other than
    429, a 3xx it did not follow): the same request gets the same answer."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class FailureKind(enum.Enum):
    TRANSIENT = "transient"
    DETERMINISTIC = "deterministic"
    TERMINAL = "terminal"


def classify_failure(error: BaseException) -> FailureKind:
    """Transient failures are retried; deterministic go to the errorHandler at once (E3)."""
    if isinstance(error, FlowTimeoutError | ExecutionCancelledError):
        return FailureKind.TERMINAL
    if isinstance(error, FlowDefinitionError):
        # An unknown or disallowed handler, a bad expression: retrying cannot fix the flow.
        return FailureKind.DETERMINISTIC
    if isinstance(error, NodeError):
        return (
            FailureKind.DETERMINISTIC if error.code == CODE_DETERMINISTIC else FailureKind.TRANSIENT
        )
    if isinstance(error, ValueError):
        return FailureKind.DETERMINISTIC
    return FailureKind.TRANSIENT


def backoff_seconds(retry_number: int) -> float:
    """Delay before retry ``retry_number`` (1-based): min(30 s, 1 s * 2^(n-1))."""
    return float(min(30, 2 ** max(0, retry_number - 1)))
