"""The tenant gate and a tenant's status record (W24): one test per row of the table in
``plaita.domain.tenant_status``, a hypothesis property over every row, the quota rule and
the records each write builds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import (
    InvalidTenantIdError,
    InvalidTenantQuotaError,
    TenantActionRefusedError,
    TenantMismatchError,
)
from plaita.domain.tenant_status import (
    MAX_TENANT_QUOTA,
    STRANDED_GRACE_MS,
    TenantGateAction,
    TenantGateReason,
    TenantRecord,
    TenantStatus,
    check_max_running,
    check_suspendable,
    decide_tenant_gate,
    releases_stranded,
    resumed,
    suspended,
    with_quota,
)

RUN, PARK, HOLD = TenantGateAction.RUN, TenantGateAction.PARK, TenantGateAction.HOLD
R = TenantGateReason


def record(
    tenant_id: str = "acme",
    status: TenantStatus = TenantStatus.ACTIVE,
    *,
    epoch: int | None = 3,
    max_running: int | None = 7,
) -> TenantRecord:
    return TenantRecord(tenant_id, status, max_running, epoch, updated_at_ms=1, version=4)


SUSPENDED = TenantStatus.SUSPENDED


# --- without a deployment epoch ------------------------------------------------------------


def test_no_epoch_no_record_runs_without_a_quota() -> None:
    gate = decide_tenant_gate(None, "acme", None, True)
    assert (gate.action, gate.reason, gate.max_running) == (RUN, R.NO_RECORD, None)


def test_no_epoch_default_tenant_without_a_record_runs() -> None:
    gate = decide_tenant_gate(None, "default", None, True)
    assert (gate.action, gate.max_running) == (RUN, None)


def test_no_epoch_an_active_record_of_any_epoch_runs_with_its_quota() -> None:
    gate = decide_tenant_gate(record(epoch=9), "acme", None, True)
    assert (gate.action, gate.reason, gate.max_running) == (RUN, R.ACTIVE, 7)


def test_no_epoch_a_suspended_record_parks() -> None:
    gate = decide_tenant_gate(record(status=SUSPENDED, epoch=None), "acme", None, True)
    assert (gate.action, gate.reason) == (PARK, R.SUSPENDED)
    assert "plaita tenants resume acme" in gate.detail


# --- a record newer than the worker's deployment -------------------------------------------


def test_a_record_of_a_newer_epoch_holds_a_tenant() -> None:
    gate = decide_tenant_gate(record(epoch=4), "acme", 3, True)
    assert (gate.action, gate.reason) == (HOLD, R.WORKER_BEHIND)
    assert "restart this worker with the deployment's PLAITA_DEPLOYMENT_EPOCH" in gate.detail


def test_a_record_of_a_newer_epoch_holds_the_default_tenant_too() -> None:
    gate = decide_tenant_gate(record("default", epoch=4), "default", 3, True)
    assert (gate.action, gate.reason) == (HOLD, R.WORKER_BEHIND)


def test_a_record_of_a_newer_epoch_holds_a_cancel_too() -> None:
    gate = decide_tenant_gate(record(status=SUSPENDED, epoch=4), "acme", 3, False)
    assert gate.action is HOLD


# --- a missing or older record under a deployment epoch ------------------------------------


def test_epoch_a_tenant_without_a_record_is_held() -> None:
    gate = decide_tenant_gate(None, "acme", 3, True)
    assert (gate.action, gate.reason) == (HOLD, R.STATUS_STALE)
    assert "plaita tenants resume acme" in gate.detail
    assert "no status record" in gate.detail


def test_epoch_a_tenant_whose_record_is_older_is_held() -> None:
    gate = decide_tenant_gate(record(epoch=2), "acme", 3, True)
    assert (gate.action, gate.reason) == (HOLD, R.STATUS_STALE)
    assert "deployment epoch 2" in gate.detail


def test_epoch_a_tenant_whose_record_has_no_epoch_is_held() -> None:
    gate = decide_tenant_gate(record(epoch=None), "acme", 3, True)
    assert (gate.action, gate.reason) == (HOLD, R.STATUS_STALE)


def test_epoch_a_stale_suspended_tenant_holds_even_a_cancel() -> None:
    gate = decide_tenant_gate(record(status=SUSPENDED, epoch=2), "acme", 3, False)
    assert gate.action is HOLD


def test_epoch_the_default_tenant_without_a_record_fails_open() -> None:
    gate = decide_tenant_gate(None, "default", 3, True)
    assert (gate.action, gate.reason, gate.max_running) == (RUN, R.DEFAULT_FAILS_OPEN, None)


def test_epoch_the_default_tenant_with_an_older_record_fails_open_without_its_quota() -> None:
    gate = decide_tenant_gate(record("default", epoch=2), "default", 3, True)
    assert (gate.action, gate.reason, gate.max_running) == (RUN, R.DEFAULT_FAILS_OPEN, None)


# --- a record of the worker's own deployment -----------------------------------------------


def test_epoch_a_current_active_record_runs_with_its_quota() -> None:
    gate = decide_tenant_gate(record(epoch=3), "acme", 3, True)
    assert (gate.action, gate.reason, gate.max_running) == (RUN, R.ACTIVE, 7)


def test_epoch_a_current_active_record_without_a_quota_runs_unlimited() -> None:
    gate = decide_tenant_gate(record(epoch=3, max_running=None), "acme", 3, True)
    assert (gate.action, gate.max_running) == (RUN, None)


def test_epoch_a_current_suspended_record_parks() -> None:
    gate = decide_tenant_gate(record(status=SUSPENDED, epoch=3), "acme", 3, True)
    assert (gate.action, gate.reason, gate.max_running) == (PARK, R.SUSPENDED, None)


def test_a_cancel_of_a_suspended_tenant_runs() -> None:
    gate = decide_tenant_gate(record(status=SUSPENDED, epoch=3), "acme", 3, False)
    assert (gate.action, gate.reason, gate.max_running) == (RUN, R.CANCEL_PASSES, 7)


def test_the_default_tenant_with_a_current_record_uses_its_quota() -> None:
    gate = decide_tenant_gate(record("default", epoch=3, max_running=2), "default", 3, True)
    assert (gate.action, gate.max_running) == (RUN, 2)


# --- a property over every row -------------------------------------------------------------

epochs = st.none() | st.integers(1, 6)
tenants = st.sampled_from(["default", "acme"])


@st.composite
def records(draw: st.DrawFn, tenant_id: str) -> TenantRecord | None:
    if draw(st.booleans()):
        return None
    return record(
        tenant_id,
        draw(st.sampled_from(TenantStatus)),
        epoch=draw(epochs),
        max_running=draw(st.none() | st.integers(1, 10)),
    )


@given(data=st.data(), tenant_id=tenants, deployment=epochs, parkable=st.booleans())
def test_the_gate_acts_only_on_a_status_of_its_own_deployment(
    data: st.DataObject, tenant_id: str, deployment: int | None, parkable: bool
) -> None:
    found = data.draw(records(tenant_id))
    gate = decide_tenant_gate(found, tenant_id, deployment, parkable)

    # Only a suspended record of the deployment (or of any, without one) parks, never a cancel.
    if gate.action is PARK:
        assert found is not None and found.status is SUSPENDED and parkable
        assert deployment is None or found.epoch == deployment
    # A quota is applied only from a record the worker may act on.
    if gate.max_running is not None:
        assert found is not None and found.max_running == gate.max_running
        assert deployment is None or found.epoch == deployment
    # Without an epoch rule nothing is ever held; the default tenant is held only by a newer record.
    if gate.action is HOLD:
        assert deployment is not None
        if tenant_id == "default":
            assert found is not None and found.epoch is not None and found.epoch > deployment
    assert gate.detail


# --- the quota and the writes --------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 500, MAX_TENANT_QUOTA, None])
def test_a_quota_from_1_to_a_million_or_none_is_accepted(value: int | None) -> None:
    assert check_max_running(value) == value


@pytest.mark.parametrize("value", [0, -1, MAX_TENANT_QUOTA + 1, True, 2.5, "3"])
def test_another_quota_is_refused_by_name(value: object) -> None:
    with pytest.raises(InvalidTenantQuotaError, match="from 1 to 1000000"):
        check_max_running(value)


def test_the_default_tenant_cannot_be_suspended() -> None:
    with pytest.raises(TenantActionRefusedError, match="cannot be suspended"):
        check_suspendable("default")
    with pytest.raises(TenantActionRefusedError):
        suspended(None, "default", epoch=1, now_ms=5)


def test_a_bad_tenant_id_is_refused_by_name() -> None:
    with pytest.raises(InvalidTenantIdError):
        resumed(None, "a b", epoch=1, now_ms=5)


def test_a_suspend_keeps_the_quota_and_stamps_the_writers_epoch() -> None:
    after = suspended(record(epoch=2), "acme", epoch=3, now_ms=99)
    assert after == TenantRecord("acme", SUSPENDED, 7, 3, updated_at_ms=99, version=5)


def test_a_resume_of_a_missing_record_writes_the_first_version() -> None:
    after = resumed(None, "acme", epoch=None, now_ms=99)
    assert after == TenantRecord("acme", TenantStatus.ACTIVE, None, None, 99, version=1)


def test_a_quota_keeps_the_status_and_stamps_the_epoch() -> None:
    after = with_quota(record(status=SUSPENDED, epoch=2), "acme", 12, epoch=3, now_ms=9)
    assert (after.status, after.max_running, after.epoch, after.version) == (SUSPENDED, 12, 3, 5)
    cleared = with_quota(after, "acme", None, epoch=3, now_ms=10)
    assert cleared.max_running is None


def test_a_bad_quota_write_is_refused() -> None:
    with pytest.raises(InvalidTenantQuotaError):
        with_quota(None, "acme", 0, epoch=1, now_ms=1)


def test_a_record_of_another_tenant_is_refused() -> None:
    with pytest.raises(TenantMismatchError):
        resumed(record("globex"), "acme", epoch=1, now_ms=1)


def test_an_active_tenants_parked_carriers_are_released_after_the_grace() -> None:
    active = record(epoch=3)  # updated_at_ms=1
    assert releases_stranded(active, 2, now_ms=1 + STRANDED_GRACE_MS) is True


def test_parked_carriers_are_left_to_a_recent_resume() -> None:
    assert releases_stranded(record(epoch=3), 2, now_ms=STRANDED_GRACE_MS) is False


def test_a_suspended_tenants_carriers_are_never_released() -> None:
    assert releases_stranded(record(status=SUSPENDED), 2, now_ms=10**12) is False


def test_nothing_parked_or_no_record_releases_nothing() -> None:
    assert releases_stranded(record(), 0, now_ms=10**12) is False
    assert releases_stranded(None, 3, now_ms=10**12) is False


def test_a_record_reads_as_json() -> None:
    assert record(status=SUSPENDED).to_json() == {
        "tenant_id": "acme",
        "status": "suspended",
        "max_running": 7,
        "epoch": 3,
        "updated_at_ms": 1,
        "version": 4,
    }


def test_only_a_run_answer_runs() -> None:
    assert decide_tenant_gate(None, "acme", None, True).runs
    assert not decide_tenant_gate(None, "acme", 3, True).runs
