"""The SQL storage's tables, as SQLAlchemy Core metadata (S1, S2, S3, S4, W4, W13, W24).

Alembic's migrations (``migrations/versions``) create exactly this schema; a test compares
the two. One execution is stored the way Redis stores it — a header, one row per node entry,
one row per variable — so a step writes only what it changed (S3):

- ``executions``: one row per execution, one column per header field of the checkpoint
  (``domain.checkpoint.header_of``). Scalars are typed columns — ``flow_id``, ``status`` and
  ``updated_at_ms`` are what the console filters and sorts by, with an index each — and the
  structured fields (``input``, ``suspension``, ``result``, ``error``) are JSON text.
  ``expires_at_ms`` is the optional state TTL (NULL: kept until deleted).
- ``execution_nodes`` / ``execution_vars``: node id → entry JSON, variable name → JSON.
- ``execution_history``: seq → history entry (``plaita.domain.history``, stored form), the
  newest of each execution up to the cap; the lowest seq kept tells how many were dropped.
- ``leases``: the lease holder and the fence generation (W3, W4). The row is never deleted,
  so the generation is never reset, like Redis's ``…:fencegen``; it is also the row every
  fenced write locks (see ``fencing``).
- ``heartbeats`` (W15), ``tombstones`` (W13): records with an expiry, like Redis keys with a
  TTL; reads ignore expired rows and ``sweep_expired`` removes them.
- ``flows`` / ``flow_latest``: definitions by (owner, flow_id, version) and each owner's
  latest pointer (S2); the owner is a tenant id, or ``*`` for a deployment-wide definition.
- ``schedules`` / ``schedule_claims``: cron schedules with their recorded state, and the
  claim of a due by one scheduler until it expires (W22).

Every execution-data table has the tenant in its primary key (W24). Times are milliseconds
since the epoch. Execution ids compare byte-wise (``COLLATE "C"`` on PostgreSQL, SQLite's
default BINARY), so listings order ties exactly as the Redis index and the memory twin do.
"""

from __future__ import annotations

import sqlalchemy as sa

# Constraint names are fixed, so a later migration can refer to them on either database.
metadata = sa.MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "fk": "fk_%(table_name)s_%(referred_table_name)s",
    }
)

#: Byte-wise comparison of ids on PostgreSQL, whatever the database's default collation.
Identifier = sa.String().with_variant(sa.String(collation="C"), "postgresql")
Tenant = sa.String(64)
Millis = sa.BigInteger


def _execution_key() -> list[sa.Column[str]]:
    return [
        sa.Column("tenant_id", Tenant, primary_key=True),
        sa.Column("execution_id", Identifier, primary_key=True),
    ]


executions = sa.Table(
    "executions",
    metadata,
    *_execution_key(),
    sa.Column("flow_id", Identifier, nullable=False),
    sa.Column("flow_version", sa.String, nullable=False),
    sa.Column("fingerprint", sa.String, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at_ms", Millis, nullable=False),
    sa.Column("updated_at_ms", Millis, nullable=False),
    sa.Column("steps", sa.BigInteger, nullable=False),
    sa.Column("next_node_id", sa.String, nullable=True),
    sa.Column("last_node_id", sa.String, nullable=True),
    sa.Column("last_branch", sa.String, nullable=True),
    sa.Column("subgraph_fingerprint", sa.String, nullable=True),
    sa.Column("dedup_key", sa.String, nullable=True),
    sa.Column("input", sa.Text, nullable=False),
    sa.Column("suspension", sa.Text, nullable=False),
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("last_failure", sa.Text, nullable=False, server_default="null"),
    sa.Column("trace", sa.Text, nullable=False, server_default="null"),
    sa.Column("parent", sa.Text, nullable=False, server_default="null"),
    sa.Column("fork", sa.Text, nullable=False, server_default="null"),
    sa.Column("expires_at_ms", Millis, nullable=True),
    # The console's listings (C1): newest first, all or by flow, status or both (W23 paging).
    sa.Index("ix_executions_updated", "tenant_id", "updated_at_ms", "execution_id"),
    sa.Index("ix_executions_flow", "tenant_id", "flow_id", "updated_at_ms", "execution_id"),
    sa.Index("ix_executions_status", "tenant_id", "status", "updated_at_ms", "execution_id"),
    sa.Index(
        "ix_executions_flow_status",
        "tenant_id",
        "flow_id",
        "status",
        "updated_at_ms",
        "execution_id",
    ),
    # The retention sweep's scan (state TTL).
    sa.Index("ix_executions_expires", "expires_at_ms"),
)

#: Header fields stored as JSON text; every other header column holds the field's value.
JSON_HEADER_FIELDS = frozenset(
    {"input", "suspension", "result", "error", "last_failure", "trace", "parent", "fork"}
)
#: Every header field of a checkpoint (``domain.checkpoint.header_of``), one column each.
HEADER_FIELDS = frozenset(
    {"tenant_id", "execution_id"}
    | {column.name for column in executions.columns if column.name != "expires_at_ms"}
)


def _part_of_execution(table: str, key: str, value: str) -> sa.Table:
    return sa.Table(
        table,
        metadata,
        *_execution_key(),
        sa.Column(key, sa.String, primary_key=True),
        sa.Column(value, sa.Text, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "execution_id"],
            ["executions.tenant_id", "executions.execution_id"],
            ondelete="CASCADE",
        ),
    )


execution_nodes = _part_of_execution("execution_nodes", "node_id", "entry")
execution_vars = _part_of_execution("execution_vars", "name", "value")

execution_history = sa.Table(
    "execution_history",
    metadata,
    *_execution_key(),
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("entry", sa.Text, nullable=False),
    sa.ForeignKeyConstraint(
        ["tenant_id", "execution_id"],
        ["executions.tenant_id", "executions.execution_id"],
        ondelete="CASCADE",
    ),
)

leases = sa.Table(
    "leases",
    metadata,
    *_execution_key(),
    #: The last generation handed out; NULL until the first acquire (a delete of an
    #: execution never leased creates the row to lock it, without inventing a generation).
    sa.Column("generation", sa.BigInteger, nullable=True),
    sa.Column("holder_id", sa.String, nullable=True),
    sa.Column("expires_at_ms", Millis, nullable=True),
)

heartbeats = sa.Table(
    "heartbeats",
    metadata,
    *_execution_key(),
    sa.Column("node_id", sa.String, nullable=False),
    sa.Column("last_update_ms", Millis, nullable=False),
    sa.Column("expires_at_ms", Millis, nullable=False),
    sa.Index("ix_heartbeats_expires", "expires_at_ms"),
)

tombstones = sa.Table(
    "tombstones",
    metadata,
    *_execution_key(),
    sa.Column("document", sa.Text, nullable=False),
    sa.Column("expires_at_ms", Millis, nullable=False),
    sa.Index("ix_tombstones_expires", "expires_at_ms"),
)

#: The ``owner`` of a deployment-wide flow definition: never a tenant id (``*`` is not in the
#: tenant alphabet), and the console's word for every tenant.
SHARED_OWNER = "*"

flows = sa.Table(
    "flows",
    metadata,
    sa.Column("owner", Tenant, primary_key=True),
    sa.Column("flow_id", Identifier, primary_key=True),
    sa.Column("version", sa.String, primary_key=True),
    sa.Column("document", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
)

flow_latest = sa.Table(
    "flow_latest",
    metadata,
    sa.Column("owner", Tenant, primary_key=True),
    sa.Column("flow_id", Identifier, primary_key=True),
    sa.Column("version", sa.String, nullable=False),
    sa.ForeignKeyConstraint(
        ["owner", "flow_id", "version"], ["flows.owner", "flows.flow_id", "flows.version"]
    ),
)

#: Cron schedules (W22): the definition as JSON (as Redis keeps it) and the state the
#: schedulers record, one column per field (``cron_schedules.ScheduleState``).
schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("tenant_id", Tenant, primary_key=True),
    sa.Column("schedule_id", Identifier, primary_key=True),
    sa.Column("definition", sa.Text, nullable=False),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("cursor_ms", Millis, nullable=False),
    sa.Column("last_due_ms", Millis, nullable=True),
    sa.Column("last_execution_id", sa.String, nullable=True),
    sa.Column("buffered_due_ms", Millis, nullable=True),
    sa.Column("fired", sa.BigInteger, nullable=False),
    sa.Column("skipped", sa.BigInteger, nullable=False),
    sa.Column("failed", sa.BigInteger, nullable=False),
    sa.Column("last_error", sa.Text, nullable=True),
)

#: The claim of one due of a schedule by one scheduler, until it expires (W22).
schedule_claims = sa.Table(
    "schedule_claims",
    metadata,
    sa.Column("tenant_id", Tenant, primary_key=True),
    sa.Column("schedule_id", Identifier, primary_key=True),
    sa.Column("due_ms", Millis, primary_key=True, autoincrement=False),
    sa.Column("holder_id", sa.String, nullable=False),
    sa.Column("expires_at_ms", Millis, nullable=False),
    sa.ForeignKeyConstraint(
        ["tenant_id", "schedule_id"],
        ["schedules.tenant_id", "schedules.schedule_id"],
        ondelete="CASCADE",
    ),
)

#: Inbound webhooks created through the admin API (V10): the definition as Redis keeps it
#: (``domain.hooks.dump_hook``), by name; the tenant is in the document, and a column for
#: whoever reads the table by hand.
hooks = sa.Table(
    "hooks",
    metadata,
    sa.Column("name", Identifier, primary_key=True),
    sa.Column("tenant_id", Tenant, nullable=False),
    sa.Column("document", sa.Text, nullable=False),
)
