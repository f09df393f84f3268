"""Receiving webhooks and managing hooks (V10), on the memory twin: a verified request
publishes one event; every refusal — the replay among them — publishes nothing; a publish
that fails gives the signature back; the hooks file's hooks cannot be changed through the
API."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest

from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.hooks import MemoryHookStore, MemorySeenSignatures
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.secrets import EnvironmentSecrets
from plaita.application.use_cases.events import PublishEvent
from plaita.application.use_cases.hooks import HookCatalog, HookSource, ReceiveHook
from plaita.domain.errors import (
    FutureHookTimestampError,
    HookBodyTooLargeError,
    HookConflictError,
    HookError,
    HookPointerMissingError,
    HookReplayError,
    HookSecretUnavailableError,
    InvalidHookSignatureError,
    MissingHookSignatureError,
    StaleHookTimestampError,
    UnknownHookError,
)
from plaita.domain.events import Event, EventQuery
from plaita.domain.hook_requests import MAX_HOOK_BODY_BYTES, sign
from plaita.domain.hooks import HookDefinition, parse_hook

from .conftest import FakeClock, SequentialIds

SECRET = "whsec-0123456789abcdef"
BODY = b'{"order": {"id": "ord-7"}, "approved": true}'


def hook(name: str = "payments", **fields: Any) -> HookDefinition:
    return parse_hook(
        {
            "name": name,
            "event_type": "payment.settled",
            "correlation_id_pointer": "/order/id",
            "secret": SECRET,
            **fields,
        }
    )


@attrs.define
class Receiver:
    receive: ReceiveHook
    events: MemoryEventLog
    inbox: MemoryInbox
    catalog: HookCatalog
    clock: FakeClock

    def signed(self, body: bytes = BODY, *, age_s: int = 0, secret: str = SECRET) -> dict[str, str]:
        timestamp = str(self.clock.now_ms() // 1000 - age_s)
        return {
            "X-Plaita-Timestamp": timestamp,
            "X-Plaita-Signature": "sha256=" + sign(secret.encode(), timestamp, body),
        }

    async def published(self) -> list[Event]:
        return list(await self.events.list(EventQuery(limit=100)))

    async def inboxed(self, tenant_id: str, correlation_id: str) -> list[Event]:
        entries = await self.inbox.entries(tenant_id, correlation_id, "any-execution")
        return [entry.event for entry in entries]


class FailingEventLog(MemoryEventLog):
    """An event log whose next append fails, as a store outage would."""

    failures = 0

    async def append(self, event: Event) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the event log did not answer")
        await super().append(event)


def receiver(
    clock: FakeClock,
    *,
    configured: tuple[HookDefinition, ...] = (),
    environ: Mapping[str, str] | None = None,
) -> Receiver:
    events = FailingEventLog(clock)
    inbox = MemoryInbox(clock)
    catalog = HookCatalog(store=MemoryHookStore(), configured=configured)
    receive = ReceiveHook(
        catalog=catalog,
        secrets=EnvironmentSecrets(environ or {}),
        seen=MemorySeenSignatures(clock),
        publish=PublishEvent(events=events, clock=clock, ids=SequentialIds(), inbox=inbox),
        clock=clock,
    )
    return Receiver(receive, events, inbox, catalog, clock)


@pytest.fixture
async def twin(clock: FakeClock) -> Receiver:
    made = receiver(clock)
    await made.catalog.create(hook())
    return made


async def test_a_verified_request_publishes_its_event_for_the_hooks_tenant(
    twin: Receiver,
) -> None:
    await twin.catalog.create(hook("acme-payments", tenant="acme", data_pointer="/order"))
    event = await twin.receive("acme-payments", twin.signed(), BODY)
    assert (event.event_type, event.correlation_id, event.tenant_id) == (
        "payment.settled",
        "ord-7",
        "acme",
    )
    assert event.data == {"id": "ord-7"}
    assert event.source == "hook:acme-payments"
    assert await twin.published() == [event]
    assert await twin.inboxed("acme", "ord-7") == [event]


#: Every row: the request (hook name, headers, body) made for the receiver, and its refusal.
REFUSALS: list[
    tuple[str, Callable[[Receiver], tuple[str, dict[str, str], bytes]], type[HookError]]
] = [
    ("unknown hook", lambda r: ("nope", r.signed(), BODY), UnknownHookError),
    ("missing signature", lambda r: ("payments", {}, BODY), MissingHookSignatureError),
    (
        "bad signature",
        lambda r: ("payments", r.signed(secret="x" * 20), BODY),
        InvalidHookSignatureError,
    ),
    ("wrong body", lambda r: ("payments", r.signed(), BODY + b"\n"), InvalidHookSignatureError),
    ("stale", lambda r: ("payments", r.signed(age_s=301), BODY), StaleHookTimestampError),
    ("future-skewed", lambda r: ("payments", r.signed(age_s=-61), BODY), FutureHookTimestampError),
    ("pointer missing", lambda r: ("payments", r.signed(b"{}"), b"{}"), HookPointerMissingError),
]


@pytest.mark.parametrize(
    ("request_of", "refused"), [pytest.param(r, e, id=label) for label, r, e in REFUSALS]
)
async def test_a_refused_request_publishes_nothing(
    twin: Receiver,
    request_of: Callable[[Receiver], tuple[str, dict[str, str], bytes]],
    refused: type[HookError],
) -> None:
    name, headers, body = request_of(twin)
    with pytest.raises(refused):
        await twin.receive(name, headers, body)
    assert await twin.published() == []
    assert await twin.inboxed("default", "ord-7") == []


async def test_a_replayed_request_is_refused_and_publishes_nothing_more(twin: Receiver) -> None:
    headers = twin.signed()
    first = await twin.receive("payments", headers, BODY)
    twin.clock.advance(10)
    with pytest.raises(HookReplayError):
        await twin.receive("payments", headers, BODY)
    assert await twin.published() == [first]


async def test_a_replay_after_the_window_is_stale_not_accepted(twin: Receiver) -> None:
    headers = twin.signed()
    await twin.receive("payments", headers, BODY)
    twin.clock.advance(301)
    with pytest.raises(StaleHookTimestampError):
        await twin.receive("payments", headers, BODY)
    assert len(await twin.published()) == 1


async def test_a_request_refused_for_its_body_can_be_signed_again_and_accepted(
    twin: Receiver,
) -> None:
    """The mapping is checked before the signature is marked as seen."""
    with pytest.raises(HookPointerMissingError):
        await twin.receive("payments", twin.signed(b"{}"), b"{}")
    assert await twin.receive("payments", twin.signed(), BODY)


async def test_a_failed_publish_gives_the_signature_back_and_the_retry_keeps_the_event_id(
    twin: Receiver,
) -> None:
    assert isinstance(twin.events, FailingEventLog)
    twin.events.failures = 1
    headers = twin.signed()
    with pytest.raises(ConnectionError):
        await twin.receive("payments", headers, BODY)
    kept = await twin.inboxed("default", "ord-7")
    retried = await twin.receive("payments", headers, BODY)
    assert [event.event_id for event in kept] == [retried.event_id]
    assert await twin.published() == [retried]


async def test_a_body_over_the_cap_is_refused_before_it_is_read(twin: Receiver) -> None:
    body = b" " * (MAX_HOOK_BODY_BYTES + 1)
    with pytest.raises(HookBodyTooLargeError):
        await twin.receive("payments", twin.signed(body), body)
    assert await twin.published() == []


async def test_a_referenced_secret_is_read_from_the_environment(clock: FakeClock) -> None:
    referenced = hook(secret=None, secret_ref="env:PAYMENTS_SECRET")
    present = receiver(clock, configured=(referenced,), environ={"PAYMENTS_SECRET": SECRET})
    assert await present.receive("payments", present.signed(), BODY)
    absent = receiver(clock, configured=(referenced,), environ={})
    with pytest.raises(HookSecretUnavailableError, match="env:PAYMENTS_SECRET"):
        await absent.receive("payments", absent.signed(), BODY)
    assert await absent.published() == []


async def test_a_file_secret_is_read_stripped_and_a_short_one_is_none(
    tmp_path: Any,
) -> None:
    secrets = EnvironmentSecrets({"SHORT": "too-short"})
    (tmp_path / "s").write_text(SECRET + "\n")
    assert await secrets.resolve(hook(secret=None, secret_ref=f"file:{tmp_path}/s").secret) == (
        SECRET.encode()
    )
    assert await secrets.resolve(hook(secret=None, secret_ref="file:/no/such").secret) is None
    assert await secrets.resolve(hook(secret=None, secret_ref="env:SHORT").secret) is None
    assert await secrets.resolve(hook().secret) == SECRET.encode()


# --- the catalog ---------------------------------------------------------------------------


async def test_the_catalog_lists_a_tenants_hooks_from_the_file_and_the_store(
    clock: FakeClock,
) -> None:
    made = receiver(clock, configured=(hook("b-file"), hook("other", tenant="acme")))
    await made.catalog.create(hook("a-api"))
    await made.catalog.create(hook("acme-api", tenant="acme"))
    listed = await made.catalog.list("default")
    assert [(item.hook.name, item.source) for item in listed] == [
        ("a-api", HookSource.API),
        ("b-file", HookSource.FILE),
    ]
    assert [item.hook.name for item in await made.catalog.list("acme")] == ["acme-api", "other"]


async def test_a_name_is_one_hook_the_files_first(clock: FakeClock) -> None:
    made = receiver(clock, configured=(hook("payments", event_type="from.file"),))
    with pytest.raises(HookConflictError, match="hooks file"):
        await made.catalog.create(hook("payments"))
    await made.catalog.create(hook("stored"))
    with pytest.raises(HookConflictError, match="exists already"):
        await made.catalog.create(hook("stored", tenant="acme"))
    found = await made.catalog.find("payments")
    assert found is not None and found.hook.event_type == "from.file"


async def test_only_a_stored_hook_of_the_tenant_can_be_deleted(clock: FakeClock) -> None:
    made = receiver(clock, configured=(hook("from-file"),))
    await made.catalog.create(hook("stored"))
    with pytest.raises(HookConflictError, match="PLAITA_HOOKS_FILE"):
        await made.catalog.delete("from-file", "default")
    with pytest.raises(UnknownHookError):
        await made.catalog.delete("stored", "acme")
    with pytest.raises(UnknownHookError):
        await made.catalog.show("stored", "acme")
    deleted = await made.catalog.delete("stored", "default")
    assert deleted.hook.name == "stored"
    assert await made.catalog.find("stored") is None
    with pytest.raises(UnknownHookError):
        await made.catalog.delete("stored", "default")
