"""The handler of the concurrency process test: it says when it starts and ends.

``work`` appends ``start <execution id> <pid> <ns>`` to the file ``params["log"]``, sleeps
``params["seconds"]``, then appends ``end …`` the same way. The times are the system's
monotonic clock (one clock for every process of the machine), so the test can count how
many handlers ran at once across worker processes. One short line per ``write`` to a file
opened for appending lands whole.
"""

from __future__ import annotations

import os
import time
from typing import Any


def _line(path: str, what: str, execution_id: str) -> None:
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{what} {execution_id} {os.getpid()} {time.monotonic_ns()}\n")


def work(params: Any, ctx: Any) -> Any:
    _line(params["log"], "start", ctx.execution_id)
    time.sleep(float(params["seconds"]))
    _line(params["log"], "end", ctx.execution_id)
    return {"pid": os.getpid()}
