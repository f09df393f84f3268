"""The console API's events, queue, dead letters, workers, config, flows, metrics, health and
page on the memory twin (C1, C2, C5, W10, W16)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from dependency_injector import providers

from plaita.application.ports import Delivery, WorkerInstance
from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container, build_container

from .conftest import TOKENS, approval_document, auth, memory_settings, register_approval

# --- health, readiness, metrics -------------------------------------------------------------


async def test_healthz_needs_no_token(client: httpx.AsyncClient) -> None:
    answer = await client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


async def test_readyz_is_ready_when_the_stores_answer(client: httpx.AsyncClient) -> None:
    answer = await client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready"}


class _BrokenQueue:
    async def stats(self) -> Any:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


async def test_readyz_is_503_with_the_reason_when_a_store_fails(
    client: httpx.AsyncClient, container: Container
) -> None:
    container.queue.override(providers.Object(_BrokenQueue()))
    answer = await client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["status"] == "unavailable"
    assert "Connection refused" in answer.json()["reason"]


async def test_a_store_failure_on_an_api_route_is_503_not_500(
    client: httpx.AsyncClient, container: Container
) -> None:
    container.queue.override(providers.Object(_BrokenQueue()))
    answer = await client.get("/api/v1/queue", headers=auth("viewer"))
    assert answer.status_code == 503
    assert answer.json()["error"] == "StoreUnavailableError"
    assert "Connection refused" in answer.json()["message"]


async def test_metrics_show_the_queue_workers_and_requests(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    await client.post("/api/v1/executions", json={"flow_id": "approval"}, headers=auth("operator"))
    await _register_worker(container, "w-1", "running")
    answer = await client.get("/metrics", headers=auth("viewer"))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    assert "plaita_stream_length 1.0" in text
    assert "plaita_stream_pending 0.0" in text
    assert "plaita_dlq_length 0.0" in text
    assert "plaita_delayed_carriers 0.0" in text
    assert "plaita_queue_lag_seconds" in text
    assert 'plaita_workers{status="running"} 1.0' in text
    assert 'plaita_workers{status="draining"} 0.0' in text
    assert 'plaita_worker_heartbeat_age_seconds{instance_id="w-1"}' in text
    assert (
        'plaita_console_requests_total{method="POST",route="/api/v1/executions",status="201"} 1.0'
        in text
    )


async def test_metrics_need_a_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/metrics")).status_code == 401


# --- queue and workers ------------------------------------------------------------------------


async def test_queue_counts_the_stream_dlq_and_delay_queue(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    for _ in range(2):
        await client.post(
            "/api/v1/executions", json={"flow_id": "approval"}, headers=auth("operator")
        )
    await container.delay_queue().schedule(_envelope("later"), due_ms=10**13)
    await _dead_letter(container, "dead-1")
    answer = await client.get("/api/v1/queue", headers=auth("viewer"))
    assert answer.status_code == 200
    # The dead-lettered carrier was acked but, as XLEN counts, is still an entry of the stream.
    body = answer.json()
    lag = body.pop("lag_ms")
    assert body == {"stream_length": 3, "pending": 0, "dlq_length": 1, "delayed": 1}
    # Two starts nobody has read yet: the lag is the age of the older one.
    assert isinstance(lag, int) and 0 <= lag < 60_000


async def _register_worker(container: Container, instance_id: str, status: str) -> None:
    now = container.clock().now_ms()
    await container.registry().put(
        WorkerInstance(
            instance_id,
            status,
            heartbeat_ms=now - 1500,
            started_ms=now - 60_000,
            config_family="fam",
            config_generation="gen",
            budget_generation="bud",
        ),
        ttl_ms=60_000,
    )


async def test_workers_lists_instances_with_their_heartbeat_age(
    client: httpx.AsyncClient, container: Container
) -> None:
    await _register_worker(container, "w-1", "running")
    await _register_worker(container, "w-2", "draining")
    answer = await client.get("/api/v1/workers", headers=auth("viewer"))
    assert answer.status_code == 200
    items = answer.json()["items"]
    assert [(w["instance_id"], w["status"]) for w in items] == [
        ("w-1", "running"),
        ("w-2", "draining"),
    ]
    assert all(1500 <= w["heartbeat_age_ms"] < 60_000 for w in items)
    assert items[0]["config_family"] == "fam"
    assert items[0]["budget_generation"] == "bud"


# --- config -----------------------------------------------------------------------------------


async def test_config_shows_settings_without_secrets() -> None:
    secret_tokens = json.dumps([TOKENS["admin"]])
    container = build_container(
        memory_settings(
            redis_url="redis://plaita:hunter2@redis.internal:6380/3",
            alert_webhook_url="https://hooks.example/alert?token=s3cr3t&channel=ops",
            console_tokens=secret_tokens,
        )
    )
    app = create_app(container, tokens=list(TOKENS.values()), max_body_bytes=4096)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        answer = await http.get("/api/v1/config", headers=auth("viewer"))
    assert answer.status_code == 200
    shown = answer.json()
    text = answer.text
    for secret in ("hunter2", "s3cr3t", *(t["token"] for t in TOKENS.values())):
        assert secret not in text
    assert shown["redis_url"] == "redis://plaita:***@redis.internal:6380/3"
    assert shown["alert_webhook_url"] == "https://hooks.example/alert?token=***&channel=***"
    assert shown["backend"] == "memory"
    assert shown["handler_modules"] == ["examples.handlers"]
    assert shown["console_max_body_bytes"] == 4096
    assert {"name": "acme-root", "role": "admin", "tenants": ["acme"]} in shown["console_tokens"]
    generations = container.generations()
    # W12: what this console stamps, to compare with the workers' (`plaita workers list`).
    assert shown["config_generations"] == {
        "config_family": generations.config_family,
        "config_generation": generations.config_generation,
        "budget_generation": generations.budget_generation,
    }


# --- events -----------------------------------------------------------------------------------


async def test_publish_list_and_show_events(client: httpx.AsyncClient) -> None:
    published = []
    for n, kind in enumerate(["order.paid", "order.paid", "order.shipped"]):
        answer = await client.post(
            "/api/v1/events",
            json={"event_type": kind, "correlation_id": f"o-{n % 2}", "data": {"n": n}},
            headers=auth("operator"),
        )
        assert answer.status_code == 201
        published.append(answer.json())
    assert published[0]["source"] == "console"
    assert published[0]["tenant_id"] == "default"

    everything = await client.get("/api/v1/events", headers=auth("viewer"))
    assert [e["event_id"] for e in everything.json()["items"]] == [e["event_id"] for e in published]
    paid = await client.get(
        "/api/v1/events",
        params={"type": "order.paid", "correlation_id": "o-0"},
        headers=auth("viewer"),
    )
    assert [e["data"] for e in paid.json()["items"]] == [{"n": 0}]
    limited = await client.get("/api/v1/events", params={"limit": 1}, headers=auth("viewer"))
    assert len(limited.json()["items"]) == 1
    window = await client.get(
        "/api/v1/events",
        params={"since_ms": published[0]["timestamp_ms"] + 10**7},
        headers=auth("viewer"),
    )
    assert window.json() == {"items": []}

    one = await client.get(f"/api/v1/events/{published[2]['event_id']}", headers=auth("viewer"))
    assert one.status_code == 200
    assert one.json() == published[2]


async def test_an_unknown_event_is_404(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/events/nope", headers=auth("viewer"))
    assert answer.status_code == 404
    assert answer.json()["error"] == "UnknownEventError"


async def test_an_empty_event_window_is_422(client: httpx.AsyncClient) -> None:
    answer = await client.get(
        "/api/v1/events", params={"since_ms": 2000, "until_ms": 1000}, headers=auth("viewer")
    )
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidEventQueryError"
    assert "until_ms 1000 is before since_ms 2000" in answer.json()["message"]


# --- dead letters -----------------------------------------------------------------------------


def _envelope(execution_id: str, tenant: str = "default") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="approval",
        version="1",
        params={"amount": 1},
        now_ms=1_760_000_000_000,
        tenant_id=tenant,
        generations=LEGACY_GENERATIONS,
    )


async def _dead_letter(container: Container, execution_id: str, tenant: str = "default") -> str:
    queue = container.queue()
    await queue.ensure_group()
    await queue.enqueue(_envelope(execution_id, tenant))
    [delivery] = await queue.read("test-consumer", count=1, block_ms=1)
    assert isinstance(delivery, Delivery)
    return await queue.dead_letter(delivery, "test: poisoned")


async def test_dlq_list_show_and_replay_once(
    client: httpx.AsyncClient, container: Container
) -> None:
    """W10 through the API (admin): a replay puts the carrier back once; the entry is kept."""
    dlq_id = await _dead_letter(container, "dead-1")
    await _dead_letter(container, "acme-dead", tenant="acme")

    listed = await client.get("/api/v1/dlq", headers=auth("admin"))
    assert listed.status_code == 200
    [entry] = listed.json()["items"]
    assert entry["dlq_id"] == dlq_id
    assert entry["execution_id"] == "dead-1"
    assert entry["reason"] == "test: poisoned"
    assert entry["replayed"] is None

    shown = await client.get(f"/api/v1/dlq/{dlq_id}", headers=auth("admin"))
    assert shown.status_code == 200
    assert shown.json() == entry

    stream_before = (await container.queue().stats()).length
    replayed = await client.post(
        f"/api/v1/dlq/{dlq_id}/replay", json={"tenant": "default"}, headers=auth("admin")
    )
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["outcome"] == "replayed"
    assert replayed.json()["execution_id"] == "dead-1"
    assert (await container.queue().stats()).length == stream_before + 1

    twice = await client.post(f"/api/v1/dlq/{dlq_id}/replay", headers=auth("admin"))
    assert twice.status_code == 409
    assert twice.json()["error"] == "ReplayRefusedError"
    assert twice.json()["outcome"] == "already_replayed"
    assert (await container.queue().stats()).length == stream_before + 1

    marked = await client.get(f"/api/v1/dlq/{dlq_id}", headers=auth("admin"))
    assert marked.json()["replayed"]["execution_id"] == "dead-1"


async def test_a_replay_into_an_execution_that_ended_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, container: Container
) -> None:
    """A replay that would do nothing says so (409 execution_ended), enqueues nothing and
    keeps the entry's one replay."""
    dlq_id = await _dead_letter(container, "ended-1")
    with tenant_scope("default"):
        lease = await container.leases().acquire("ended-1", "test", ttl_ms=10_000)
        assert lease is not None
        state = ExecutionState.new(
            execution_id="ended-1",
            flow_id="approval",
            flow_version="1",
            fingerprint="",
            start_node_id="request",
            input={"amount": 1},
            now_ms=1_760_000_000_000,
        )
        failed = state.transition(
            ExecutionStatus.ERROR,
            now_ms=1_760_000_000_001,
            error=ExecutionError(500, "boom", "request"),
        )
        await container.executions().save(failed, fence=lease.generation)
        await container.leases().release(lease)
    stream_before = (await container.queue().stats()).length

    answer = await client.post(
        f"/api/v1/dlq/{dlq_id}/replay", json={"tenant": "default"}, headers=auth("admin")
    )

    assert answer.status_code == 409, answer.text
    assert answer.json()["outcome"] == "execution_ended"
    assert "has already ended (error)" in answer.json()["message"]
    assert "plaita executions retry ended-1" in answer.json()["message"]
    assert (await container.queue().stats()).length == stream_before
    shown = await client.get(f"/api/v1/dlq/{dlq_id}", headers=auth("admin"))
    assert shown.json()["replayed"] is None


async def test_dlq_entries_of_another_tenant_are_hidden_and_not_replayed(
    client: httpx.AsyncClient, container: Container
) -> None:
    acme_dlq_id = await _dead_letter(container, "acme-dead", tenant="acme")
    shown = await client.get(f"/api/v1/dlq/{acme_dlq_id}", headers=auth("admin"))
    assert shown.status_code == 404
    listed = await client.get("/api/v1/dlq", params={"tenant": "acme"}, headers=auth("acme"))
    assert [e["dlq_id"] for e in listed.json()["items"]] == [acme_dlq_id]

    stream_before = (await container.queue().stats()).length
    refused = await client.post(
        f"/api/v1/dlq/{acme_dlq_id}/replay", json={"tenant": "default"}, headers=auth("admin")
    )
    assert refused.status_code == 409
    assert refused.json()["outcome"] == "tenant_mismatch"
    assert (await container.queue().stats()).length == stream_before


async def test_an_unknown_dead_letter_is_404(client: httpx.AsyncClient) -> None:
    for answer in (
        await client.get("/api/v1/dlq/1-0", headers=auth("admin")),
        await client.post("/api/v1/dlq/1-0/replay", headers=auth("admin")),
    ):
        assert answer.status_code == 404
        assert answer.json()["error"] == "UnknownDeadLetterError"


# --- flows ------------------------------------------------------------------------------------


async def test_register_list_and_show_a_flow_as_a_graph(client: httpx.AsyncClient) -> None:
    registered = await client.post("/api/v1/flows", json=approval_document(), headers=auth("admin"))
    assert registered.status_code == 201
    assert registered.json()["flow_id"] == "approval"
    assert len(registered.json()["fingerprint"]) == 64

    listed = await client.get("/api/v1/flows", headers=auth("viewer"))
    assert listed.json() == {
        "items": [
            {
                "flow_id": "approval",
                "version": "1",
                "fingerprint": registered.json()["fingerprint"],
                "node_count": 9,
                "tenant_id": "default",
                "shared": False,
            }
        ]
    }

    shown = await client.get("/api/v1/flows/approval", headers=auth("viewer"))
    assert shown.status_code == 200
    flow = shown.json()
    assert flow["document"]["start"] == "request"
    nodes = {node["id"]: node for node in flow["graph"]["nodes"]}
    assert nodes["wait_decision"] == {
        "id": "wait_decision",
        "type": "event",
        "label": "wait for approval_decision",
    }
    assert nodes["request"]["label"] == "examples.handlers:create_request"
    edges = {(e["from"], e["to"]): e["label"] for e in flow["graph"]["edges"]}
    assert edges[("check", "wait_decision")] == "then"
    assert edges[("check", "auto_approve")] == "else"
    assert edges[("request", "check")] == "next"
    assert not any(source == "done" for source, _ in edges)
    assert len(flow["graph"]["edges"]) == 10


async def test_a_flow_version_can_be_asked_for(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    second = {**approval_document(), "version": "2"}
    await client.post("/api/v1/flows", json=second, headers=auth("admin"))
    latest = await client.get("/api/v1/flows/approval", headers=auth("viewer"))
    first = await client.get(
        "/api/v1/flows/approval", params={"version": "1"}, headers=auth("viewer")
    )
    missing = await client.get(
        "/api/v1/flows/approval", params={"version": "9"}, headers=auth("viewer")
    )
    assert latest.json()["version"] == "2"
    assert first.json()["version"] == "1"
    assert missing.status_code == 404
    assert missing.json()["error"] == "UnknownFlowError"


async def test_event_and_switch_edges_are_labelled_by_role(client: httpx.AsyncClient) -> None:
    document = {
        "flow_id": "roles",
        "start": "pick",
        "nodes": [
            {
                "id": "pick",
                "type": "switch",
                "cases": [{"when": "x > 1", "next": "wait"}],
                "default": "nap",
            },
            {
                "id": "wait",
                "type": "event",
                "event_type": "go",
                "timeout": 1000,
                "timeout_next": "end",
                "next": "end",
            },
            {"id": "nap", "type": "sleep", "duration": 10, "next": "end"},
            {"id": "end", "type": "end"},
        ],
    }
    assert (
        await client.post("/api/v1/flows", json=document, headers=auth("admin"))
    ).status_code == 201
    graph = (await client.get("/api/v1/flows/roles", headers=auth("viewer"))).json()["graph"]
    assert sorted((e["from"], e["to"], e["label"]) for e in graph["edges"]) == [
        ("nap", "end", "next"),
        ("pick", "nap", "default"),
        ("pick", "wait", "x > 1"),
        ("wait", "end", "next"),
        ("wait", "end", "timeout_next"),
    ]
    labels = {n["id"]: n["label"] for n in graph["nodes"]}
    assert labels == {
        "pick": "switch (1 cases)",
        "wait": "wait for go",
        "nap": "sleep 10",
        "end": "end",
    }


async def test_an_unknown_flow_is_404(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/flows/nope", headers=auth("viewer"))
    assert answer.status_code == 404
    assert "register it" in answer.json()["message"]


# --- the page ---------------------------------------------------------------------------------


async def test_the_page_and_its_static_files_are_served_without_a_token(
    container: Container, tmp_path: Path
) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>plaita console</title>")
    (tmp_path / "app.js").write_text("export const ok = true;\n")
    app = create_app(container, tokens=list(TOKENS.values()), static_dir=tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        page = await http.get("/")
        script = await http.get("/static/app.js")
        missing = await http.get("/static/nope.js")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "plaita console" in page.text
    assert script.status_code == 200
    assert "export const ok" in script.text
    assert missing.status_code == 404


async def test_without_an_index_the_page_is_a_clear_404_and_the_api_still_works(
    container: Container, tmp_path: Path
) -> None:
    app = create_app(container, tokens=list(TOKENS.values()), static_dir=tmp_path / "absent")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        page = await http.get("/")
        health = await http.get("/healthz")
    assert page.status_code == 404
    assert page.json()["error"] == "PageNotInstalledError"
    assert "index.html" in page.json()["message"]
    assert health.status_code == 200


def test_the_page_is_packaged_beside_the_app() -> None:
    """The installed package serves its own static/ folder (package data)."""
    from plaita.entrypoints.console.app import STATIC_DIR

    assert STATIC_DIR.name == "static"
    assert STATIC_DIR.parent.joinpath("app.py").exists()


async def test_openapi_and_docs_are_served(client: httpx.AsyncClient) -> None:
    schema = await client.get("/openapi.json")
    docs = await client.get("/docs")
    assert schema.status_code == 200
    assert schema.json()["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert docs.status_code == 200


async def test_docs_load_swagger_ui_from_the_console_never_a_cdn(
    client: httpx.AsyncClient,
) -> None:
    """/docs works without internet (issue 16): every asset it names is served here."""
    page = (await client.get("/docs")).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(url.startswith("/docs-assets/") for url in assets), assets
    assert "cdn" not in page.lower()
    for url in assets:
        answer = await client.get(url)
        assert answer.status_code == 200, url
        assert len(answer.content) > 100


@pytest.mark.parametrize("path", ["/api/v1/nowhere", "/api/v2/executions"])
async def test_unknown_routes_answer_a_named_404(client: httpx.AsyncClient, path: str) -> None:
    answer = await client.get(path, headers=auth("viewer"))
    assert answer.status_code == 404
    assert answer.json()["error"] == "NotFoundError"


async def test_a_wrong_method_is_405_with_the_allowed_ones(client: httpx.AsyncClient) -> None:
    answer = await client.put("/api/v1/executions", headers=auth("viewer"))
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, POST"
    assert answer.json()["error"] == "MethodNotAllowedError"


async def test_starts_are_scoped_to_the_tenant_named_in_the_body(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    answer = await client.post(
        "/api/v1/executions",
        json={"flow_id": "approval", "tenant": "acme", "execution_id": "t-1"},
        headers=auth("acme"),
    )
    assert answer.status_code == 201
    [delivery] = await container.queue().read("probe", count=1, block_ms=1)
    assert delivery.envelope is not None
    assert delivery.envelope.tenant_id == "acme"
    with tenant_scope("acme"):
        state = await container.executions().load("t-1")  # accepted, no worker picked it up
        assert state is not None and state.status is ExecutionStatus.PENDING
    with tenant_scope("default"):
        assert await container.executions().load("t-1") is None


async def test_whoami_names_the_token_without_its_secret(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/whoami", headers=auth("operator"))
    assert answer.status_code == 200
    body = answer.json()
    assert body["role"] == "operator" and body["tenants"]
    assert all(TOKENS["operator"]["token"] not in str(v) for v in body.values())
