"""Property-based fuzzing of the console's OpenAPI (C1): no input makes the API answer 500,
and every answer conforms to the schema it publishes (status codes, content types, bodies).

schemathesis generates requests from /openapi.json, valid and invalid alike, and sends them
to the ASGI app authenticated as an admin of every tenant, on the memory backend. The
approval flow and one suspended execution are there, so ids that exist can be hit too.
Bounded: a few examples per operation keep the run under a minute.

Every test has its own seeded app (the ``seeded_app`` fixture) and counts only its own
requests, so each passes alone (``pytest FILE::TEST``) or with the others, in any order.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from plaita.application.tenancy import tenant_scope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_support import import_handler_modules
from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import build_container
from plaita.entrypoints.settings import Settings

ADMIN_TOKEN = "fuzz-admin-token-0123456789"
REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_EXAMPLES = 25
#: Requests the authentication check sends per generation mode, across every operation.
AUTH_CHECK_EXAMPLES = 200
#: Deterministic, unhurried and forgetful: every run draws the same examples afresh.
FUZZ_SETTINGS = settings(
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)


def _seeded_app() -> Any:
    import_handler_modules(("examples.handlers",))
    container = build_container(Settings(backend="memory", handler_modules=("examples.handlers",)))
    flow = Flow.from_json((REPO_ROOT / "examples/flows/approval.json").read_text())

    async def seed() -> None:
        await container.flows().register(flow, owner=SHARED)
        with tenant_scope("default"):
            await container.start_execution()(flow.flow_id, params={"amount": 5000})
        await container.publish_event()("approval_decision", data={"approved": True})

    asyncio.run(seed())
    tokens = [{"token": ADMIN_TOKEN, "name": "fuzzer", "role": "admin", "tenants": ["*"]}]
    return create_app(container, tokens=tokens)


class AdminToken:
    """Every generated request is an admin's of every tenant (the fuzzer is told, so it does
    not count the header it did not generate against the request)."""

    def get(self, case: schemathesis.Case, context: Any) -> str:
        return ADMIN_TOKEN

    def set(self, case: schemathesis.Case, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


def _fuzzing_schema(app: Any) -> Any:
    """``app``'s OpenAPI schema, with the admin token registered on it."""
    fresh = schemathesis.openapi.from_asgi("/openapi.json", app)
    fresh.auth()(AdminToken)
    return fresh


@pytest.fixture
def seeded_app() -> Any:
    """A fresh seeded app per test: no test sees another's requests."""
    return _seeded_app()


#: Parametrizes the fuzz test by operation (decorators need a schema at import); its cases
#: are sent to each test's own ``seeded_app``, never to the app this schema was read from.
schema = _fuzzing_schema(_seeded_app())


def test_the_published_schema_covers_every_api_route(seeded_app: Any) -> None:
    """Every endpoint of the contract is in the OpenAPI document the fuzzer reads."""
    paths = json.loads(json.dumps(seeded_app.openapi()))["paths"]
    assert {
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/executions",
        "/api/v1/executions/{execution_id}",
        "/api/v1/executions/{execution_id}/resume",
        "/api/v1/executions/{execution_id}/retry",
        "/api/v1/executions/{execution_id}/cancel",
        "/api/v1/executions/{execution_id}/pause",
        "/api/v1/executions/{execution_id}/unpause",
        "/api/v1/executions/bulk",
        "/api/v1/events",
        "/api/v1/events/{event_id}",
        "/api/v1/queue",
        "/api/v1/dlq",
        "/api/v1/dlq/{dlq_id}",
        "/api/v1/dlq/{dlq_id}/replay",
        "/api/v1/workers",
        "/api/v1/whoami",
        "/api/v1/config",
        "/api/v1/flows",
        "/api/v1/flows/{flow_id}",
    } <= set(paths)


@schema.parametrize()
@settings(FUZZ_SETTINGS, max_examples=MAX_EXAMPLES)
def test_no_request_makes_the_api_fail_or_break_its_schema(
    case: schemathesis.Case, seeded_app: Any
) -> None:
    case.call_and_validate(
        app=seeded_app,
        # Some valid-looking requests are refused on purpose, by rules JSON Schema cannot
        # state: until_ms before since_ms, a flow whose nodes point nowhere or whose handlers
        # are outside the allowlist. Those are 422s with a named error, not a failure.
        excluded_checks=[positive_data_acceptance],
    )


def _statuses(fresh: Any, mode: GenerationMode) -> Counter[int]:
    """The status codes of AUTH_CHECK_EXAMPLES requests drawn across every operation."""
    statuses: Counter[int] = Counter()

    @settings(FUZZ_SETTINGS, max_examples=AUTH_CHECK_EXAMPLES)
    @given(case=fresh.as_strategy(mode))
    def send(case: schemathesis.Case) -> None:
        statuses[case.call().status_code] += 1

    send()
    assert sum(statuses.values()) >= AUTH_CHECK_EXAMPLES / 2, statuses
    return statuses


def test_the_fuzzer_got_past_authentication(seeded_app: Any) -> None:
    """The fuzzing means something: requests built the way the fuzz test builds them (a
    schema made by ``_fuzzing_schema``) are let in and reach the endpoints, rather than all
    ending at 401. Its own schema and app, its own requests."""
    fresh = _fuzzing_schema(seeded_app)

    valid = _statuses(fresh, GenerationMode.POSITIVE)
    total = sum(valid.values())
    # Valid requests carry the admin's token; a 401 among them is the token not being sent.
    assert valid[401] < total / 5, valid
    assert sum(n for status, n in valid.items() if status < 300) > total / 20, valid
    assert valid[422] > 0, valid

    # Invalid data often drops or garbles the token on purpose (401), but not always: the
    # rest reach the endpoints' own validation.
    invalid = _statuses(fresh, GenerationMode.NEGATIVE)
    assert sum(n for status, n in invalid.items() if status != 401) > 0, invalid
