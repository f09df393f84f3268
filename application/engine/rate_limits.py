"""Rate limits of task and http nodes in the engine (W23): which bucket a node takes from,
and how a run in one process waits for a token.

On a worker the step loop's rate gate takes the token before the engine runs the node
(``use_cases/step/rate_gate.py``) and reschedules the carrier when none is free. A run in
this process (Normal and Generator modes, ``plaita run``) has no carrier to reschedule: it
sleeps until the token is due, against the execution's budget, then takes again.
"""

from __future__ import annotations

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.expressions import ExpressionEvaluationError, render_template
from plaita.domain.errors import InvalidExpressionError, RateLimitKeyError
from plaita.domain.failures import NodeExecutionError
from plaita.domain.flow import BaseNode, HttpNode, TaskNode
from plaita.domain.rate_limits import RateRule, key_value, node_bucket, rule_of


def rate_limit_of(flow_id: str, node: BaseNode) -> RateRule | None:
    """The rule of ``node``'s ``rate_limit``, None when it has none."""
    if not isinstance(node, TaskNode | HttpNode) or node.rate_limit is None:
        return None
    return rule_of(node.rate_limit, where=f"flow {flow_id!r} node {node.id!r}")


def rate_key(flow_id: str, node: TaskNode | HttpNode, context: ExecutionContext) -> str:
    """The bucket ``node`` takes from: its ``key`` template rendered like its params (over
    the input, variables and node results), or the node's own bucket without one."""
    template = None if node.rate_limit is None else node.rate_limit.key
    if template is None:
        return node_bucket(flow_id, node.id)
    try:
        return key_value(render_template(template, context.names()))
    except (ExpressionEvaluationError, InvalidExpressionError) as exc:
        raise RateLimitKeyError(
            f"rate_limit.key {template!r} of node {node.id!r} could not be rendered: {exc}; "
            "fix the expression or the data it reads"
        ) from None


def key_failure(node_id: str, error: RateLimitKeyError) -> NodeExecutionError:
    """The node's failure for a key that does not render, shaped as the runner shapes a bad
    params expression: the node failed, and why."""
    failure = NodeExecutionError(
        f"node {node_id!r} failed: {type(error).__name__}: {error}", node_id=node_id
    )
    failure.__cause__ = error
    return failure
