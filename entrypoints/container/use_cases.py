"""The use cases, each wired to the stores of ``Stores``: the worker step and the dead-letter
guard, starts, events, the operator's controls (C1, W23) and the housekeeping rounds."""

from __future__ import annotations

from dependency_injector import providers

from plaita.application.use_cases.child_listing import ListChildren
from plaita.application.use_cases.children import WorkerChildren
from plaita.application.use_cases.dead_letter_guard import GuardDeadLetter
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.delete_execution import DeleteExecution
from plaita.application.use_cases.dlq import ListDeadLetters, ReplayDeadLetter, ShowDeadLetter
from plaita.application.use_cases.events import FilterEvent, PublishEvent
from plaita.application.use_cases.executions import (
    ExecutionHistory,
    GetExecution,
    ResumeExecution,
)
from plaita.application.use_cases.hooks import HookCatalog, ReceiveHook
from plaita.application.use_cases.index_janitor import IndexJanitorService
from plaita.application.use_cases.operator_controls import (
    BulkAction,
    CancelExecution,
    ContinueExecution,
    ListExecutions,
    PauseExecution,
    RetryExecution,
    UnpauseExecution,
)
from plaita.application.use_cases.reap import ReapZombies
from plaita.application.use_cases.reconcile_events import ReconcileEvents
from plaita.application.use_cases.recover import RecoverAfterRestart
from plaita.application.use_cases.results import AwaitResult
from plaita.application.use_cases.schedules import (
    CreateSchedule,
    DeleteSchedule,
    ListSchedules,
    PauseSchedule,
    RunSchedulerTick,
    ShowSchedule,
    TickSettings,
    TriggerSchedule,
)
from plaita.application.use_cases.slot_sweep import SweepSlots
from plaita.application.use_cases.start_execution import StartExecution
from plaita.application.use_cases.step import ProcessTask, StepSettings
from plaita.application.use_cases.tenants import (
    ListTenants,
    ResumeTenant,
    SetTenantQuota,
    ShowTenant,
    SuspendTenant,
)
from plaita.domain.janitor import plan_janitor
from plaita.domain.schedule_ticks import misfire_grace_ms
from plaita.entrypoints.container.stores import Stores
from plaita.entrypoints.hooks_file import load_hooks_file


class UseCases(Stores):
    # --- the worker step (W1-W15) and every carrier's way to the DLQ (W9) ----------------
    #: Lifecycle listeners for each dispatch; entrypoints override it (logs, demo timeline).
    listeners = providers.Object(list)
    step_settings = providers.Singleton(
        StepSettings,
        holder_id=Stores.config.consumer_name,
        lease_ttl_ms=Stores.config.lease_ttl_ms,
        default_deadline_ms=Stores.config.execution_deadline_ms,
        default_retries=Stores.config.default_retries,
        http_policy=Stores.http_policy,
        max_deliveries=Stores.config.max_deliveries,
        max_carrier_age_ms=Stores.config.max_carrier_age_ms,
        holder_liveness_disabled=Stores.config.disable_holder_liveness,
        registry_enabled=Stores.config.registry_enabled,
        max_handovers=Stores.config.affinity_max_handovers,
        generations=Stores.generations,
        deployment_epoch=Stores.config.deployment_epoch,
    )
    dead_letter_guard = providers.Factory(
        GuardDeadLetter,
        executions=Stores.executions,
        leases=Stores.leases,
        queue=Stores.queue,
        clock=Stores.clock,
        holder_id=Stores.config.consumer_name,
        lease_ttl_ms=Stores.config.lease_ttl_ms,
        counters=Stores.counters,
        max_deliveries=Stores.config.max_deliveries,
    )
    dedup_claims = providers.Factory(DedupClaims, dedup=Stores.dedup, executions=Stores.executions)
    # Every use case that writes new carriers stamps them with ``generations`` (W12).
    start_execution = providers.Factory(
        StartExecution,
        flows=Stores.flows,
        queue=Stores.queue,
        claims=dedup_claims,
        executions=Stores.executions,
        clock=Stores.clock,
        ids=Stores.ids,
        generations=Stores.generations,
        tracer=Stores.tracer,
    )
    resume_execution = providers.Factory(
        ResumeExecution,
        executions=Stores.executions,
        queue=Stores.queue,
        clock=Stores.clock,
        generations=Stores.generations,
    )
    get_execution = providers.Factory(GetExecution, Stores.executions)
    execution_history = providers.Factory(ExecutionHistory, Stores.executions)
    #: ``ExecutionHandle.result()``: woken by the end notices, re-reading at a bounded interval.
    await_result = providers.Factory(
        AwaitResult, executions=Stores.executions, notices=Stores.end_notices, clock=Stores.clock
    )
    #: `plaita dev --db`: carriers, timers and subscriptions back after a restart (S4).
    recover_after_restart = providers.Factory(
        RecoverAfterRestart,
        executions=Stores.executions,
        queue=Stores.queue,
        delay=Stores.delay_queue,
        subscriptions=Stores.subscriptions,
        flows=Stores.flows,
        clock=Stores.clock,
        generations=Stores.generations,
    )
    publish_event = providers.Factory(
        PublishEvent,
        events=Stores.events,
        clock=Stores.clock,
        ids=Stores.ids,
        inbox=Stores.inbox,
        tracer=Stores.tracer,
    )
    #: V10: the hooks file's hooks (read and checked once) and the store's.
    hook_catalog = providers.Singleton(
        HookCatalog,
        store=Stores.hooks,
        configured=providers.Singleton(
            load_hooks_file, Stores.config.hooks_file, Stores.hook_secrets.provided.read
        ),
    )
    receive_hook = providers.Factory(
        ReceiveHook,
        catalog=hook_catalog,
        secrets=Stores.hook_secrets,
        seen=Stores.seen_signatures,
        publish=publish_event,
        clock=Stores.clock,
    )
    filter_event = providers.Factory(
        FilterEvent,
        events=Stores.events,
        subscriptions=Stores.subscriptions,
        executions=Stores.executions,
        queue=Stores.queue,
        clock=Stores.clock,
        generations=Stores.generations,
        tracer=Stores.tracer,
    )
    #: One round per call (V5); the event-filter command passes ``settings`` (its flags).
    reconcile_events = providers.Factory(
        ReconcileEvents,
        events=Stores.events,
        subscriptions=Stores.subscriptions,
        executions=Stores.executions,
        queue=Stores.queue,
        cursor=Stores.reconciler_cursor,
        clock=Stores.clock,
        generations=Stores.generations,
        tracer=Stores.tracer,
    )

    #: The index janitor (V7): prunes dead members of the event and subscription indexes.
    janitor_plan = providers.Singleton(
        plan_janitor,
        enabled=Stores.config.janitor_enabled,
        interval_seconds=Stores.config.janitor_interval_seconds,
        budget=Stores.config.janitor_budget,
    )
    index_janitor = providers.Singleton(
        IndexJanitorService,
        # The executions index too (S1); SQL listings are queries, its rows are swept.
        stores=providers.Selector(
            Stores.config.storage,
            auto=providers.Dict(
                subscriptions=Stores.subscriptions,
                events=Stores.events,
                executions=Stores.execution_store,
            ),
            sql=providers.Dict(subscriptions=Stores.subscriptions, events=Stores.events),
        ),
        plan=janitor_plan,
        clock=Stores.clock,
        outages=Stores.outages,
    )

    # --- operator use cases: the console (C1) and the CLI ---------------------------------
    list_dead_letters = providers.Factory(
        ListDeadLetters, queue=Stores.queue, markers=Stores.replay_markers, dlq_key=Stores.dlq_key
    )
    show_dead_letter = providers.Factory(
        ShowDeadLetter, queue=Stores.queue, markers=Stores.replay_markers, dlq_key=Stores.dlq_key
    )
    replay_dead_letter = providers.Factory(
        ReplayDeadLetter,
        queue=Stores.queue,
        markers=Stores.replay_markers,
        executions=Stores.executions,
        clock=Stores.clock,
        ids=Stores.ids,
        dlq_key=Stores.dlq_key,
    )
    #: An operator delete (W13): revokes whoever holds the lease, as ``operator:<name>``.
    delete_execution = providers.Factory(
        DeleteExecution,
        executions=Stores.executions,
        leases=Stores.leases,
        subscriptions=Stores.subscriptions,
        clock=Stores.clock,
        holder_id=providers.Callable("operator:{}".format, Stores.config.consumer_name),
        lease_ttl_ms=Stores.config.lease_ttl_ms,
        carrier_max_age_ms=Stores.config.max_carrier_age_ms,
        retention_ms=Stores.config.retention_ms,
        dedup=Stores.dedup,
    )

    # --- operator controls (W23) and the execution listing (C1) --------------------------
    pause_execution = providers.Factory(
        PauseExecution, executions=Stores.executions, controls=Stores.controls, clock=Stores.clock
    )
    unpause_execution = providers.Factory(
        UnpauseExecution,
        executions=Stores.executions,
        controls=Stores.controls,
        queue=Stores.queue,
        delay=Stores.delay_queue,
        clock=Stores.clock,
        generations=Stores.generations,
    )
    cancel_execution = providers.Factory(
        CancelExecution,
        executions=Stores.executions,
        controls=Stores.controls,
        queue=Stores.queue,
        clock=Stores.clock,
        generations=Stores.generations,
    )
    #: A worker's subflow and map nodes (E13, E14): children started as executions, read
    #: back from the store, cancelled as an operator would.
    worker_children = providers.Singleton(
        WorkerChildren,
        start=start_execution,
        cancel=cancel_execution,
        executions=Stores.executions,
        delay=Stores.delay_queue,
        clock=Stores.clock,
        ids=Stores.ids,
        generations=Stores.generations,
        links=Stores.child_links,
    )
    process_task = providers.Singleton(
        ProcessTask,
        executions=Stores.executions,
        leases=Stores.leases,
        flows=Stores.flows,
        queue=Stores.queue,
        subscriptions=Stores.subscriptions,
        handlers=Stores.handlers,
        clock=Stores.clock,
        ids=Stores.ids,
        settings=step_settings,
        counters=Stores.counters,
        delay=Stores.delay_queue,
        registry=Stores.registry,
        dedup=Stores.dedup,
        inbox=Stores.inbox,
        controls=Stores.controls,
        slots=Stores.slot_tables,
        tenants=Stores.tenants,
        waiting=Stores.waiting_notes,
        rate_buckets=Stores.rate_buckets,
        listeners=listeners,
        tracer=Stores.tracer,
        http=Stores.http_client,
        children=worker_children,
        leased_load=Stores.leased_load,
    )
    #: The worker's slot sweep (E1a): one per process, it walks the listing round by round.
    sweep_slots = providers.Singleton(
        SweepSlots,
        slots=Stores.slot_tables,
        waiting=Stores.waiting_notes,
        queue=Stores.queue,
        clock=Stores.clock,
        lease_ttl_ms=Stores.config.lease_ttl_ms,
    )
    continue_execution = providers.Factory(
        ContinueExecution,
        executions=Stores.executions,
        controls=Stores.controls,
        queue=Stores.queue,
        clock=Stores.clock,
        generations=Stores.generations,
    )
    #: Restarts under the lease as ``operator:<name>``, like an operator delete.
    retry_execution = providers.Factory(
        RetryExecution,
        executions=Stores.executions,
        controls=Stores.controls,
        queue=Stores.queue,
        clock=Stores.clock,
        generations=Stores.generations,
        flows=Stores.flows,
        leases=Stores.leases,
        counters=Stores.counters,
        subscriptions=Stores.subscriptions,
        holder_id=providers.Callable("operator:{}".format, Stores.config.consumer_name),
        lease_ttl_ms=Stores.config.lease_ttl_ms,
    )
    bulk_action = providers.Factory(
        BulkAction,
        executions=Stores.executions,
        pause=pause_execution,
        unpause=unpause_execution,
        cancel=cancel_execution,
        resume=continue_execution,
        retry=retry_execution,
    )
    list_executions = providers.Factory(
        ListExecutions, executions=Stores.executions, controls=Stores.controls
    )
    #: A parent's children, found from their derived ids (E13, E14).
    list_children = providers.Factory(
        ListChildren, executions=Stores.executions, flows=Stores.flows, controls=Stores.controls
    )
    #: The zombie reaper (W19): re-enqueues running executions that lost their carrier.
    reap_zombies = providers.Factory(
        ReapZombies,
        executions=Stores.executions,
        leases=Stores.leases,
        queue=Stores.queue,
        flows=Stores.flows,
        counters=Stores.counters,
        clock=Stores.clock,
        holder_id=providers.Callable("reaper:{}".format, Stores.config.consumer_name),
        lease_ttl_ms=Stores.config.lease_ttl_ms,
        generations=Stores.generations,
        controls=Stores.controls,  # a paused execution is skipped (W23)
        # ... and every execution of a tenant whose carriers the workers park or hold (W24)
        tenants=Stores.tenants,
        deployment_epoch=Stores.config.deployment_epoch,
    )

    # --- cron schedules (W22): the operator's use cases and the scheduler's tick ----------
    create_schedule = providers.Factory(
        CreateSchedule, store=Stores.schedules, flows=Stores.flows, clock=Stores.clock
    )
    list_schedules = providers.Factory(ListSchedules, store=Stores.schedules, clock=Stores.clock)
    show_schedule = providers.Factory(
        ShowSchedule, store=Stores.schedules, executions=Stores.executions, clock=Stores.clock
    )
    pause_schedule = providers.Factory(PauseSchedule, store=Stores.schedules, clock=Stores.clock)
    delete_schedule = providers.Factory(DeleteSchedule, store=Stores.schedules)
    trigger_schedule = providers.Factory(
        TriggerSchedule, store=Stores.schedules, start=start_execution, ids=Stores.ids
    )
    scheduler_grace_ms = providers.Callable(
        misfire_grace_ms,
        Stores.config.scheduler_poll_interval_ms,
        Stores.config.scheduler_claim_ttl_ms,
    )
    scheduler_tick = providers.Factory(
        RunSchedulerTick,
        store=Stores.schedules,
        start=start_execution,
        executions=Stores.executions,
        clock=Stores.clock,
        settings=providers.Factory(
            TickSettings,
            holder_id=Stores.config.consumer_name,
            claim_ttl_ms=Stores.config.scheduler_claim_ttl_ms,
            grace_ms=scheduler_grace_ms,
        ),
    )

    # --- tenants (W24): status, quota, and the carriers parked while suspended ------------
    list_tenants = providers.Factory(
        ListTenants,
        directory=Stores.tenants,
        clock=Stores.clock,
        deployment_epoch=Stores.config.deployment_epoch,
    )
    show_tenant = providers.Factory(
        ShowTenant,
        directory=Stores.tenants,
        clock=Stores.clock,
        deployment_epoch=Stores.config.deployment_epoch,
    )
    suspend_tenant = providers.Factory(
        SuspendTenant,
        directory=Stores.tenants,
        clock=Stores.clock,
        deployment_epoch=Stores.config.deployment_epoch,
    )
    resume_tenant = providers.Factory(
        ResumeTenant,
        directory=Stores.tenants,
        queue=Stores.queue,
        waiting=Stores.waiting_notes,
        clock=Stores.clock,
        deployment_epoch=Stores.config.deployment_epoch,
    )
    set_tenant_quota = providers.Factory(
        SetTenantQuota,
        directory=Stores.tenants,
        clock=Stores.clock,
        deployment_epoch=Stores.config.deployment_epoch,
    )
