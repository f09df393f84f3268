"""The store outages of a process's background loops: which errors mean "unreachable".

A Redis client raises its own ``ConnectionError``/``TimeoutError`` (not the builtins) when the
server is down, restarting or paused; the socket layer raises ``OSError``. Those are an
outage: logged once, without a traceback, and counted (``StoreOutages``). Anything else a
loop raises is a surprise and is logged with its traceback, once per streak.
"""

from __future__ import annotations

import logging

import redis.exceptions

from plaita.application.outages import StoreOutages

#: What a loop raises while its store does not answer.
UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)

log = logging.getLogger("plaita.outages")


def store_outages(store: str = "redis") -> StoreOutages:
    """The tracker every background loop of this process reports ``store``'s failures to."""
    return StoreOutages(store, log=log, expected=UNREACHABLE)
