"""Dead-letter alerts posted as JSON to a webhook: bounded, in the background, best effort (C5).

The worker only ever calls ``offer``, which puts the alert on a bounded queue and returns at
once — a full queue drops the alert (counted and logged, rate-limited), so a slow or dead
webhook can never slow consuming. ``run`` is the sender: one POST per alert with a timeout;
after a failed POST it backs off (1 s doubling to a minute) and goes on with the next alert.
An unreachable webhook is one WARNING when it begins and one INFO when it answers again.
``close`` gives the queue a bounded time to drain and then drops what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from plaita.application.outages import StoreOutages
from plaita.application.ports import DeadLetterAlert
from plaita.domain.outages import Backoff

log = logging.getLogger("plaita.alerts")

DEFAULT_QUEUE_SIZE = 1000
DEFAULT_TIMEOUT_SECONDS = 5.0
#: At most one "dropped" WARNING per this many seconds, however many are dropped.
DROP_LOG_EVERY_SECONDS = 10.0
#: After a failed POST the sender waits 1 s, doubling up to a minute, before the next one.
SEND_BACKOFF = Backoff(base_ms=1_000, cap_ms=60_000)
#: What an unreachable or failing webhook raises; logged without a traceback.
WEBHOOK_UNREACHABLE: tuple[type[BaseException], ...] = (httpx.HTTPError, OSError)


class WebhookAlertSink:
    def __init__(
        self,
        url: str,
        *,
        max_queue: int = DEFAULT_QUEUE_SIZE,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"an alert webhook must be an http(s) URL, got {url!r}")
        if max_queue <= 0:
            raise ValueError(f"the alert queue holds at least one alert, got {max_queue}")
        if timeout_seconds <= 0:
            raise ValueError(f"an alert POST needs a positive timeout, got {timeout_seconds}")
        self.url = url
        self.max_queue = max_queue
        self._queue: asyncio.Queue[DeadLetterAlert] = asyncio.Queue(maxsize=max_queue)
        self._client = httpx.AsyncClient(timeout=timeout_seconds, transport=transport)
        self._outage = StoreOutages("alert-webhook", log=log, expected=WEBHOOK_UNREACHABLE).loop(
            "alerts",
            consequence="dead-letter alerts are not delivered meanwhile (the DLQ keeps every "
            "entry); alerts that do not fit the queue are dropped",
            backoff=SEND_BACKOFF,
        )
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._last_drop_log = -DROP_LOG_EVERY_SECONDS

    def offer(self, alert: DeadLetterAlert) -> bool:
        try:
            self._queue.put_nowait(alert)
        except asyncio.QueueFull:
            self.dropped += 1
            now = time.monotonic()
            if now - self._last_drop_log >= DROP_LOG_EVERY_SECONDS:
                self._last_drop_log = now
                log.warning(
                    "event=alert.dropped dropped_total=%d queue_size=%d: the webhook is slower "
                    "than dead letters arrive; alerts are dropped, the DLQ itself keeps every "
                    "entry",
                    self.dropped,
                    self._queue.maxsize,
                )
            return False
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Send queued alerts until ``stop`` is set (then ``close`` drains what it can)."""
        while not stop.is_set():
            getting = asyncio.ensure_future(self._queue.get())
            stopping = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if getting not in done:
                getting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getting
                return
            backoff = await self._send(getting.result())
            if backoff:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)

    async def close(self, *, timeout_seconds: float = 2.0) -> None:
        """Send what is queued for at most ``timeout_seconds``, drop the rest, close HTTP."""
        try:
            async with asyncio.timeout(timeout_seconds):
                while not self._queue.empty():
                    await self._send(self._queue.get_nowait())
        except TimeoutError:
            left = self._queue.qsize()
            self.dropped += left
            log.warning("event=alert.dropped_on_close dropped=%d", left)
        finally:
            await self._client.aclose()

    async def _send(self, alert: DeadLetterAlert) -> float:
        """POST one alert; 0 when it was delivered, else the seconds to wait before the next."""
        try:
            response = await self._client.post(self.url, json=alert.to_json())
            response.raise_for_status()
        except Exception as exc:  # best effort: a failed alert never stops the next one
            self.failed += 1
            return self._outage.failed(exc, dlq_id=alert.dlq_id, execution_id=alert.execution_id)
        self.sent += 1
        self._outage.succeeded()
        return 0.0
