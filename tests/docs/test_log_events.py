"""docs/operations.md lists every log event the code emits, and nothing else.

Every log line plaita writes starts with ``event=<name>``. The names are read off the source
tree (``domain/ application/ adapters/ entrypoints/`` of this checkout) with :mod:`ast`;
nothing is imported, so the test reads the files next to it, not an installed package.

How a name reaches a log line, and how each way is read:

1. A string literal or f-string that starts with ``event=<name>``: a logger call's format
   string, or a message built elsewhere and logged as it is (``decision.log_warning``).
   Implicitly concatenated literals are one string to :mod:`ast`, so a name mentioned inside a
   message ("look for event=lease.keeper_slow_to_stop") is never taken for one.
2. Every logger call must log such a literal, or be one of ``PASS_THROUGH``: a call that logs
   a message built elsewhere, whose ``event=`` literal rule 1 already read. A new call of
   another shape fails the test, so no name can reach a log line unseen.
3. A name with a placeholder (``event=%s``, ``event=dlq_guard.%s``) is filled in at run time.
   A module constant passed for it (``BRANCH_MISS_EVENT``) is read directly; every other such
   site has a resolver in ``DYNAMIC`` that reads the values it can take off the code (an enum,
   the decisions that can reach the call). A new placeholder site fails the test until it has
   one.

Every emitted name must be listed in the first column of a table of the log events section
(a backticked name); every name listed there, and every ``event=<name>`` written anywhere in
the file, must be emitted.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE_PACKAGES = ("domain", "application", "adapters", "entrypoints")
OPERATIONS = REPO_ROOT / "docs" / "operations.md"
EVENTS_SECTION = "## 6. Log events"

_NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+")
_TOKEN = re.compile(r"event=([^\s:;,]*)")
_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
#: What a logger call is made on: ``log``, ``self._log``, ``audit``, ``logging.getLogger(…)``.
_LOGGER = re.compile(r"(?:.*\.)?_?(?:log|logger|audit)|logging(?:\.getLogger\(.*\))?")
_REQUIREMENT_ID = re.compile(r"\b(?:[EWVSCPRLK][0-9]+|I0)\b")

#: Logger calls whose message is built elsewhere from an ``event=`` literal (rule 2).
PASS_THROUGH = {
    # decision.log_warning: the f-strings of domain/resume.py.
    ("application/use_cases/step/resumes.py", "%s"),
}


@dataclass(frozen=True)
class Module:
    path: str  # relative to the repository root
    tree: ast.Module

    @functools.cached_property
    def nodes(self) -> tuple[ast.AST, ...]:
        return tuple(ast.walk(self.tree))


@dataclass(frozen=True)
class Site:
    module: Module
    line: int
    #: What follows ``event=``: a name, or a template with a placeholder (``dlq_guard.%s``).
    token: str
    #: The logger call whose format string it is, when it is one.
    call: ast.Call | None

    def __str__(self) -> str:
        return f"{self.module.path}:{self.line} event={self.token}"


@functools.cache
def modules() -> tuple[Module, ...]:
    found = []
    for package in SOURCE_PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            found.append(Module(relative, ast.parse(path.read_text(), filename=relative)))
    return tuple(found)


def module(path: str) -> Module:
    for candidate in modules():
        if candidate.path == path:
            return candidate
    raise AssertionError(f"{path} is gone: update the resolver that reads it")


# --- rule 1 and 2: event= literals and the logger calls ------------------------------------


def _is_logger_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _LEVELS
        and _LOGGER.fullmatch(ast.unparse(node.func.value)) is not None
    )


def _message(call: ast.Call) -> ast.expr | None:
    args = call.args[1:] if call.func.attr == "log" else call.args  # type: ignore[attr-defined]
    return args[0] if args else None


def _leading_token(node: ast.AST) -> str | None:
    """What follows a leading ``event=``; a trailing ``{}`` marks an f-string placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        match = _TOKEN.match(node.value)
        return None if match is None else match.group(1)
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            return None
        match = _TOKEN.match(first.value)
        if match is None:
            return None
        runs_on = match.end() == len(first.value) and len(node.values) > 1
        return match.group(1) + ("{}" if runs_on else "")
    return None


def sites() -> Iterator[Site]:
    for mod in modules():
        formats: dict[int, ast.Call] = {}
        for node in mod.nodes:
            if _is_logger_call(node):
                assert isinstance(node, ast.Call)
                message = _message(node)
                if message is not None:
                    formats[id(message)] = node
        # The literal parts of an f-string are read with it, never on their own.
        parts = {
            id(part)
            for node in mod.nodes
            if isinstance(node, ast.JoinedStr)
            for part in node.values
        }
        for node in mod.nodes:
            token = None if id(node) in parts else _leading_token(node)
            if token is not None:
                yield Site(mod, node.lineno, token, formats.get(id(node)))  # type: ignore[attr-defined]


def unnamed_logger_calls() -> list[str]:
    """Logger calls that log no ``event=`` literal and are not known pass-throughs (rule 2)."""
    unnamed = []
    for mod in modules():
        for node in mod.nodes:
            if not _is_logger_call(node):
                continue
            assert isinstance(node, ast.Call)
            message = _message(node)
            if message is not None and _leading_token(message) is not None:
                continue
            text = message.value if isinstance(message, ast.Constant) else None
            if (mod.path, text) not in PASS_THROUGH:
                unnamed.append(f"{mod.path}:{node.lineno} {ast.unparse(node)[:100]}")
    return unnamed


# --- rule 3: names filled in at run time --------------------------------------------------


def _placeholder_arg(site: Site) -> ast.expr | None:
    """The logger call's argument that fills the name's ``%s``."""
    if site.call is None or "%s" not in site.token:
        return None
    message = _message(site.call)
    assert isinstance(message, ast.Constant) and isinstance(message.value, str)
    before = message.value[: message.value.index("event=") + len("event=")]
    index = len(re.findall(r"%[^%]", before.replace("%%", "")))
    args = site.call.args
    offset = args.index(message) + 1
    return args[offset + index] if offset + index < len(args) else None


@functools.cache
def module_constants() -> dict[str, frozenset[str]]:
    """Module-level ``NAME = "text"`` of the whole tree, by name."""
    values: dict[str, set[str]] = {}
    for mod in modules():
        for node in mod.tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        values.setdefault(target.id, set()).add(node.value.value)
    return {name: frozenset(found) for name, found in values.items()}


def constant(name: str) -> str:
    found = module_constants().get(name, frozenset())
    assert len(found) == 1, f"constant {name} has the values {sorted(found)}: cannot tell which"
    return next(iter(found))


def _class(name: str) -> ast.ClassDef:
    found = [
        node
        for mod in modules()
        for node in mod.tree.body
        if isinstance(node, ast.ClassDef) and node.name == name
    ]
    assert len(found) == 1, f"class {name}: {len(found)} definitions"
    return found[0]


@functools.cache
def enum_members(name: str) -> dict[str, str]:
    """An enum's members and values: ``A = "a"``, or ``A = Other.B.value``."""
    members = {}
    for node in _class(name).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            members[node.targets[0].id] = value.value
        elif (
            isinstance(value, ast.Attribute)
            and value.attr == "value"
            and isinstance(value.value, ast.Attribute)
            and isinstance(value.value.value, ast.Name)
        ):
            members[node.targets[0].id] = enum_members(value.value.value.id)[value.value.attr]
    return members


def _calls(nodes: Iterable[ast.AST], name: str) -> Iterator[ast.Call]:
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
            yield node


def _arg(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _member(node: ast.expr | None, enum: str) -> str:
    """``Enum.MEMBER`` -> MEMBER."""
    assert isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name), (
        f"not an {enum} member: {node and ast.unparse(node)}"
    )
    assert node.value.id == enum, f"not an {enum} member: {ast.unparse(node)}"
    return node.attr


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function, not those of the functions defined inside it."""
    for child in ast.iter_child_nodes(function):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield child
            yield from _own_nodes(child)


def _returned_strings(function: ast.AST) -> set[str]:
    """String literals a function returns: ``"x"``, ``None, "x"``, ``"x" if … else None``."""
    found = set()
    for node in _own_nodes(function):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        parts = value.elts if isinstance(value, ast.Tuple) else [value]
        for part in parts:
            options = [part.body, part.orelse] if isinstance(part, ast.IfExp) else [part]
            found |= {
                o.value for o in options if isinstance(o, ast.Constant) and isinstance(o.value, str)
            }
    return found


def consume_events(site: Site) -> set[str]:
    """``event = consume.event or consume.action.value`` for a carrier this worker leaves
    pending: the event each non-executing ``ConsumeDecision`` names, else its action's value."""
    tree = module("domain/config_generations.py").tree
    actions = enum_members("ConsumeAction")
    names = set()
    for call in _calls(ast.walk(tree), "ConsumeDecision"):
        action = _member(_arg(call, 0, "action"), "ConsumeAction")
        if action in ("EXECUTE", "EXECUTE_LEGACY"):
            continue
        event = _arg(call, 1, "event")
        if event is None:
            names.add(actions[action])
        else:
            assert isinstance(event, ast.Name), ast.unparse(event)
            names.add(constant(event.id))
    return names


def guard_outcomes(site: Site) -> set[str]:
    """``dlq_guard.<outcome.reason>``: the reason the guard decided (``GuardDecision``), or the
    label one of the guard's actions returned instead (a refused write, a copy not made)."""
    decisions = module("domain/dead_letter.py").tree
    reasons = set()
    for call in _calls(ast.walk(decisions), "GuardDecision"):
        reason = _arg(call, 1, "reason")
        assert isinstance(reason, ast.Constant) and isinstance(reason.value, str), ast.unparse(call)
        reasons.add(reason.value)
    guard = site.module.tree
    methods = {f.name: f for f in _functions(guard)}
    perform = methods["_perform"]
    for node in _own_nodes(perform):
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("self._"):
            callee = ast.unparse(node.func).removeprefix("self.")
            if callee in methods:
                reasons |= _returned_strings(methods[callee])
    return {f"dlq_guard.{reason}" for reason in reasons}


def audited_actions(site: Site) -> set[str]:
    """``execution.<action>``: every ``OperatorAction`` passed to ``audit_result``."""
    values = enum_members("OperatorAction")
    names = set()
    for mod in modules():
        for call in _calls(mod.nodes, "audit_result"):
            names.add(f"execution.{values[_member(call.args[0], 'OperatorAction')]}")
    return names


def refused_resumes(site: Site) -> set[str]:
    """``resume.<reason>`` for the decisions acked with a WARNING: every reason a
    ``ResumeDecision`` of kind REFUSE or PROTOCOL_ERROR is built with in domain/resume.py."""
    tree = module("domain/resume.py").tree
    functions = {f.name: f for f in _functions(tree)}
    aliases = {  # module level: _K = ResumeKind
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.value) == "ResumeKind"
        for t in node.targets
        if isinstance(t, ast.Name)
    } | {"ResumeKind"}

    def kinds(node: ast.expr, function: ast.AST, depth: int = 0) -> set[str]:
        assert depth < 5, "the resume kind passes through too many hands"
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
            return {node.attr}
        assert isinstance(node, ast.Name), f"a resume kind read from {ast.unparse(node)}"
        for own in _own_nodes(function):  # a local: x, kind = …, ResumeKind.REFUSE
            if isinstance(own, ast.Assign):
                for target in own.targets:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    values = own.value.elts if isinstance(own.value, ast.Tuple) else [own.value]
                    for name, value in zip(names, values, strict=False):
                        if isinstance(name, ast.Name) and name.id == node.id:
                            return kinds(value, function, depth + 1)
        assert isinstance(function, ast.FunctionDef), f"{node.id} is not a local"
        parameters = [a.arg for a in function.args.args]
        position = parameters.index(node.id)  # a parameter: what every caller passes
        found = set()
        for caller in functions.values():
            for call in _calls(ast.walk(caller), function.name):
                passed = _arg(call, position, node.id)
                assert passed is not None, ast.unparse(call)
                found |= kinds(passed, caller, depth + 1)
        return found

    def reasons(node: ast.expr | None) -> set[str]:
        members = enum_members("ResumeReason")
        if isinstance(node, ast.Attribute):
            return {members[_member(node, "ResumeReason")]}
        # ResumeReason(other.value): converted from the enum its members borrow from.
        assert isinstance(node, ast.Call) and ast.unparse(node.func) == "ResumeReason", node
        borrowed = {
            n.value.value.value.id
            for n in _class("ResumeReason").body
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Attribute)
            and isinstance(n.value.value, ast.Attribute)
            and isinstance(n.value.value.value, ast.Name)
        }
        assert len(borrowed) == 1, f"ResumeReason borrows from {borrowed}"
        return set(enum_members(borrowed.pop()).values())

    logged = {"REFUSE", "PROTOCOL_ERROR"}
    names = set()
    for function in functions.values():
        for call in _calls(_own_nodes(function), "ResumeDecision"):
            if kinds(_arg(call, 0, "kind"), function) & logged:  # type: ignore[arg-type]
                names |= {f"resume.{r}" for r in reasons(_arg(call, 1, "reason"))}
    return names


#: Sites whose name is filled in at run time from something else than a module constant.
DYNAMIC: dict[tuple[str, str], Callable[[Site], set[str]]] = {
    ("application/use_cases/step/gates.py", "%s"): consume_events,
    ("application/use_cases/dead_letter_guard.py", "dlq_guard.%s"): guard_outcomes,
    ("application/use_cases/operator_controls/shared.py", "execution.%s"): audited_actions,
    ("application/use_cases/step/resumes.py", "resume.%s"): refused_resumes,
}


def _resolve(site: Site) -> set[str]:
    resolver = DYNAMIC.get((site.module.path, site.token))
    if resolver is not None:
        return resolver(site)
    filled = _placeholder_arg(site)
    named = isinstance(filled, ast.Name) and filled.id in module_constants()
    if site.token.count("%s") == 1 and named:
        assert isinstance(filled, ast.Name)
        return {site.token.replace("%s", constant(filled.id))}
    raise AssertionError(
        f"{site}: the name is filled in at run time; pass a module constant for it, or add a "
        "resolver to DYNAMIC in tests/docs/test_log_events.py that reads its possible values"
    )


@functools.cache
def emitted() -> dict[str, tuple[str, ...]]:
    """Every event name the code can log, with where."""
    names: dict[str, list[str]] = {}
    for site in sites():
        dynamic = "%" in site.token or "{" in site.token
        for name in _resolve(site) if dynamic else {site.token}:
            names.setdefault(name, []).append(f"{site.module.path}:{site.line}")
    return {name: tuple(where) for name, where in names.items()}


# --- the documented names -----------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : len(text) if end == -1 else end]


@functools.cache
def listed() -> dict[str, str]:
    """The events the log events section lists: the backticked names of its tables' first
    column, with the row."""
    names: dict[str, str] = {}
    for line in _section(OPERATIONS.read_text(), EVENTS_SECTION).splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            for code in re.findall(r"`([^`]+)`", first):
                names.setdefault(code.split()[0], f"the table row {first.strip()!r}")
    return names


@functools.cache
def mentioned() -> dict[str, str]:
    """Every ``event=<name>`` written anywhere in docs/operations.md, with its line."""
    names: dict[str, str] = {}
    for number, line in enumerate(OPERATIONS.read_text().splitlines(), start=1):
        for token in _TOKEN.findall(line):
            name = token.rstrip("`.)")
            if _NAME.fullmatch(name):  # not the placeholder of `event=<name>`
                names.setdefault(name, f"line {number}")
    return names


# --- the tests ----------------------------------------------------------------------------


def test_every_logger_call_logs_an_event_name() -> None:
    assert unnamed_logger_calls() == [], (
        "these log calls name no event= at the start of their message; start it with "
        "event=<name>, or list the call in PASS_THROUGH if it logs a message built elsewhere"
    )


def test_the_extraction_finds_the_names_of_every_kind_of_site() -> None:
    names = emitted()
    assert len(names) > 100, sorted(names)
    for name in (
        "flow.end",  # a literal
        "flow.branch_miss",  # a module constant
        "config.budget_stale",  # a consume decision
        "dlq_guard.holder_gone",  # a guard decision
        "dlq_guard.carrier_age_unknown",  # a label of the guard's actions
        "execution.unpause",  # an audited operator action
        "resume.g1_wakeups_exhausted",  # a refused resume, converted from another enum
        "resume.definition_changed",  # a refused resume, its kind passed as a parameter
        "resume.definition_drift_tolerated",  # an f-string logged as it is
    ):
        assert name in names, name
    assert "resume.terminal" not in names  # acked without a word
    for name in names:
        assert _NAME.fullmatch(name), f"{name!r} ({names[name]}) is not a dotted event name"


def test_every_emitted_event_is_listed() -> None:
    missing = {name: where for name, where in emitted().items() if name not in listed()}
    assert missing == {}, (
        f"the tables of docs/operations.md {EVENTS_SECTION!r} do not list these events the "
        "code logs: add each under the symptom an operator would look it up by"
    )


def test_every_documented_event_is_emitted() -> None:
    documented = {**mentioned(), **listed()}
    stale = {name: where for name, where in documented.items() if name not in emitted()}
    assert stale == {}, "docs/operations.md names events that no code logs"


def test_the_event_list_cites_no_requirement_ids() -> None:
    section = _section(OPERATIONS.read_text(), EVENTS_SECTION)
    assert _REQUIREMENT_ID.findall(section) == [], "say what the rule is, not its id"


@pytest.mark.parametrize("token", ["%s", "dlq_guard.%s"])
def test_a_dynamic_site_without_a_resolver_is_refused(token: str) -> None:
    call = ast.parse(f'log.info("event={token} x=%s", thing, 1)').body[0].value  # type: ignore[attr-defined]
    site = Site(Module("somewhere/new.py", ast.Module(body=[], type_ignores=[])), 1, token, call)
    with pytest.raises(AssertionError, match="filled in at run time"):
        _resolve(site)
