"""Task handlers for the fault tests: each run leaves evidence in Redis that a test can read.

Workers import this module with ``--handler-modules tests.integration.fault_handlers`` (they
run with the repository root as their working directory). Every call of :func:`step`

- counts the run: ``INCR <ns>:test:runs:<execution_id>:<node_id>``;
- records which process ran it: ``RPUSH <ns>:test:pids:<execution_id>:<node_id> <pid>``, and
  as which attempt: ``RPUSH <ns>:test:attempts:<execution_id>:<node_id> <ctx.attempt>``;
- obeys the plan for its node, ``params["plan"][<node_id>]``:
  ``{"sleep": seconds}`` (to be killed, stopped or drained mid-step),
  ``{"crash": "first"}`` (``os._exit`` on the node's first run),
  ``{"crash": "always"}`` (``os._exit`` on every run: a poison step),
  ``{"fail": "transient", "times": k}`` (``TransientNodeError`` on the first ``k`` runs),
  ``{"fail": "deterministic"}`` (``DeterministicNodeError`` every time);
- counts the completed run: ``INCR <ns>:test:done:<execution_id>:<node_id>``, just before it
  returns ``{"node": <node_id>, "n": params["n"], "pid": <pid>}``.

The Redis URL and namespace come from the ``PLAITA_REDIS_URL`` / ``PLAITA_NAMESPACE`` the
worker inherits. This client never carries the worker's client name, so a test that kills the
worker's own Redis connections by name leaves the evidence channel alone.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from plaita.domain.failures import DeterministicNodeError, TransientNodeError

JSON = Any

_lock = threading.Lock()
_client: redis.Redis | None = None


def namespace() -> str:
    return os.environ.get("PLAITA_NAMESPACE", "plaita")


def runs_key(ns: str, execution_id: str, node_id: str) -> str:
    return f"{ns}:test:runs:{execution_id}:{node_id}"


def pids_key(ns: str, execution_id: str, node_id: str) -> str:
    return f"{ns}:test:pids:{execution_id}:{node_id}"


def attempts_key(ns: str, execution_id: str, node_id: str) -> str:
    return f"{ns}:test:attempts:{execution_id}:{node_id}"


def done_key(ns: str, execution_id: str, node_id: str) -> str:
    return f"{ns}:test:done:{execution_id}:{node_id}"


def _without_client_name(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "client_name"]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def client() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            url = _without_client_name(os.environ["PLAITA_REDIS_URL"])
            _client = redis.Redis.from_url(
                url,
                decode_responses=True,
                client_name=f"{namespace()}-fault-handlers",
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 10),
            )
        return _client


def step(params: dict[str, JSON], ctx: Any) -> dict[str, JSON]:
    ns = namespace()
    redis_client = client()
    pid = os.getpid()
    with redis_client.pipeline(transaction=True) as pipe:
        pipe.incr(runs_key(ns, ctx.execution_id, ctx.node_id))
        pipe.rpush(pids_key(ns, ctx.execution_id, ctx.node_id), pid)
        pipe.rpush(attempts_key(ns, ctx.execution_id, ctx.node_id), ctx.attempt)
        runs = int(pipe.execute()[0])
    plan = (params.get("plan") or {}).get(ctx.node_id) or {}
    if plan.get("crash") == "first" and runs == 1:
        os._exit(70)
    if plan.get("crash") == "always":
        os._exit(70)
    if plan.get("fail") == "transient" and runs <= int(plan.get("times", 1)):
        raise TransientNodeError(f"{ctx.node_id}: planned transient failure on run {runs}")
    if plan.get("fail") == "deterministic":
        raise DeterministicNodeError(f"{ctx.node_id}: planned deterministic failure")
    seconds = float(plan.get("sleep", 0))
    if seconds > 0:
        time.sleep(seconds)
    redis_client.incr(done_key(ns, ctx.execution_id, ctx.node_id))
    return {"node": ctx.node_id, "n": params.get("n"), "pid": pid}
