"""Handler dispatch shared by every event bus (V3): retries on the RetryPolicy schedule with an
injected sleep (nothing sleeps), handled marks only after success, sync and async handlers,
registration rules and the ``@event_handler`` decorator."""

from __future__ import annotations

import asyncio
import logging
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from plaita.application.event_bus import (
    EventHandler,
    HandlerDispatcher,
    HandlerOutcome,
    HandlerResult,
    default_handler_id,
    event_handler,
    publish_from_sync_code,
)
from plaita.application.tenancy import current_tenant
from plaita.domain.errors import (
    DuplicateHandlerError,
    InvalidHandlerError,
    PublishSyncInLoopError,
)
from plaita.domain.events import Event, RetryPolicy

LOGGER = "plaita.events.bus"
BOUND_S = 5  # every wait of a test is bounded


def event(
    event_id: str = "ev-1", event_type: str = "user.created", tenant: str = "default"
) -> Event:
    return Event(event_id, event_type, 1_760_000_000_000, {"user": 7}, tenant_id=tenant)


class FakeMarks:
    """HandledMarks in a set; ``fail_reads``/``fail_writes`` make the store misbehave."""

    def __init__(self) -> None:
        self.marked: set[tuple[str, str]] = set()
        self.fail_reads = False
        self.fail_writes = False

    async def is_handled(self, event_id: str, handler_id: str) -> bool:
        if self.fail_reads:
            raise ConnectionError("marks unreachable")
        return (event_id, handler_id) in self.marked

    async def mark_handled(self, event_id: str, handler_id: str) -> None:
        if self.fail_writes:
            raise ConnectionError("marks unreachable")
        self.marked.add((event_id, handler_id))


class FakeSleep:
    """Records the delays the retry loop asks for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Flaky:
    """An async handler that fails ``failures`` times, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self, received: Event) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"boom {self.calls}")


@pytest.fixture
def marks() -> FakeMarks:
    return FakeMarks()


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


@pytest.fixture
def dispatcher(marks: FakeMarks, sleep: FakeSleep) -> HandlerDispatcher:
    return HandlerDispatcher(marks, sleep=sleep)


async def run(dispatcher: HandlerDispatcher, published: Event) -> list[HandlerResult]:
    tasks = dispatcher.dispatch(published)
    return list(await asyncio.wait_for(asyncio.gather(*tasks), BOUND_S))


# --- retries ------------------------------------------------------------------------------


async def test_a_failing_handler_is_retried_on_the_policy_schedule_until_it_succeeds(
    dispatcher: HandlerDispatcher, marks: FakeMarks, sleep: FakeSleep
) -> None:
    handler = Flaky(failures=3)
    dispatcher.register("user.*", handler, handler_id="h")

    [result] = await run(dispatcher, event())

    assert result == HandlerResult("ev-1", "h", HandlerOutcome.SUCCEEDED, attempts=4)
    assert sleep.delays == [1.0, 2.0, 4.0]  # RetryPolicy() defaults: 1 s, doubling
    assert marks.marked == {("ev-1", "h")}


async def test_retry_delays_grow_by_the_backoff_factor_up_to_max_delay(
    dispatcher: HandlerDispatcher, sleep: FakeSleep
) -> None:
    policy = RetryPolicy(max_retries=4, initial_delay=10, backoff_factor=3, max_delay=60)
    dispatcher.register("user.*", Flaky(failures=99), handler_id="h", retry=policy)

    [result] = await run(dispatcher, event())

    assert sleep.delays == [10, 30, 60, 60]
    assert (result.outcome, result.attempts) == (HandlerOutcome.GAVE_UP, 5)


async def test_a_handler_failing_past_max_retries_gives_up_logs_each_attempt_and_is_not_marked(
    dispatcher: HandlerDispatcher,
    marks: FakeMarks,
    sleep: FakeSleep,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dispatcher.register("user.*", Flaky(failures=99), handler_id="mailer")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        [result] = await run(dispatcher, event())

    assert result.outcome is HandlerOutcome.GAVE_UP
    assert result.attempts == 4 and result.error == "RuntimeError('boom 4')"
    assert list(dispatcher.failures) == [result]
    assert marks.marked == set()
    failed = [r.getMessage() for r in caplog.records if "handler_failed" in r.getMessage()]
    assert len(failed) == 3
    for attempt, line in enumerate(failed, start=1):
        assert f"event_id=ev-1 handler_id=mailer attempt={attempt} of=4" in line
    [gave_up] = [r for r in caplog.records if "handler_gave_up" in r.getMessage()]
    assert gave_up.levelno == logging.ERROR
    assert "event_id=ev-1 handler_id=mailer attempts=4" in gave_up.getMessage()


async def test_max_retries_zero_runs_a_handler_once(
    dispatcher: HandlerDispatcher, sleep: FakeSleep
) -> None:
    handler = Flaky(failures=1)
    dispatcher.register("user.*", handler, handler_id="h", retry=RetryPolicy(max_retries=0))

    [result] = await run(dispatcher, event())

    assert (result.outcome, handler.calls, sleep.delays) == (HandlerOutcome.GAVE_UP, 1, [])


# --- handled marks (publish dedup) --------------------------------------------------------


async def test_an_event_a_handler_already_succeeded_for_is_not_dispatched_to_it_again(
    dispatcher: HandlerDispatcher,
) -> None:
    handler = Flaky(failures=0)
    dispatcher.register("user.*", handler, handler_id="h")

    [first] = await run(dispatcher, event())
    [second] = await run(dispatcher, event())

    assert first.outcome is HandlerOutcome.SUCCEEDED
    assert second == HandlerResult("ev-1", "h", HandlerOutcome.ALREADY_HANDLED, attempts=0)
    assert handler.calls == 1


async def test_an_event_whose_handler_gave_up_runs_it_again_when_published_again(
    dispatcher: HandlerDispatcher, marks: FakeMarks
) -> None:
    handler = Flaky(failures=4)  # the four attempts of the first publish all fail
    dispatcher.register("user.*", handler, handler_id="h")

    [first] = await run(dispatcher, event())
    [second] = await run(dispatcher, event())

    assert (first.outcome, second.outcome) == (HandlerOutcome.GAVE_UP, HandlerOutcome.SUCCEEDED)
    assert handler.calls == 5 and marks.marked == {("ev-1", "h")}


async def test_marks_are_per_handler_so_a_republish_reruns_only_the_handler_that_failed(
    dispatcher: HandlerDispatcher,
) -> None:
    steady, broken = Flaky(failures=0), Flaky(failures=4)
    dispatcher.register("user.*", steady, handler_id="steady")
    dispatcher.register("user.*", broken, handler_id="broken")

    await run(dispatcher, event())
    again = await run(dispatcher, event())

    assert {r.handler_id: r.outcome for r in again} == {
        "steady": HandlerOutcome.ALREADY_HANDLED,
        "broken": HandlerOutcome.SUCCEEDED,
    }
    assert (steady.calls, broken.calls) == (1, 5)


async def test_an_unreadable_mark_store_runs_the_handler_rather_than_dropping_the_event(
    dispatcher: HandlerDispatcher, marks: FakeMarks, caplog: pytest.LogCaptureFixture
) -> None:
    handler = Flaky(failures=0)
    dispatcher.register("user.*", handler, handler_id="h")
    marks.fail_reads = marks.fail_writes = True

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        [result] = await run(dispatcher, event())

    assert (result.outcome, handler.calls) == (HandlerOutcome.SUCCEEDED, 1)
    assert "event=event_bus.mark_read_failed event_id=ev-1 handler_id=h" in caplog.text
    assert "event=event_bus.mark_write_failed event_id=ev-1 handler_id=h" in caplog.text


async def test_one_event_and_handler_pair_is_never_in_flight_twice(
    dispatcher: HandlerDispatcher,
) -> None:
    release = asyncio.Event()
    calls: list[str] = []

    async def slow(received: Event) -> None:
        calls.append(received.event_id)
        await release.wait()

    dispatcher.register("user.*", slow, handler_id="slow")
    first = dispatcher.dispatch(event())
    duplicate = dispatcher.dispatch(event())
    release.set()
    await asyncio.wait_for(asyncio.gather(*first), BOUND_S)

    assert (len(first), duplicate, calls) == (1, [], ["ev-1"])


# --- sync and async handlers, matching ----------------------------------------------------


async def test_sync_handlers_run_in_a_worker_thread_and_async_ones_on_the_loop(
    dispatcher: HandlerDispatcher,
) -> None:
    threads: dict[str, int] = {}

    def sync_handler(received: Event) -> None:
        threads["sync"] = threading.get_ident()

    async def async_handler(received: Event) -> None:
        threads["async"] = threading.get_ident()

    dispatcher.register("user.*", sync_handler)
    dispatcher.register("user.*", async_handler)

    results = await run(dispatcher, event())

    assert [r.outcome for r in results] == [HandlerOutcome.SUCCEEDED] * 2
    assert threads["async"] == threading.get_ident()
    assert threads["sync"] != threading.get_ident()


async def test_a_failing_sync_handler_is_retried_like_an_async_one(
    dispatcher: HandlerDispatcher, sleep: FakeSleep
) -> None:
    calls: list[int] = []

    def sync_handler(received: Event) -> None:
        calls.append(1)
        if len(calls) < 2:
            raise ValueError("first attempt fails")

    dispatcher.register("user.*", sync_handler, handler_id="sync")

    [result] = await run(dispatcher, event())

    assert (result.outcome, result.attempts, sleep.delays) == (HandlerOutcome.SUCCEEDED, 2, [1.0])


async def test_handlers_match_event_types_with_case_sensitive_fnmatch(
    dispatcher: HandlerDispatcher,
) -> None:
    seen: list[tuple[str, str]] = []

    def recorder(handler_id: str) -> EventHandler:
        async def handle(received: Event) -> None:
            seen.append((handler_id, received.event_type))

        return handle

    dispatcher.register("user.*", recorder("users"), handler_id="users")
    dispatcher.register("*", recorder("all"), handler_id="all")
    dispatcher.register("order.created", recorder("orders"), handler_id="orders")

    for published in (event("1", "user.created"), event("2", "User.created"), event("3", "x")):
        await run(dispatcher, published)

    assert sorted(seen) == [
        ("all", "User.created"),
        ("all", "user.created"),
        ("all", "x"),
        ("users", "user.created"),
    ]


async def test_handlers_run_in_the_tenant_scope_of_their_event(
    dispatcher: HandlerDispatcher,
) -> None:
    tenants: list[str] = []

    async def handler(received: Event) -> None:
        tenants.append(current_tenant())

    dispatcher.register("user.*", handler)

    await run(dispatcher, event(tenant="acme"))

    assert tenants == ["acme"]


async def test_in_handler_is_true_inside_a_handler_and_tasks_it_starts_only(
    dispatcher: HandlerDispatcher,
) -> None:
    observed: dict[str, bool] = {}

    async def handler(received: Event) -> None:
        observed["handler"] = dispatcher.in_handler()

        async def child() -> bool:
            return dispatcher.in_handler()

        observed["child task"] = await asyncio.create_task(child())

    dispatcher.register("user.*", handler)
    await run(dispatcher, event())

    assert observed == {"handler": True, "child task": True}
    assert dispatcher.in_handler() is False
    assert HandlerDispatcher(FakeMarks()).in_handler() is False


async def test_a_closing_dispatcher_starts_nothing_and_names_each_refused_handler(
    dispatcher: HandlerDispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    handler = Flaky(failures=0)
    dispatcher.register("user.*", handler, handler_id="h")
    dispatcher.stop_accepting()

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        started = dispatcher.dispatch(event())

    assert started == [] and handler.calls == 0
    assert "event=event_bus.dispatch_refused reason=closing event_id=ev-1 handler_id=h" in (
        caplog.text
    )


async def test_a_bounded_wait_names_stragglers_and_leaves_them_running(
    dispatcher: HandlerDispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    release = asyncio.Event()

    async def slow(received: Event) -> None:
        await release.wait()

    dispatcher.register("user.*", slow, handler_id="slow")
    tasks = dispatcher.dispatch(event())

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        stragglers = await dispatcher.wait_for(tasks, 0.01, during="test")

    assert [(s.event_id, s.handler_id) for s in stragglers] == [("ev-1", "slow")]
    assert "dispatch_straggler during=test event_id=ev-1 handler_id=slow" in caplog.text
    assert not tasks[0].cancelled()
    release.set()
    [result] = await asyncio.wait_for(asyncio.gather(*tasks), BOUND_S)
    assert result.outcome is HandlerOutcome.SUCCEEDED
    assert dispatcher.in_flight() == []


# --- registration -------------------------------------------------------------------------


async def module_level_handler(received: Event) -> None:
    """A handler with a stable qualified name."""


def test_the_default_handler_id_is_the_qualified_name(dispatcher: HandlerDispatcher) -> None:
    handler_id = dispatcher.register("user.*", module_level_handler)

    assert handler_id == f"{__name__}.module_level_handler"
    assert default_handler_id(Flaky(0)) == f"{__name__}.Flaky"


def test_registering_one_handler_id_twice_is_a_named_error(
    dispatcher: HandlerDispatcher,
) -> None:
    dispatcher.register("user.*", module_level_handler)

    with pytest.raises(DuplicateHandlerError, match=r"module_level_handler.*handler_id="):
        dispatcher.register("order.*", module_level_handler)
    assert dispatcher.register("order.*", module_level_handler, handler_id="orders") == "orders"


def test_an_unregistered_handler_id_can_be_registered_again(
    dispatcher: HandlerDispatcher,
) -> None:
    dispatcher.register("user.*", module_level_handler, handler_id="h")

    assert dispatcher.unregister("h") is True
    assert dispatcher.unregister("h") is False
    assert dispatcher.register("user.*", module_level_handler, handler_id="h") == "h"


@pytest.mark.parametrize(
    ("pattern", "handler", "options", "message"),
    [
        ("", module_level_handler, {}, "non-empty event type"),
        ("user.*", "not callable", {}, "must be callable"),
        ("user.*", module_level_handler, {"retry": {"max_retries": 3}}, "RetryPolicy"),
        ("user.*", module_level_handler, {"handler_id": " "}, "handler_id"),
    ],
)
def test_unusable_registrations_are_named_errors(
    dispatcher: HandlerDispatcher,
    pattern: str,
    handler: Any,
    options: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(InvalidHandlerError, match=message):
        dispatcher.register(pattern, handler, **options)


# --- the decorator ------------------------------------------------------------------------


class RecordingBus:
    """Stands in for an EventBus: the decorator only calls register_handler."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, Callable[..., object], str | None, RetryPolicy]] = []

    def register_handler(
        self,
        pattern: str,
        handler: Callable[..., object],
        *,
        handler_id: str | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen value
    ) -> str:
        self.registered.append((pattern, handler, handler_id, retry))
        return handler_id or ""


def test_the_decorator_with_a_bus_registers_at_once_and_returns_the_function() -> None:
    bus = RecordingBus()
    policy = RetryPolicy(max_retries=1)

    @event_handler("user.*", bus=bus, retry=policy)  # type: ignore[arg-type]
    async def on_user(received: Event) -> None:
        """Handles users."""

    assert bus.registered == [("user.*", on_user, default_handler_id(on_user), policy)]
    assert on_user.__doc__ == "Handles users."
    assert not hasattr(on_user, "__plaita_event_handlers__")


def handler_module(name: str, **members: object) -> types.ModuleType:
    module = types.ModuleType(name)
    for member_name, member in members.items():
        if callable(member) and not isinstance(member, type):
            member.__module__ = name
        setattr(module, member_name, member)
    return module


def test_the_decorator_without_a_bus_records_what_register_handlers_from_picks_up(
    dispatcher: HandlerDispatcher,
) -> None:
    @event_handler("user.*", handler_id="users", retry=RetryPolicy(max_retries=0))
    @event_handler("order.*", handler_id="orders")
    def on_anything(received: Event) -> None: ...

    def undecorated(received: Event) -> None: ...

    # The same function under a second name (an alias) counts once.
    module = handler_module(
        "shop.handlers", on_anything=on_anything, alias=on_anything, undecorated=undecorated
    )

    assert sorted(dispatcher.register_declared(module)) == ["orders", "users"]
    assert [r.handler_id for r in dispatcher.matching("user.created")] == ["users"]
    assert dispatcher.matching("user.created")[0].retry == RetryPolicy(max_retries=0)
    assert [r.handler_id for r in dispatcher.matching("order.paid")] == ["orders"]


def test_a_module_registers_only_the_handlers_defined_in_it(
    dispatcher: HandlerDispatcher,
) -> None:
    @event_handler("user.*", handler_id="imported")
    def elsewhere(received: Event) -> None: ...

    elsewhere.__module__ = "shop.other"
    module = types.ModuleType("shop.handlers")
    module.elsewhere = elsewhere  # type: ignore[attr-defined]

    assert dispatcher.register_declared(module) == []


def test_an_explicit_list_registers_its_functions_and_rejects_undecorated_ones(
    dispatcher: HandlerDispatcher,
) -> None:
    @event_handler("user.*")
    async def on_user(received: Event) -> None: ...

    def plain(received: Event) -> None: ...

    listed: Iterable[object] = [on_user]
    assert dispatcher.register_declared(listed) == [default_handler_id(on_user)]
    with pytest.raises(InvalidHandlerError, match="not marked with @event_handler"):
        dispatcher.register_declared([plain])


def test_the_decorator_validates_its_pattern_at_decoration_time() -> None:
    with pytest.raises(InvalidHandlerError, match="non-empty"):
        event_handler("")


# --- publish_sync -------------------------------------------------------------------------


async def test_publish_sync_on_a_thread_with_a_running_loop_says_to_await_publish() -> None:
    published: list[str] = []

    async def publish() -> None:
        published.append("ran")

    with pytest.raises(PublishSyncInLoopError, match=r"await bus\.publish"):
        publish_from_sync_code(None, publish, event_id="ev-1", timeout_s=1)
    assert published == []


def test_publish_sync_without_any_loop_runs_the_publish_on_a_private_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    after: list[bool] = []

    async def publish() -> None:
        loops.append(asyncio.get_running_loop())

    async def after_private_loop() -> None:
        after.append(asyncio.get_running_loop() is loops[0])

    publish_from_sync_code(
        None, publish, event_id="ev-1", timeout_s=1, after_private_loop=after_private_loop
    )

    assert len(loops) == 1 and loops[0].is_closed()
    assert after == [True]
