"""Bad input to the Python API gets a named error that says what to do, and changes
nothing: a URL plaita does not serve, a client used before it opened, an unreachable Redis,
two workers on one client, a handler the worker may not run, a deleted execution."""

from __future__ import annotations

import socket

import pytest

import plaita
from plaita.application.handlers import handler_reference
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import (
    HandlerNotAllowedError,
    HandlerNotImportableError,
    InvalidConfigurationError,
    InvalidExecutionIdError,
    UnknownExecutionError,
    UnknownHandlerError,
)
from plaita.entrypoints.sdk.client import client_settings

from . import handlers
from .conftest import APPROVAL, HANDLER_MODULES, wait_for_status

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("url", ["http://localhost:6379", "redis", "", "memory:"])
def test_a_url_plaita_does_not_serve_is_refused_with_the_forms_it_does(url: str) -> None:
    with pytest.raises(InvalidConfigurationError, match=r"redis\+cluster://HOST:PORT"):
        plaita.Client(url)


def test_the_url_forms_choose_the_store() -> None:
    assert client_settings("memory://").backend == "memory"
    node = client_settings("redis://127.0.0.1:6379/3")
    assert (node.backend, node.redis_url, node.redis_cluster) == (
        "redis",
        "redis://127.0.0.1:6379/3",
        False,
    )
    cluster = client_settings("redis+cluster://127.0.0.1:7000")
    assert (cluster.redis_url, cluster.redis_cluster) == ("redis://127.0.0.1:7000", True)
    sql = client_settings("memory://", database_url="sqlite:///x.db")
    assert (sql.storage, sql.database_url) == ("sql", "sqlite:///x.db")


def test_the_deployments_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLAITA_QUEUE_NAME", "billing")
    assert client_settings("memory://").queue_name == "billing"
    monkeypatch.setenv("PLAITA_MAX_DELIVERIES", "0")
    with pytest.raises(InvalidConfigurationError, match="max_deliveries"):
        client_settings("memory://")


def test_a_bad_tenant_is_refused_by_name() -> None:
    with pytest.raises(plaita.PlaitaError, match="tenant"):
        plaita.Client("memory://", tenant="no spaces please")


async def test_a_client_used_outside_async_with_says_how_to_open_it() -> None:
    client = plaita.Client("memory://")
    with pytest.raises(plaita.ClientClosedError, match="async with Client"):
        await client.publish("anything")
    async with client:
        assert await client.publish("anything")
    with pytest.raises(plaita.ClientClosedError):
        await client.start("sdk_approval")


async def test_an_unreachable_redis_is_named_on_open() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(plaita.StoreUnreachableError, match=f"127.0.0.1:{port}.*Is it running"):
        async with plaita.Client(f"redis://127.0.0.1:{port}/0"):
            pass


async def test_one_worker_per_client() -> None:
    async with (
        plaita.Client("memory://") as client,
        plaita.Worker(client, handler_modules=HANDLER_MODULES),
    ):
        with pytest.raises(plaita.WorkerAttachError, match="one worker per client"):
            async with plaita.Worker(client, handler_modules=HANDLER_MODULES):
                pass
    # Stopped, the client takes a worker again.
    async with plaita.Client("memory://") as client:
        async with plaita.Worker(client, handler_modules=HANDLER_MODULES):
            pass
        async with plaita.Worker(client, handlers=[handlers.submit]) as worker:
            assert worker.handler_modules == ("tests.sdk.handlers",)


def test_worker_arguments_are_checked() -> None:
    client = plaita.Client("memory://")
    with pytest.raises(TypeError, match=r"pass \['tests.sdk.handlers'\]"):
        plaita.Worker(client, handler_modules="tests.sdk.handlers")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        plaita.Worker(client, concurrency=0)
    with pytest.raises(HandlerNotImportableError, match="lambda"):
        plaita.Worker(client, handlers=[lambda params, ctx: params])


async def test_a_handler_module_that_does_not_import_is_named_at_start() -> None:
    async with plaita.Client("memory://") as client:
        with pytest.raises(UnknownHandlerError, match=r"tests\.sdk\.no_such_module"):
            async with plaita.Worker(client, handler_modules=["tests.sdk.no_such_module"]):
                pass
        # Nothing stays attached: a worker starts on the client afterwards.
        async with plaita.Worker(client, handler_modules=HANDLER_MODULES):
            pass


async def test_with_a_worker_attached_registration_checks_its_allowlist() -> None:
    async with (
        plaita.Client("memory://") as client,
        plaita.Worker(client, handler_modules=["examples.handlers"]),
    ):
        with pytest.raises(HandlerNotAllowedError, match=r"tests\.sdk\.handlers"):
            await client.register(APPROVAL)


async def test_a_deleted_execution_has_no_result() -> None:
    async with (
        plaita.Client("memory://") as client,
        plaita.Worker(client, handler_modules=HANDLER_MODULES),
    ):
        await client.register(APPROVAL)
        handle = await client.start("sdk_approval", {"amount": 2})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED)
        with tenant_scope("default"):
            await client.container.delete_execution()(handle.execution_id, reason="cleanup")
        with pytest.raises(UnknownExecutionError, match="was deleted"):
            await handle.result(timeout=5)


def test_a_bad_execution_id_is_refused_before_anything_runs() -> None:
    with pytest.raises(InvalidExecutionIdError):
        plaita.Client("memory://").handle("not an id")


def test_handler_reference_is_the_inverse_of_resolve() -> None:
    assert handler_reference(handlers.submit) == "tests.sdk.handlers:submit"

    def nested(params: object, ctx: object) -> None:
        return None

    with pytest.raises(HandlerNotImportableError, match="defined inside the function"):
        handler_reference(nested)
    with pytest.raises(HandlerNotImportableError, match="has no module-level name"):
        handler_reference("tests.sdk.handlers:submit")  # type: ignore[arg-type]


async def test_an_older_version_registered_later_does_not_become_latest() -> None:
    v2 = {**APPROVAL, "version": "2"}
    async with plaita.Client("memory://") as client:
        assert (await client.register(v2)).is_latest
        older = await client.register(APPROVAL)  # version "1"
        assert older.created and not older.is_latest
        with tenant_scope("default"):
            assert (await client.container.flows().lookup("sdk_approval")).flow.version == "2"
        rollback = await client.register(APPROVAL, latest=True)
        assert rollback.is_latest


async def test_with_a_worker_a_misspelt_function_is_refused_naming_the_modules_callables() -> None:
    misspelt = {
        **APPROVAL,
        "flow_id": "sdk_misspelt",
        "nodes": [
            {**APPROVAL["nodes"][0], "handler": "tests.sdk.handlers:submt"},
            *APPROVAL["nodes"][1:],
        ],
    }
    async with (
        plaita.Client("memory://") as client,
        plaita.Worker(client, handler_modules=HANDLER_MODULES),
    ):
        with pytest.raises(UnknownHandlerError, match="submt") as refused:
            await client.register(misspelt)
        assert "submit" in str(refused.value)  # the module's callables are named
