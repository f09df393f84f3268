"""Safe expressions for conditions and parameter templates (E2), on simpleeval.

Syntax is a Python expression subset (no assignments, imports, lambdas or dunder access).
Names: ``input``, ``vars``, ``NODE``, ``LAST_NODE``, ``BRANCH``, ``FLOW_ID``,
``EXECUTION_ID``, plus each input parameter and each variable by its own name. The older
``$NODE`` spelling is accepted (ADR 0003): a ``$`` before a name outside string literals is dropped.
Each distinct expression is parsed once per process and evaluated many times.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import simpleeval

from plaita.domain.errors import InvalidConcurrencyError, InvalidExpressionError
from plaita.domain.flow import EndNode, Flow, HttpNode, IfNode, SwitchNode, TaskNode
from plaita.domain.slots import key_value

JSON = Any

# simpleeval's defaults minus rand/randint: a condition must decide the same way when a
# step is replayed from its checkpoint.
_FUNCTIONS = {
    **{
        name: function
        for name, function in simpleeval.DEFAULT_FUNCTIONS.items()
        if name not in {"rand", "randint"}
    },
    "len": len,
    "min": min,
    "max": max,
    "abs": abs,
    "round": round,
    "bool": bool,
    "sum": sum,
    "any": any,
    "all": all,
}


class ExpressionEvaluationError(Exception):
    """An expression parsed but failed when evaluated (unknown name, type error …)."""


def strip_dollar_names(expression: str) -> str:
    out: list[str] = []
    quote: str | None = None
    escaped = False
    for i, char in enumerate(expression):
        if quote is not None:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
            continue
        if char in "'\"":
            quote = char
        elif (
            char == "$"
            and i + 1 < len(expression)
            and (expression[i + 1].isalpha() or expression[i + 1] == "_")
        ):
            continue
        out.append(char)
    return "".join(out)


@lru_cache(maxsize=4096)
def compile_expression(expression: str) -> ast.AST:
    """Parse once; ``InvalidExpressionError`` names the expression that does not parse."""
    try:
        parsed: ast.AST = simpleeval.SimpleEval.parse(strip_dollar_names(expression))
        return parsed
    except SyntaxError as exc:
        raise InvalidExpressionError(
            f"expression {expression!r} does not parse: {exc.msg}"
        ) from None
    except simpleeval.InvalidExpression as exc:  # e.g. an empty string (found by schemathesis)
        raise InvalidExpressionError(
            f"expression {expression!r} is not an expression: {exc}; write one, such as "
            "'$LAST_NODE', or leave the field out"
        ) from None


class _JsonEval(simpleeval.EvalWithCompoundTypes):  # type: ignore[misc]
    """Data before methods: ``$input.items`` is the object's key ``items``, never the
    mapping's ``items`` method (nor ``keys``, ``values``, ``get``...)."""

    def _eval_attribute(self, node: ast.Attribute) -> JSON:
        base = self._eval(node.value)
        if isinstance(base, Mapping) and node.attr in base and not node.attr.startswith("_"):
            return base[node.attr]
        # Evaluated once: the rest of the rules see the value, not the expression again.
        settled = ast.Attribute(value=ast.Constant(value=base), attr=node.attr, ctx=node.ctx)
        return super()._eval_attribute(settled)


def evaluate(expression: str, names: Mapping[str, JSON]) -> JSON:
    parsed = compile_expression(expression)
    evaluator = _JsonEval(names=dict(names), functions=_FUNCTIONS)
    try:
        return evaluator.eval(expression, previously_parsed=parsed)
    except simpleeval.InvalidExpression as exc:
        raise ExpressionEvaluationError(f"expression {expression!r}: {exc}") from None
    except (TypeError, KeyError, IndexError, ZeroDivisionError, AttributeError) as exc:
        raise ExpressionEvaluationError(
            f"expression {expression!r} failed: {type(exc).__name__}: {exc}"
        ) from None


def render_template(value: JSON, names: Mapping[str, JSON]) -> JSON:
    """Evaluate ``"${expr}"`` strings (typed result), interpolate ``"a ${expr} b"``, recurse."""
    if isinstance(value, str):
        return _render_string(value, names)
    if isinstance(value, Mapping):
        return {key: render_template(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [render_template(item, names) for item in value]
    return value


def _render_string(text: str, names: Mapping[str, JSON]) -> JSON:
    pieces = list(_template_pieces(text))
    if len(pieces) == 1 and pieces[0][0] == "expr":
        return evaluate(pieces[0][1], names)
    if all(kind == "text" for kind, _ in pieces):
        return text
    return "".join(
        piece if kind == "text" else str(evaluate(piece, names)) for kind, piece in pieces
    )


def _template_pieces(text: str) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    rest = text
    while (start := rest.find("${")) != -1:
        end = rest.find("}", start)
        if end == -1:
            break
        if start:
            pieces.append(("text", rest[:start]))
        pieces.append(("expr", rest[start + 2 : end].strip()))
        rest = rest[end + 1 :]
    if rest or not pieces:
        pieces.append(("text", rest))
    return pieces


def compile_flow_expressions(flow: Flow) -> None:
    """Parse every expression of ``flow`` so a bad one is refused at registration (E2)."""
    concurrency = flow.document.concurrency
    if concurrency is not None and concurrency.key is not None:
        try:
            _compile_template(concurrency.key)
        except InvalidExpressionError as exc:
            raise InvalidConcurrencyError(
                f"flow {flow.flow_id!r} concurrency key: {exc}; write a template over the "
                "input, such as '${customer}'"
            ) from None
    for node in flow.nodes():
        where = f"flow {flow.flow_id!r} node {node.id!r}"
        try:
            if isinstance(node, IfNode):
                compile_expression(node.condition)
            elif isinstance(node, SwitchNode):
                for case in node.cases:
                    compile_expression(case.when)
            elif isinstance(node, EndNode) and node.output is not None:
                compile_expression(node.output)
            elif isinstance(node, TaskNode):
                _compile_template(node.params)
            elif isinstance(node, HttpNode):
                _compile_template([node.url, node.headers, node.body])
            if isinstance(node, TaskNode | HttpNode) and node.rate_limit is not None:
                _compile_template(node.rate_limit.key)
        except InvalidExpressionError as exc:
            raise InvalidExpressionError(f"{where}: {exc}") from None


def concurrency_key(flow: Flow, execution_input: Mapping[str, JSON]) -> str | None:
    """The value of ``flow``'s concurrency key (a template, like a rate limit's key and a
    node's params) for an execution's input, as a table name
    (None: the flow has no limit; ``""``: the whole flow is one key). Sees only the input:
    the key stays the same for the execution's whole life."""
    concurrency = flow.document.concurrency
    if concurrency is None:
        return None
    if concurrency.key is None:
        return ""
    names = {**execution_input, "input": execution_input, "FLOW_ID": flow.flow_id}
    return key_value(render_template(concurrency.key, names))


def _compile_template(value: JSON) -> None:
    if isinstance(value, str):
        for kind, piece in _template_pieces(value):
            if kind == "expr":
                compile_expression(piece)
    elif isinstance(value, Mapping):
        for item in value.values():
            _compile_template(item)
    elif isinstance(value, list):
        for item in value:
            _compile_template(item)
