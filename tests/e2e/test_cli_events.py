"""`plaita events list` and `plaita events show` on real Redis (V7, C4).

Each test seeds stored events into its own namespace through the Redis event log and drives
the command through the ``plaita`` group, as an operator would. Bad input is refused before
anything connects, so those tests need no Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import redis.asyncio as redis
from click.testing import CliRunner

from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.keys import RedisKeys
from plaita.domain.events import Event
from plaita.entrypoints.cli import main

REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL")
UNREACHABLE = "redis://127.0.0.1:1/0"
requires_redis = pytest.mark.skipif(
    not REDIS_URL, reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it"
)


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp() * 1000)


T0 = ms("2025-10-09T12:00:00")


def invoke(*args: str, namespace: str = "plaita-e2e-unused") -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        list(args),
        # PLAITA_TENANT from the caller's shell must not filter these listings.
        env={"PLAITA_NAMESPACE": namespace, "PLAITA_TENANT": None},
        catch_exceptions=False,
    )
    return result.exit_code, result.output


@attrs.frozen
class Namespace:
    name: str

    def invoke(self, *args: str) -> tuple[int, str]:
        assert REDIS_URL is not None
        return invoke(*args, "--redis-url", REDIS_URL, namespace=self.name)

    def invoke_json(self, *args: str) -> tuple[int, Any]:
        code, out = self.invoke(*args, "--json")
        return code, json.loads(out)

    def run(self, body: Any) -> Any:
        async def go() -> Any:
            assert REDIS_URL is not None
            client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
            try:
                return await body(client, RedisKeys(self.name))
            finally:
                await client.aclose()

        return asyncio.run(go())

    def publish(self, *events: Event) -> None:
        async def body(client: redis.Redis, keys: RedisKeys) -> None:
            log = RedisEventLog(client, keys)
            for each in events:
                await log.append(each)

        self.run(body)


@pytest.fixture
def ns() -> Iterator[Namespace]:
    namespace = Namespace(f"plaita-e2e-{uuid.uuid4().hex[:12]}")
    yield namespace

    async def clean(client: redis.Redis, keys: RedisKeys) -> None:
        created = [key async for key in client.scan_iter(match=f"{keys.namespace}:*", count=1000)]
        if created:
            await client.delete(*created)

    if REDIS_URL:
        namespace.run(clean)


def event(
    event_id: str,
    *,
    event_type: str = "payment.received",
    minutes: int = 0,
    correlation_id: str | None = "order-7",
    tenant_id: str = "default",
) -> Event:
    return Event(
        event_id=event_id,
        event_type=event_type,
        timestamp_ms=T0 + minutes * 60_000,
        data={"amount": 12},
        correlation_id=correlation_id,
        source="shop",
        tenant_id=tenant_id,
    )


SEEDED = (
    event("ev:1", minutes=0),
    event("ev:2", minutes=10, event_type="payment.refunded"),
    event("ev:3", minutes=20, correlation_id="order:8"),
    event("ev:4", minutes=30, tenant_id="acme"),
    event("ev:5", minutes=40),
)


def listed(document: Any) -> list[str]:
    assert document["count"] == len(document["items"])
    return [e["event_id"] for e in document["items"]]


@requires_redis
def test_list_shows_every_stored_event_oldest_first(ns: Namespace) -> None:
    ns.publish(*reversed(SEEDED))

    code, document = ns.invoke_json("events", "list")

    assert code == 0
    assert listed(document) == ["ev:1", "ev:2", "ev:3", "ev:4", "ev:5"]
    first = document["items"][0]
    assert first == {
        **event("ev:1").to_json(),
        "timestamp": "2025-10-09T12:00:00.000Z",
    }


@requires_redis
def test_list_applies_every_filter_together(ns: Namespace) -> None:
    ns.publish(*SEEDED)

    def ids(*args: str) -> list[str]:
        code, document = ns.invoke_json("events", "list", *args)
        assert code == 0
        return listed(document)

    assert ids("--type", "payment.received") == ["ev:1", "ev:3", "ev:4", "ev:5"]
    assert ids("--type", "payment.received", "--correlation-id", "order-7") == [
        "ev:1",
        "ev:4",
        "ev:5",
    ]
    assert ids("--correlation-id", "order-7", "--tenant", "default") == ["ev:1", "ev:2", "ev:5"]
    assert ids("--tenant", "acme") == ["ev:4"]
    assert ids("--correlation-id", "order:8") == ["ev:3"]
    assert ids("--since", "2025-10-09T12:10:00Z", "--until", "2025-10-09T12:40:00Z") == [
        "ev:2",
        "ev:3",
        "ev:4",
    ]
    # An offset counts: 14:20+02:00 is 12:20Z, and --since is inclusive.
    assert ids("--since", "2025-10-09T14:20:00+02:00", "--type", "payment.received") == [
        "ev:3",
        "ev:4",
        "ev:5",
    ]
    assert ids("--limit", "2") == ["ev:1", "ev:2"]
    assert ids("--since", "2025-10-10") == []


@requires_redis
def test_list_prints_one_line_per_event(ns: Namespace) -> None:
    ns.publish(SEEDED[0], SEEDED[3])

    code, out = ns.invoke("events", "list")

    assert code == 0
    assert out.splitlines() == [
        "2025-10-09T12:00:00.000Z  payment.received  ev:1  correlation=order-7  "
        "tenant=default  source=shop",
        "2025-10-09T12:30:00.000Z  payment.received  ev:4  correlation=order-7  "
        "tenant=acme  source=shop",
    ]
    code, out = ns.invoke("events", "list", "--type", "nothing.here")
    assert (code, out.strip()) == (0, "no stored event matches")


@requires_redis
def test_show_prints_one_event(ns: Namespace) -> None:
    ns.publish(*SEEDED)

    code, shown = ns.invoke_json("events", "show", "ev:3")
    assert code == 0
    assert shown == {**SEEDED[2].to_json(), "timestamp": "2025-10-09T12:20:00.000Z"}

    code, out = ns.invoke("events", "show", "ev:3")
    assert code == 0
    lines = [line.strip() for line in out.splitlines()]
    assert 'correlation_id: "order:8"' in lines
    assert 'event_type: "payment.received"' in lines
    assert 'timestamp: "2025-10-09T12:20:00.000Z"' in lines


@requires_redis
def test_an_unknown_event_id_exits_1_with_a_named_error(ns: Namespace) -> None:
    ns.publish(SEEDED[0])

    code, out = ns.invoke("events", "show", "ev:none")

    assert code == 1
    assert "UnknownEventError" in out and "'ev:none'" in out and "7 days" in out


@pytest.mark.parametrize("option", ["--since", "--until"])
def test_a_time_that_is_not_iso_8601_is_a_bad_parameter(option: str) -> None:
    code, out = invoke("events", "list", option, "yesterday", "--redis-url", UNREACHABLE)

    assert code == 2
    assert option in out and "'yesterday'" in out and "ISO 8601" in out
    assert "2025-10-09T14:30:00Z" in out  # an example of what is expected


def test_an_until_before_since_is_a_bad_parameter() -> None:
    code, out = invoke(
        "events",
        "list",
        "--since",
        "2025-10-09T12:00:00Z",
        "--until",
        "2025-10-09T11:00:00Z",
        "--redis-url",
        UNREACHABLE,
    )

    assert code == 2
    assert "--until" in out and "before since_ms" in out


def test_an_invalid_tenant_or_limit_is_a_bad_parameter() -> None:
    code, out = invoke("events", "list", "--tenant", "acme:eu", "--redis-url", UNREACHABLE)
    assert code == 2 and "--tenant" in out and "'acme:eu'" in out

    code, out = invoke("events", "list", "--limit", "0", "--redis-url", UNREACHABLE)
    assert code == 2 and "--limit" in out


def test_an_unreachable_redis_is_named() -> None:
    for args in (("events", "list"), ("events", "show", "ev:1")):
        code, out = invoke(*args, "--redis-url", UNREACHABLE)
        assert code == 1
        assert "cannot reach Redis at redis://127.0.0.1:1/0" in out
