"""Branch tokens: where each branch of an open fork stands, and when its join runs (E12).

A ``parallel`` node forks one token per branch (ADR 0028). Each token is *ready* (its node
is to run next), *waiting* (suspended at an event, a timer or a retry) or *arrived* (it
reached the join). The execution's lease holder advances ready tokens one step at a time;
these functions are the only rules for what a step, a suspension, a resume and the join do
to the set, so the worker, the in-process strategies and the model test share one copy:

- a token that reaches the join is arrived and never moves again;
- a resume wakes exactly the token it names, and only while that token still waits there:
  a duplicate or late resume changes nothing (``Resumed.duplicate``);
- ``"wait": "all"``: the join runs once every token arrived; ``"wait": "any"``: once the
  first one arrived, and every other token is cancelled (a waiting one's suspension is
  handed back so its subscription or timer can be dropped);
- the fork is closed by the step that runs the join, after which no rule accepts it.

Pure values; ids are given (token ids are the branch start's path under the fork,
``fan/a``), so a re-run of the forking step forks the same tokens.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from plaita.domain.errors import TokenStateError
from plaita.domain.waits import Suspension

JSON = Any


class WaitFor(enum.StrEnum):
    ALL = "all"
    ANY = "any"


class TokenStatus(enum.StrEnum):
    READY = "ready"
    WAITING = "waiting"
    ARRIVED = "arrived"
    CANCELLED = "cancelled"


@attrs.frozen
class Token:
    token_id: str
    #: The node it runs next (ready), waits at (waiting), or the join (arrived).
    node_id: str
    status: TokenStatus = TokenStatus.READY
    suspension: Suspension | None = None

    def to_json(self) -> dict[str, JSON]:
        raw: dict[str, JSON] = {"id": self.token_id, "node": self.node_id, "s": self.status.value}
        if self.suspension is not None:
            raw["wait"] = self.suspension.to_json()
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> Token:
        wait = raw.get("wait")
        return cls(
            token_id=str(raw["id"]),
            node_id=str(raw["node"]),
            status=TokenStatus(raw["s"]),
            suspension=None if wait is None else Suspension.from_json(wait),
        )


@attrs.frozen
class OpenFork:
    """The tokens of one open ``parallel`` node, in branch order."""

    fork_node_id: str
    join_node_id: str
    wait: WaitFor
    tokens: tuple[Token, ...]

    def to_json(self) -> dict[str, JSON]:
        return {
            "fork": self.fork_node_id,
            "join": self.join_node_id,
            "wait": self.wait.value,
            "tokens": [token.to_json() for token in self.tokens],
        }

    @classmethod
    def from_json(cls, raw: JSON) -> OpenFork | None:
        if not raw:
            return None
        return cls(
            fork_node_id=str(raw["fork"]),
            join_node_id=str(raw["join"]),
            wait=WaitFor(raw["wait"]),
            tokens=tuple(Token.from_json(token) for token in raw["tokens"]),
        )

    @property
    def waits(self) -> tuple[Suspension, ...]:
        """The suspensions of the tokens that wait."""
        return tuple(
            t.suspension
            for t in self.tokens
            if t.status is TokenStatus.WAITING and t.suspension is not None
        )

    def at(self, node_id: str) -> Token | None:
        """The ready or waiting token at ``node_id`` (a node is in one branch at most)."""
        for token in self.tokens:
            if token.node_id == node_id and token.status in (
                TokenStatus.READY,
                TokenStatus.WAITING,
            ):
                return token
        return None

    def token(self, token_id: str) -> Token:
        for token in self.tokens:
            if token.token_id == token_id:
                return token
        raise TokenStateError(
            f"fork {self.fork_node_id!r} has no token {token_id!r} "
            f"(it has {[t.token_id for t in self.tokens]})"
        )

    @property
    def ready(self) -> tuple[Token, ...]:
        return tuple(t for t in self.tokens if t.status is TokenStatus.READY)

    @property
    def join_due(self) -> bool:
        """Whether the join runs now: every token arrived, or (``any``) one did."""
        arrived = [t for t in self.tokens if t.status is TokenStatus.ARRIVED]
        if self.wait is WaitFor.ANY:
            return bool(arrived)
        return len(arrived) == len(self.tokens)

    @property
    def suspended(self) -> bool:
        """No token can move and the join is not due: the execution waits."""
        return not self.ready and not self.join_due

    def _with(self, token: Token) -> OpenFork:
        tokens = tuple(token if t.token_id == token.token_id else t for t in self.tokens)
        return attrs.evolve(self, tokens=tokens)


def fork(fork_node_id: str, branches: Iterable[str], *, join: str, wait: WaitFor) -> OpenFork:
    """The fork a ``parallel`` node opens: one ready token per branch start."""
    tokens = tuple(Token(f"{fork_node_id}/{start}", start) for start in branches)
    if len(tokens) < 2:
        raise TokenStateError(f"fork {fork_node_id!r} needs at least two branches")
    return OpenFork(fork_node_id, join, wait, tokens)


def advance(state: OpenFork, token_id: str, next_node_id: str) -> OpenFork:
    """A ready token ran its node; it goes on at ``next_node_id`` (arrived at the join)."""
    token = _require(state, token_id, TokenStatus.READY, "advance")
    if next_node_id == state.join_node_id:
        return state._with(attrs.evolve(token, node_id=next_node_id, status=TokenStatus.ARRIVED))
    return state._with(attrs.evolve(token, node_id=next_node_id))


def suspend(state: OpenFork, token_id: str, suspension: Suspension) -> OpenFork:
    """A ready token's node waits (an event, a timer, a durable retry)."""
    token = _require(state, token_id, TokenStatus.READY, "suspend")
    if suspension.node_id != token.node_id:
        raise TokenStateError(
            f"token {token_id!r} is at {token.node_id!r}, not at {suspension.node_id!r}"
        )
    return state._with(attrs.evolve(token, status=TokenStatus.WAITING, suspension=suspension))


@attrs.frozen
class Resumed:
    state: OpenFork
    #: The resume named a token that no longer waits there: nothing changed.
    duplicate: bool


def resume(state: OpenFork, token_id: str, *, node_id: str) -> Resumed:
    """Wake the token waiting at ``node_id``; a resume for a token that moved on, arrived or
    was cancelled is a duplicate and changes nothing (carriers are at least once)."""
    token = state.token(token_id)
    if token.status is not TokenStatus.WAITING or token.node_id != node_id:
        return Resumed(state, duplicate=True)
    ready = attrs.evolve(token, status=TokenStatus.READY, suspension=None)
    return Resumed(state._with(ready), duplicate=False)


@attrs.frozen
class JoinRun:
    """The join runs now; ``cancelled`` are the tokens ``any`` left behind, with the
    suspensions whose subscriptions and timers are to be dropped."""

    cancelled: tuple[Token, ...]

    @property
    def dropped_waits(self) -> tuple[Suspension, ...]:
        return tuple(t.suspension for t in self.cancelled if t.suspension is not None)


def run_join(state: OpenFork) -> JoinRun:
    """Close the fork: its join runs (once — the caller writes the closed fork in the same
    checkpoint as the join's result). ``TokenStateError`` when the join is not due."""
    if not state.join_due:
        waiting = [t.token_id for t in state.tokens if t.status is not TokenStatus.ARRIVED]
        raise TokenStateError(
            f"the join {state.join_node_id!r} of fork {state.fork_node_id!r} is not due: "
            f"{waiting} have not arrived"
        )
    left = tuple(
        attrs.evolve(t, status=TokenStatus.CANCELLED)
        for t in state.tokens
        if t.status is not TokenStatus.ARRIVED
    )
    return JoinRun(left)


def _require(state: OpenFork, token_id: str, status: TokenStatus, doing: str) -> Token:
    token = state.token(token_id)
    if token.status is not status:
        raise TokenStateError(
            f"cannot {doing} token {token_id!r} of fork {state.fork_node_id!r}: it is "
            f"{token.status.value}, not {status.value}"
        )
    return token
