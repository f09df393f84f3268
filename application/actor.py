"""Who a unit of work acts for: the name an execution's history records for a start or an
operator's action (ADR 0022).

An entry point opens ``actor_scope`` around the work it does for someone — the console for a
request's token, the CLI for the user running it, the Python client for the process — and
the use cases read ``current_actor()`` when they write a history entry. Like the tenant
scope it is a ``contextvars`` value; unlike the tenant it is never a security boundary, only
what an operator reads afterwards, so outside any scope it is ``Actor.UNKNOWN``.
"""

from __future__ import annotations

import contextvars
import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import attrs


@attrs.frozen
class Actor:
    """``via``: the entry point (``api``, ``cli``, ``sdk``, ``dev`` …); ``name``: who — a
    console token's name, an OS user, a process."""

    via: str
    name: str

    UNKNOWN: ClassVar[Actor]

    @classmethod
    def os_user(cls, via: str) -> Actor:
        """The user this process runs as (``unknown`` where the system cannot say)."""
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            name = "unknown"
        return cls(via, name)

    def __str__(self) -> str:
        return f"{self.name} ({self.via})"


Actor.UNKNOWN = Actor("library", "unknown")

_current: contextvars.ContextVar[Actor] = contextvars.ContextVar(
    "plaita_actor", default=Actor.UNKNOWN
)


@contextmanager
def actor_scope(actor: Actor) -> Iterator[Actor]:
    """Run the body on behalf of ``actor``; scopes nest and restore on exit."""
    token = _current.set(actor)
    try:
        yield actor
    finally:
        _current.reset(token)


def current_actor() -> Actor:
    return _current.get()
