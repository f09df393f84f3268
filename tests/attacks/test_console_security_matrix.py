"""The console's security matrix against a real ``plaita console`` process (C3, W24, S2).

The campaign's console attacks, on a real process over HTTP: every operation of the API
without a token or with an unknown one is 401, one role below its minimum is 403, a token
scoped to ``acme`` acting for the ``default`` tenant is 403, and a tenant admin registering
a deployment-wide flow is 403 — and none of those refusals changes anything stored. The
matrix itself is the console suite's (``tests/console/test_console_auth.py``), which checks
that it covers every operation of the OpenAPI schema.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..console.conftest import TOKENS
from ..console.test_console_auth import ENDPOINTS, ROLE_BELOW, Endpoint
from ..integration.conftest import Plaita, poll

pytestmark = [pytest.mark.process]

#: An admin of tenant acme only.
ACME_ADMIN = TOKENS["acme"]
#: Operations that name the tenant they act for: in the query, or in the body.
TENANTED_READS = ["/api/v1/executions", "/api/v1/events", "/api/v1/flows"]
TENANTED_WRITES = [
    Endpoint("POST", "/api/v1/executions", "operator", {"flow_id": "approval"}),
    Endpoint("POST", "/api/v1/events", "operator", {"event_type": "ping"}),
    Endpoint("POST", "/api/v1/executions/bulk", "operator", {"action": "pause"}),
]


def bearer(token: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {token['token']}"}


def stored(plaita: Plaita) -> dict[str, bytes]:
    """Every key of the deployment's namespace and its serialised value."""
    client = plaita.redis()
    return {
        key: bytes(client.dump(key) or b"")
        for key in sorted(client.scan_iter(match=f"{plaita.namespace}:*", count=1000))
        if ":registry:" not in key  # the console's own liveness, not data
    }


def call(
    http: httpx.Client, endpoint: Endpoint, headers: dict[str, str], **extra_body: Any
) -> httpx.Response:
    body = None if endpoint.body is None else {**endpoint.body, **extra_body}
    return http.request(endpoint.method, endpoint.path, json=body, headers=headers)


def test_refusals_on_every_route_of_a_real_console_change_nothing(
    plaita: Plaita, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(list(TOKENS.values())))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    console = plaita.spawn("console", "console", "--port", str(port), "--tokens-file", str(tokens))
    plaita.run("flows", "register", "examples/flows/approval.json", "--shared")

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:

        def answers() -> bool:
            try:
                return http.get("/healthz").status_code == 200
            except httpx.TransportError:
                return console.poll() is not None

        poll(answers, timeout=20, what=f"the console\n{plaita.logs()}")
        assert console.poll() is None, plaita.logs()
        before = stored(plaita)

        for endpoint in ENDPOINTS:
            missing = call(http, endpoint, {})
            assert (endpoint.label, missing.status_code) == (endpoint.label, 401), missing.text
            unknown = call(http, endpoint, {"Authorization": "Bearer not-a-token-0123456789"})
            assert (endpoint.label, unknown.status_code) == (endpoint.label, 401), unknown.text
            below = ROLE_BELOW.get(endpoint.role)
            if below is not None:
                refused = call(http, endpoint, bearer(TOKENS[below]))
                assert (endpoint.label, refused.status_code) == (endpoint.label, 403)
                assert refused.json()["error"] == "RoleNotAllowedError"

        for path in TENANTED_READS:
            other = http.get(path, params={"tenant": "default"}, headers=bearer(ACME_ADMIN))
            assert (path, other.status_code) == (path, 403), other.text
        for endpoint in TENANTED_WRITES:
            other = call(http, endpoint, bearer(ACME_ADMIN), tenant="default")
            assert (endpoint.label, other.status_code) == (endpoint.label, 403), other.text

        # Flow registration by a tenant admin: never deployment-wide, never another tenant's.
        document = json.loads(Path("examples/flows/approval.json").read_text())
        shared = http.post(
            "/api/v1/flows", json={**document, "shared": True}, headers=bearer(ACME_ADMIN)
        )
        assert shared.status_code == 403, shared.text
        assert shared.json()["error"] == "SharedFlowNotAllowedError"
        elsewhere = http.post(
            "/api/v1/flows", json={**document, "tenant": "default"}, headers=bearer(ACME_ADMIN)
        )
        assert elsewhere.status_code == 403, elsewhere.text

        assert stored(plaita) == before, "a refused request changed what is stored"
        assert console.poll() is None, plaita.logs()
