"""Suite-wide fixtures and the no-skip switch.

Every test runs inside the default tenant's scope (W24), the way a worker dispatch, an
operator command or an API request runs inside its tenant's. Tests of the fail-closed rule
leave it with ``plaita.application.tenancy.no_tenant_scope()``; tests of routing open other
tenants' scopes themselves. Code under test that opens its own scope (ProcessTask per
carrier, the CLI per ``--tenant``) is unaffected: scopes nest.

With ``PLAITA_TEST_FORBID_SKIPS=1`` (``scripts/test`` sets it) a skipped test, or a module
skipped while it is collected, is reported as a failure that names the skip's reason: the
script provides every service the suite needs, so a skip there means a test did not run.
An expected failure (``xfail``) is not a skip and is left as it is.

Hypothesis runs without its timing checks (no per-example deadline, no "generation is
slow" health check): on a loaded CI machine they failed property tests whose properties
held, and what a property test checks is the property, not the speed of its inputs.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from plaita.application.tenancy import tenant_scope
from plaita.domain.tenancy import DEFAULT_TENANT

FORBID_SKIPS_VARIABLE = "PLAITA_TEST_FORBID_SKIPS"

settings.register_profile("plaita", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("plaita")


def _skips_forbidden() -> bool:
    return os.environ.get(FORBID_SKIPS_VARIABLE, "") not in ("", "0")


def _skip_reason(longrepr: Any) -> str:
    # A skip's longrepr is (path, line, "Skipped: reason").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, line, message = longrepr
        return f"{message} ({path}:{line})"
    return str(longrepr)


def _as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    report.longrepr = (
        f"skipped while {FORBID_SKIPS_VARIABLE}=1 (scripts/test runs every test): "
        f"{_skip_reason(report.longrepr)}"
    )
    report.outcome = "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and _skips_forbidden():
        _as_failure(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped and _skips_forbidden():
        _as_failure(report)


@pytest.fixture(autouse=True)
def default_tenant_scope() -> Iterator[None]:
    with tenant_scope(DEFAULT_TENANT):
        yield
