"""The handler of the rate limit process test: each run appends one line to a log file.

Workers import this module with ``--handler-modules tests.integration.rate_handlers``; the
file is ``PLAITA_TEST_RATE_LOG`` (inherited from the test). A line is
``<time.time()> <execution id> <pid>``, written with one ``write`` on a file opened for
appending, so lines of two worker processes never interleave.
"""

from __future__ import annotations

import os
import time
from typing import Any


def call(params: Any, ctx: Any) -> dict[str, Any]:
    line = f"{time.time():.6f} {ctx.execution_id} {os.getpid()}\n".encode()
    descriptor = os.open(os.environ["PLAITA_TEST_RATE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
    return {"pid": os.getpid()}
