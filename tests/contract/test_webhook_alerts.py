"""Dead-letter alerts (C5): bounded, in the background, best effort, never blocking."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from plaita.adapters.webhook.alerts import WebhookAlertSink
from plaita.application.null_objects import NoMetrics
from plaita.application.ports import DeadLetterAlert, Delivery
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.entrypoints.worker_reclaim import DeadLetterRoute


def alert(n: int = 1) -> DeadLetterAlert:
    return DeadLetterAlert(
        dlq_id=f"{n}-0",
        message_id=f"m-{n}",
        execution_id=f"x-{n}",
        tenant_id="default",
        reason="node budget exhausted",
        at_ms=1_000 + n,
    )


async def test_alerts_are_posted_as_json_to_a_real_http_server() -> None:
    received: list[dict[str, Any]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        received.append(json.loads(await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sink = WebhookAlertSink(f"http://127.0.0.1:{port}/hook")
    stop = asyncio.Event()
    sender = asyncio.create_task(sink.run(stop))
    try:
        assert sink.offer(alert(1)) and sink.offer(alert(2))
        async with asyncio.timeout(5):
            while sink.sent < 2:
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await sender
        await sink.close()
        server.close()
        await server.wait_closed()

    assert [r["dlq_id"] for r in received] == ["1-0", "2-0"]
    assert received[0] == {"event": "plaita.dead_letter", **alert(1).to_json(), "at_ms": 1001}


async def test_a_full_queue_drops_instead_of_waiting(caplog: pytest.LogCaptureFixture) -> None:
    sink = WebhookAlertSink("http://127.0.0.1:9/never", max_queue=2)
    with caplog.at_level(logging.WARNING, logger="plaita.alerts"):
        results = [sink.offer(alert(n)) for n in range(5)]

    assert results == [True, True, False, False, False]
    assert sink.dropped == 3
    assert len([r for r in caplog.records if "alert.dropped" in r.message]) == 1  # rate-limited
    await sink.close(timeout_seconds=0.01)


async def test_a_failing_webhook_is_logged_and_the_next_alert_still_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    def respond(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content)["dlq_id"])
        return httpx.Response(500 if len(calls) == 1 else 200)

    sink = WebhookAlertSink("http://alerts.test/hook", transport=httpx.MockTransport(respond))
    stop = asyncio.Event()
    sender = asyncio.create_task(sink.run(stop))
    with caplog.at_level(logging.INFO, logger="plaita.alerts"):
        sink.offer(alert(1))
        sink.offer(alert(2))
        async with asyncio.timeout(5):
            while sink.sent + sink.failed < 2:
                await asyncio.sleep(0.01)
    stop.set()
    await sender
    await sink.close()

    assert calls == ["1-0", "2-0"]
    assert (sink.failed, sink.sent) == (1, 1)
    # Only the sink's own lines: an earlier test's background task may still log elsewhere.
    failed, recovered = (
        r.getMessage() for r in caplog.records if "store=alert-webhook" in r.getMessage()
    )
    assert failed.startswith("event=store.unreachable store=alert-webhook loop=alerts dlq_id=1-0")
    assert recovered.startswith("event=store.recovered store=alert-webhook failures=1 ")


async def test_close_drains_what_it_can_in_its_time_and_drops_the_rest() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.2)
        return httpx.Response(200)

    sink = WebhookAlertSink("http://alerts.test/hook", transport=httpx.MockTransport(slow))
    for n in range(5):
        sink.offer(alert(n))

    await sink.close(timeout_seconds=0.3)

    assert sink.sent >= 1 and sink.sent + sink.dropped >= 4


@pytest.mark.parametrize("url", ["ftp://x", "hooks.example.com", ""])
def test_a_webhook_must_be_an_http_url(url: str) -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookAlertSink(url)


class RecordingSink:
    def __init__(self) -> None:
        self.alerts: list[DeadLetterAlert] = []

    def offer(self, alert: DeadLetterAlert) -> bool:
        self.alerts.append(alert)
        return True


class FakeQueue:
    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        return "7-0"


async def test_the_worker_offers_an_alert_for_each_dead_letter() -> None:
    sink = RecordingSink()
    route = DeadLetterRoute(FakeQueue(), None, NoMetrics(), alerts=sink)  # type: ignore[arg-type]
    envelope = TaskEnvelope.start(
        execution_id="x-9",
        flow_id="f",
        version=None,
        params={},
        now_ms=1,
        tenant_id="acme",
        generations=LEGACY_GENERATIONS,
    )

    await route.send(Delivery("m-9", envelope, {}, 6), "delivered 6 times")

    [sent] = sink.alerts
    assert (sent.dlq_id, sent.execution_id, sent.tenant_id, sent.reason) == (
        "7-0",
        "x-9",
        "acme",
        "delivered 6 times",
    )
