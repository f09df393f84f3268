"""The handler of the priority process test: each run appends its execution's label to one
Redis list as it starts, so the test reads the order the worker took the starts in.

Workers import it with ``--handler-modules tests.integration.priority_handlers``; the Redis
URL and namespace come from the ``PLAITA_REDIS_URL`` / ``PLAITA_NAMESPACE`` they inherit.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis

_lock = threading.Lock()
_client: redis.Redis | None = None


def order_key(namespace: str) -> str:
    return f"{namespace}:test:priority-order"


def client() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["PLAITA_REDIS_URL"], decode_responses=True)
        return _client


def mark(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    client().rpush(order_key(os.environ.get("PLAITA_NAMESPACE", "plaita")), params["label"])
    # Long enough that the backlog outlasts the first reads, short enough for 44 runs.
    time.sleep(0.05)
    return {"label": params["label"]}
