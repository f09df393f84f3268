"""Task handlers for the cluster process tests (``flows in cluster_flows/``).

Workers import this module with ``--handler-modules tests.integration.cluster_handlers``.

:func:`step` is ``fault_handlers.step`` for either topology: each run counts itself
(``INCR``), records its pid and attempt (``RPUSH``) and counts its completion (``INCR``),
sleeping ``params["plan"][<node_id>]["sleep"]`` seconds in between. Its evidence keys carry
the execution id as their hash tag, ``<ns>:test:{<execution_id>}:runs:<node_id>``, so the
three writes of a run are one MULTI on a single node or on a Redis Cluster alike. The client
is a ``RedisCluster`` when the worker runs with ``PLAITA_REDIS_CLUSTER=1`` (the cluster
tests share it with every process), else a plain ``Redis``; both on ``PLAITA_REDIS_URL``.

:func:`nap` only sleeps ``params["seconds"]`` and touches no store: a flow that must keep
moving while a Redis master is killed leaves no evidence writes that could fail.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis

JSON = Any

_lock = threading.Lock()
_client: redis.Redis | None = None


def namespace() -> str:
    return os.environ.get("PLAITA_NAMESPACE", "plaita")


def on_cluster() -> bool:
    return os.environ.get("PLAITA_REDIS_CLUSTER", "").lower() in ("1", "true", "yes", "on")


def _key(ns: str, execution_id: str, kind: str, node_id: str) -> str:
    return f"{ns}:test:{{{execution_id}}}:{kind}:{node_id}"


def runs_key(ns: str, execution_id: str, node_id: str) -> str:
    return _key(ns, execution_id, "runs", node_id)


def pids_key(ns: str, execution_id: str, node_id: str) -> str:
    return _key(ns, execution_id, "pids", node_id)


def attempts_key(ns: str, execution_id: str, node_id: str) -> str:
    return _key(ns, execution_id, "attempts", node_id)


def done_key(ns: str, execution_id: str, node_id: str) -> str:
    return _key(ns, execution_id, "done", node_id)


def client() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            url = os.environ["PLAITA_REDIS_URL"]
            if on_cluster():
                _client = redis.RedisCluster.from_url(url, decode_responses=True)  # type: ignore[assignment]
            else:
                _client = redis.Redis.from_url(url, decode_responses=True)
        assert _client is not None
        return _client


def step(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    ns = namespace()
    redis_client = client()
    pid = os.getpid()
    with redis_client.pipeline(transaction=True) as pipe:
        pipe.incr(runs_key(ns, ctx.execution_id, ctx.node_id))
        pipe.rpush(pids_key(ns, ctx.execution_id, ctx.node_id), pid)
        pipe.rpush(attempts_key(ns, ctx.execution_id, ctx.node_id), ctx.attempt)
        pipe.execute()
    plan = (params.get("plan") or {}).get(ctx.node_id) or {}
    seconds = float(plan.get("sleep", 0))
    if seconds > 0:
        time.sleep(seconds)
    redis_client.incr(done_key(ns, ctx.execution_id, ctx.node_id))
    return {"node": ctx.node_id, "n": params.get("n"), "pid": pid}


def nap(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    time.sleep(float(params.get("seconds") or 0))
    return {"node": ctx.node_id, "pid": os.getpid()}
