"""Inbound webhooks on the console (V10), with a real app: ``POST /hooks/{name}`` needs no
token, a good signature publishes the event and the waiting execution resumes (memory twin
and real Redis); a missing, wrong, stale or replayed signature is 401 and changes nothing.
The admin API creates, lists, shows and deletes hooks per tenant and never shows a secret;
the hooks file is read when the app is built, and one it cannot use stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from plaita.domain.errors import HooksFileError
from plaita.domain.hook_requests import MAX_HOOK_BODY_BYTES, sign
from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container, build_container

from .conftest import (
    REPO_ROOT,
    TERMINAL,
    TOKENS,
    auth,
    memory_settings,
    register_approval,
    running_services,
    snapshot,
    start,
    wait_for,
)
from .test_console_redis import (  # noqa: F401
    _free_port,
    _plaita,
    _wait_healthy,
    namespace,
    redis_container,
)

SECRET = "whsec-0123456789abcdef"
HOOK = {
    "name": "approvals",
    "event_type": "approval_decision",
    "correlation_id_pointer": "/execution_id",
    "data_pointer": "/decision",
    "secret": SECRET,
}


def signed(body: bytes, *, age_s: int = 0, secret: str = SECRET) -> dict[str, str]:
    timestamp = str(int(time.time()) - age_s)
    return {
        "Content-Type": "application/json",
        "X-Plaita-Timestamp": timestamp,
        "X-Plaita-Signature": "sha256=" + sign(secret.encode(), timestamp, body),
    }


def decision(execution_id: str, approved: bool) -> bytes:
    return json.dumps({"execution_id": execution_id, "decision": {"approved": approved}}).encode()


async def create_hook(client: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    answer = await client.post("/api/v1/hooks", json={**HOOK, **fields}, headers=auth("admin"))
    assert answer.status_code == 201, answer.text
    return answer


async def approve_through_the_hook(client: httpx.AsyncClient, container: Container) -> None:
    """Start an approval that waits for a decision, send the decision to the hook as a signed
    request, and see the execution resume and complete."""
    await register_approval(client)
    await create_hook(client)
    async with running_services(container):
        execution_id = await start(client, 5000)
        await wait_for(client, execution_id, {"suspended"})
        body = decision(execution_id, True)
        accepted = await client.post("/hooks/approvals", content=body, headers=signed(body))
        assert accepted.status_code == 202, accepted.text
        done = await wait_for(client, execution_id, TERMINAL)
    assert done["status"] == "completed"
    assert done["result"]["outcome"] == "shipped"
    event = await client.get(
        f"/api/v1/events/{accepted.json()['event_id']}", headers=auth("viewer")
    )
    assert event.json()["correlation_id"] == execution_id
    assert event.json()["source"] == "hook:approvals"
    assert accepted.json() == {
        "event_id": event.json()["event_id"],
        "hook": "approvals",
        "event_type": "approval_decision",
        "correlation_id": execution_id,
        "tenant_id": "default",
    }


async def test_a_good_signature_resumes_the_waiting_execution(
    client: httpx.AsyncClient, container: Container
) -> None:
    await approve_through_the_hook(client, container)


@pytest.mark.redis
@pytest.mark.skipif(
    not os.environ.get("PLAITA_TEST_REDIS_URL"),
    reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it",
)
async def test_a_good_signature_resumes_the_waiting_execution_on_redis(
    redis_container: Container,  # noqa: F811
) -> None:
    app = create_app(redis_container, tokens=list(TOKENS.values()))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as client:
        await approve_through_the_hook(client, redis_container)
        body = decision("someone", True)
        headers = signed(body)
        assert (await client.post("/hooks/approvals", content=body, headers=headers)).is_success
        replay = await client.post("/hooks/approvals", content=body, headers=headers)
    assert replay.status_code == 401
    assert replay.json()["error"] == "HookReplayError"


@pytest.mark.parametrize(
    ("headers_of", "error"),
    [
        pytest.param(lambda body: {}, "MissingHookSignatureError", id="missing"),
        pytest.param(
            lambda body: {**signed(body), "X-Plaita-Signature": "sha256=" + "0" * 64},
            "InvalidHookSignatureError",
            id="bad",
        ),
        pytest.param(
            lambda body: signed(body, secret="another-secret-0123456"),
            "InvalidHookSignatureError",
            id="another-secret",
        ),
        pytest.param(
            lambda body: signed(body + b" "), "InvalidHookSignatureError", id="wrong-body"
        ),
        pytest.param(lambda body: signed(body, age_s=301), "StaleHookTimestampError", id="stale"),
        pytest.param(
            lambda body: signed(body, age_s=-120), "FutureHookTimestampError", id="future-skewed"
        ),
    ],
)
async def test_a_refused_signature_is_401_and_publishes_nothing(
    client: httpx.AsyncClient, container: Container, headers_of: Any, error: str
) -> None:
    await create_hook(client)
    before = await snapshot(container)
    body = decision("x-1", True)
    answer = await client.post("/hooks/approvals", content=body, headers=headers_of(body))
    assert answer.status_code == 401
    assert answer.json()["error"] == error
    assert "Bearer" not in answer.headers.get("WWW-Authenticate", "")
    assert await snapshot(container) == before


async def test_a_replayed_request_is_401_and_publishes_nothing_more(
    client: httpx.AsyncClient, container: Container
) -> None:
    await create_hook(client)
    body = decision("x-1", True)
    headers = signed(body)
    assert (await client.post("/hooks/approvals", content=body, headers=headers)).status_code == 202
    after_first = await snapshot(container)
    replay = await client.post("/hooks/approvals", content=body, headers=headers)
    assert replay.status_code == 401
    assert replay.json()["error"] == "HookReplayError"
    assert await snapshot(container) == after_first
    assert after_first["events"] == 1


async def test_unknown_hook_unreadable_body_and_oversize_body_publish_nothing(
    client: httpx.AsyncClient, container: Container
) -> None:
    await create_hook(client)
    before = await snapshot(container)
    body = decision("x-1", True)
    unknown = await client.post("/hooks/nope", content=body, headers=signed(body))
    assert (unknown.status_code, unknown.json()["error"]) == (404, "UnknownHookError")
    lacking = json.dumps({"decision": {"approved": True}}).encode()
    unreadable = await client.post("/hooks/approvals", content=lacking, headers=signed(lacking))
    assert (unreadable.status_code, unreadable.json()["error"]) == (400, "HookPointerMissingError")
    assert "'/execution_id'" in unreadable.json()["message"]
    not_json = b"approved=true"
    form = await client.post("/hooks/approvals", content=not_json, headers=signed(not_json))
    assert (form.status_code, form.json()["error"]) == (400, "HookPayloadError")
    large = b" " * (MAX_HOOK_BODY_BYTES + 1)
    oversize = await client.post("/hooks/approvals", content=large, headers=signed(large))
    assert (oversize.status_code, oversize.json()["error"]) == (413, "HookBodyTooLargeError")
    assert await snapshot(container) == before


async def test_a_console_token_is_neither_needed_nor_enough(
    client: httpx.AsyncClient, container: Container
) -> None:
    await create_hook(client)
    body = decision("x-1", True)
    with_token = await client.post("/hooks/approvals", content=body, headers=auth("admin"))
    assert with_token.status_code == 401
    assert with_token.json()["error"] == "MissingHookSignatureError"


# --- the admin API ---------------------------------------------------------------------------


async def test_admins_create_list_show_and_delete_hooks_and_never_see_a_secret(
    client: httpx.AsyncClient,
) -> None:
    created = await create_hook(client)
    assert SECRET not in created.text
    assert created.json()["secret_source"] == "stored"
    assert created.json()["source"] == "api"
    await create_hook(client, name="acme-hook", tenant="acme", secret=None, secret_ref="env:X")
    listed = await client.get("/api/v1/hooks", headers=auth("admin"))
    assert [h["name"] for h in listed.json()["items"]] == ["approvals"]
    acme = await client.get("/api/v1/hooks", params={"tenant": "acme"}, headers=auth("acme"))
    assert [(h["name"], h["secret_source"]) for h in acme.json()["items"]] == [
        ("acme-hook", "env:X")
    ]
    shown = await client.get("/api/v1/hooks/approvals", headers=auth("admin"))
    assert shown.json() == {**created.json()}
    assert SECRET not in shown.text
    other_tenant = await client.get(
        "/api/v1/hooks/approvals", params={"tenant": "acme"}, headers=auth("acme")
    )
    assert other_tenant.status_code == 404
    deleted = await client.delete("/api/v1/hooks/approvals", headers=auth("admin"))
    assert deleted.status_code == 200
    assert (await client.get("/api/v1/hooks/approvals", headers=auth("admin"))).status_code == 404
    body = decision("x-1", True)
    gone = await client.post("/hooks/approvals", content=body, headers=signed(body))
    assert gone.status_code == 404


@pytest.mark.parametrize(
    ("who", "method", "path", "status"),
    [
        (None, "GET", "/api/v1/hooks", 401),
        ("viewer", "GET", "/api/v1/hooks", 403),
        ("operator", "POST", "/api/v1/hooks", 403),
        ("operator", "DELETE", "/api/v1/hooks/approvals", 403),
        ("acme", "POST", "/api/v1/hooks", 403),
    ],
)
async def test_only_admins_of_the_hooks_tenant_manage_it(
    client: httpx.AsyncClient, who: str | None, method: str, path: str, status: int
) -> None:
    await create_hook(client)
    answer = await client.request(
        method,
        path,
        json={**HOOK, "name": "another"} if method == "POST" else None,
        headers=auth(who) if who else {},
    )
    assert answer.status_code == status, answer.text


async def test_a_taken_name_is_409_and_an_invalid_hook_422_naming_each_problem(
    client: httpx.AsyncClient,
) -> None:
    await create_hook(client)
    taken = await client.post("/api/v1/hooks", json=HOOK, headers=auth("admin"))
    assert (taken.status_code, taken.json()["error"]) == (409, "HookConflictError")
    invalid = await client.post(
        "/api/v1/hooks",
        json={**HOOK, "name": "fresh", "correlation_id_pointer": "execution_id", "secret": "short"},
        headers=auth("admin"),
    )
    assert (invalid.status_code, invalid.json()["error"]) == (422, "HookDefinitionError")
    assert "correlation_id_pointer" in invalid.json()["message"]
    assert "secret" in invalid.json()["message"]
    assert "short" not in invalid.json()["message"].replace("shorter", "")
    unknown_field = await client.post(
        "/api/v1/hooks", json={**HOOK, "name": "fresh", "colour": 1}, headers=auth("admin")
    )
    assert unknown_field.status_code == 422


# --- the hooks file ----------------------------------------------------------------------------


def _hooks_file(tmp_path: Path, *hooks: dict[str, Any]) -> Path:
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps({"hooks": list(hooks)}))
    return path


async def test_a_hook_of_the_hooks_file_is_served_and_cannot_be_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPROVALS_SECRET", SECRET)
    path = _hooks_file(
        tmp_path,
        {**{k: v for k, v in HOOK.items() if k != "secret"}, "secret_ref": "env:APPROVALS_SECRET"},
    )
    container = build_container(memory_settings(hooks_file=str(path)))
    app = create_app(container, tokens=list(TOKENS.values()))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as client:
        listed = await client.get("/api/v1/hooks", headers=auth("admin"))
        assert [(h["name"], h["source"]) for h in listed.json()["items"]] == [("approvals", "file")]
        body = decision("x-1", True)
        assert (
            await client.post("/hooks/approvals", content=body, headers=signed(body))
        ).status_code == 202
        refused = await client.delete("/api/v1/hooks/approvals", headers=auth("admin"))
        assert (refused.status_code, refused.json()["error"]) == (409, "HookConflictError")
        shadowed = await client.post("/api/v1/hooks", json=HOOK, headers=auth("admin"))
        assert shadowed.status_code == 409


def test_a_console_with_a_hooks_file_it_cannot_use_is_not_built(tmp_path: Path) -> None:
    path = _hooks_file(tmp_path, {**HOOK, "secret": None})
    container = build_container(memory_settings(hooks_file=str(path)))
    with pytest.raises(HooksFileError, match="exactly one of secret"):
        create_app(container, tokens=list(TOKENS.values()))


# --- `plaita console --hooks-file` as a process ------------------------------------------------

requires_redis = pytest.mark.skipif(
    not os.environ.get("PLAITA_TEST_REDIS_URL"),
    reason="PLAITA_TEST_REDIS_URL is unset; CI always sets it",
)


@requires_redis
@pytest.mark.process
def test_plaita_console_serves_the_hooks_of_its_file(
    namespace: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    hooks = tmp_path / "hooks.toml"
    hooks.write_text(
        '[[hooks]]\nname = "approvals"\nevent_type = "approval_decision"\n'
        'correlation_id_pointer = "/execution_id"\nsecret_ref = "env:APPROVALS_HOOK_SECRET"\n'
    )
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([TOKENS["viewer"]]))
    port = _free_port()
    log = tmp_path / "console.log"
    command = [*_plaita(), "console", "--redis-url", os.environ["PLAITA_TEST_REDIS_URL"]]
    env = {**os.environ, "PLAITA_NAMESPACE": namespace, "APPROVALS_HOOK_SECRET": SECRET}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                *command,
                "--port",
                str(port),
                "--tokens-file",
                str(tokens),
                "--hooks-file",
                str(hooks),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, process, log)
        body = decision("order-7", True)
        headers = signed(body)
        with httpx.Client(base_url=base, timeout=5) as http:
            accepted = http.post("/hooks/approvals", content=body, headers=headers)
            replayed = http.post("/hooks/approvals", content=body, headers=headers)
            events = http.get("/api/v1/events", headers=auth("viewer"))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
    assert accepted.status_code == 202, log.read_text()
    assert replayed.status_code == 401
    assert [e["event_id"] for e in events.json()["items"]] == [accepted.json()["event_id"]]

    bad = tmp_path / "bad.json"
    bad.write_text('{"hooks": [{"name": "x"}]}')
    refused = subprocess.run(
        [
            *command,
            "--port",
            str(_free_port()),
            "--tokens-file",
            str(tokens),
            "--hooks-file",
            str(bad),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 1
    assert "HooksFileError" in refused.stderr
    assert "event_type: required" in refused.stderr
