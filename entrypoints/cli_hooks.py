"""``plaita hooks list|show|create|delete``: the inbound webhooks of a tenant (V10, C4).

The same hooks as the console's ``/api/v1/hooks``: those of the hooks file (read-only; the
file named by PLAITA_HOOKS_FILE in this environment) and those created here or through the
API, kept with the deployment's flows. A secret is never printed: ``secret_source`` says
where it is kept. ``create`` takes the secret from standard input (``--secret-stdin``, so it
stays out of the shell's history) or a reference the console resolves (``--secret-ref
env:NAME`` or ``file:PATH``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from plaita.application.use_cases.hooks import ListedHook
from plaita.domain.errors import HookDefinitionError
from plaita.domain.hooks import (
    DEFAULT_REPLAY_WINDOW_SECONDS,
    DEFAULT_SIGNATURE_HEADER,
    DEFAULT_TIMESTAMP_HEADER,
    MAX_REPLAY_WINDOW_SECONDS,
    HookDefinition,
    parse_hook,
)
from plaita.entrypoints.cli_support import (
    echo_json,
    echo_rows,
    json_option,
    redis_url_option,
    run_with_container,
    settings_from,
    tenant_option,
)

if TYPE_CHECKING:  # the container is built only when a command runs (a quick --help)
    from plaita.entrypoints.container import Container

JSON = Any


def _view(listed: ListedHook) -> dict[str, JSON]:
    return {**listed.hook.describe(), "source": listed.source.value}


def _print(listed: ListedHook, as_json: bool) -> None:
    view = _view(listed)
    if as_json:
        echo_json(view)
        return
    echo_rows((key.replace("_", " "), str(value)) for key, value in view.items())


@click.command("list")
@tenant_option
@redis_url_option
@json_option
def hooks_list(tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """The tenant's hooks, by name (the hooks file's and those created here)."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> list[ListedHook]:
        return await container.hook_catalog().list(tenant_id)

    found = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json({"items": [_view(listed) for listed in found]})
        return
    if not found:
        click.echo(f"no hook of tenant {tenant_id!r}")
    for listed in found:
        hook = listed.hook
        click.echo(
            f"{hook.name}  {hook.event_type}  correlation={hook.correlation_id_pointer}  "
            f"secret={hook.secret.source}  source={listed.source.value}"
        )


@click.command("show")
@click.argument("name")
@tenant_option
@redis_url_option
@json_option
def hooks_show(name: str, tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """One hook of the tenant, without its secret; exits 1 with UnknownHookError."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> ListedHook:
        return await container.hook_catalog().show(name, tenant_id)

    _print(run_with_container(settings, body, tenant_id=tenant_id), as_json)


@click.command("create")
@click.argument("name")
@click.option("--event-type", required=True, help="The type of the event each request publishes.")
@click.option(
    "--correlation-id-pointer",
    required=True,
    help="JSON pointer to the correlation id in the body, e.g. /order/id.",
)
@click.option(
    "--data-pointer",
    default="",
    help="JSON pointer to the event's data, a JSON object (default: the whole body).",
)
@click.option(
    "--secret-ref", default=None, help="Where the console finds the secret: env:NAME or file:PATH."
)
@click.option(
    "--secret-stdin",
    is_flag=True,
    help="Read the secret (at least 16 characters) from standard input; it is stored with the "
    "hook and never shown.",
)
@click.option("--signature-header", default=DEFAULT_SIGNATURE_HEADER, show_default=True)
@click.option("--timestamp-header", default=DEFAULT_TIMESTAMP_HEADER, show_default=True)
@click.option(
    "--replay-window-seconds",
    type=click.IntRange(1, MAX_REPLAY_WINDOW_SECONDS),
    default=DEFAULT_REPLAY_WINDOW_SECONDS,
    show_default=True,
    help="How old a signed timestamp may be; a signature is accepted once within it.",
)
@tenant_option
@redis_url_option
@json_option
def hooks_create(
    name: str,
    event_type: str,
    correlation_id_pointer: str,
    data_pointer: str,
    secret_ref: str | None,
    secret_stdin: bool,
    signature_header: str,
    timestamp_header: str,
    replay_window_seconds: int,
    tenant_id: str,
    redis_url: str | None,
    as_json: bool,
) -> None:
    """Create a hook: POST /hooks/NAME on the console then publishes EVENT_TYPE events."""
    if secret_stdin == (secret_ref is not None):
        raise click.UsageError("give exactly one of --secret-stdin and --secret-ref")
    raw: dict[str, JSON] = {
        "name": name,
        "event_type": event_type,
        "tenant": tenant_id,
        "correlation_id_pointer": correlation_id_pointer,
        "data_pointer": data_pointer,
        "signature_header": signature_header,
        "timestamp_header": timestamp_header,
        "replay_window_seconds": replay_window_seconds,
    }
    if secret_stdin:
        raw["secret"] = sys.stdin.readline().strip()
    else:
        raw["secret_ref"] = secret_ref
    hook = _definition(raw)
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> ListedHook:
        return await container.hook_catalog().create(hook)

    created = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(_view(created))
    else:
        click.echo(f"created hook {created.hook.name}: POST /hooks/{created.hook.name}")


@click.command("delete")
@click.argument("name")
@tenant_option
@redis_url_option
@json_option
def hooks_delete(name: str, tenant_id: str, redis_url: str | None, as_json: bool) -> None:
    """Delete a hook created here or through the API (not one of the hooks file)."""
    settings = settings_from(backend="redis", redis_url=redis_url)

    async def body(container: Container) -> ListedHook:
        return await container.hook_catalog().delete(name, tenant_id)

    deleted = run_with_container(settings, body, tenant_id=tenant_id)
    if as_json:
        echo_json(_view(deleted))
    else:
        click.echo(f"deleted hook {deleted.hook.name}")


def _definition(raw: dict[str, JSON]) -> HookDefinition:
    try:
        return parse_hook(raw, label=f"hook {raw['name']!r}")
    except HookDefinitionError as exc:
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from None
