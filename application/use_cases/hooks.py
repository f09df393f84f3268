"""Inbound webhooks (V10): a signed request becomes a published event; admins manage hooks.

A console knows the hooks of its hooks file (read-only, the same on every replica given the
same file) and those created through the admin API or the CLI (in the hook store, shared by
the deployment). A name is one hook: the file's shadows a stored one of the same name, and
the API refuses to create or delete a name the file defines.

Receiving a request decides everything in the domain (``plaita.domain.hook_requests``):
the hook's secret is looked up, the signature and timestamp checked, the body mapped; only
then is the signature marked as seen, and the event published. A publish that fails gives
the mark back, so the sender's retry of the same delivery is not taken for a replay (and it
keeps its event id, so no wait takes it twice). Publishing only writes the event and its
notification: the request never waits for a worker.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence

import attrs

from plaita.application.actor import current_actor
from plaita.application.ports import Clock, HookSecrets, HookStore, SeenSignatures
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.events import PublishEvent
from plaita.domain.errors import (
    HookBodyTooLargeError,
    HookConflictError,
    HookError,
    HookSecretUnavailableError,
    UnknownHookError,
)
from plaita.domain.events import Event
from plaita.domain.hook_requests import (
    MAX_HOOK_BODY_BYTES,
    hook_event_id,
    map_payload,
    replayed,
    verify_request,
)
from plaita.domain.hooks import HookDefinition

log = logging.getLogger("plaita.hooks")
audit = logging.getLogger("plaita.audit")


class HookSource(enum.StrEnum):
    FILE = "file"
    API = "api"


@attrs.frozen
class ListedHook:
    hook: HookDefinition
    source: HookSource


class HookCatalog:
    """The hooks of this console: the hooks file's, then the store's."""

    def __init__(self, *, store: HookStore, configured: Sequence[HookDefinition]) -> None:
        self._store = store
        self._configured = {hook.name: hook for hook in configured}

    async def find(self, name: str) -> ListedHook | None:
        """The hook of this name, or None."""
        configured = self._configured.get(name)
        if configured is not None:
            return ListedHook(configured, HookSource.FILE)
        stored = await self._store.get(name)
        return None if stored is None else ListedHook(stored, HookSource.API)

    async def list(self, tenant_id: str) -> list[ListedHook]:
        """The tenant's hooks, by name."""
        stored = [
            ListedHook(hook, HookSource.API)
            for hook in await self._store.list()
            if hook.name not in self._configured
        ]
        configured = [ListedHook(hook, HookSource.FILE) for hook in self._configured.values()]
        found = [listed for listed in configured + stored if listed.hook.tenant_id == tenant_id]
        return sorted(found, key=lambda listed: listed.hook.name)

    async def show(self, name: str, tenant_id: str) -> ListedHook:
        """The tenant's hook of this name, or UnknownHookError."""
        found = await self.find(name)
        if found is None or found.hook.tenant_id != tenant_id:
            raise UnknownHookError(
                f"no hook {name!r} of tenant {tenant_id!r}; GET /api/v1/hooks (or `plaita "
                "hooks list`) lists the tenant's hooks"
            )
        return found

    async def create(self, hook: HookDefinition) -> ListedHook:
        """Store a new hook; HookConflictError when its name is taken."""
        if hook.name in self._configured or not await self._store.add(hook):
            raise HookConflictError(
                f"a hook named {hook.name!r} exists already"
                + (" in the hooks file" if hook.name in self._configured else "")
                + "; choose another name, or delete that hook first"
            )
        audit.info(
            "event=hook.created hook=%s tenant=%s event_type=%s secret=%s by=%s",
            hook.name,
            hook.tenant_id,
            hook.event_type,
            hook.secret.source,
            current_actor(),
        )
        return ListedHook(hook, HookSource.API)

    async def delete(self, name: str, tenant_id: str) -> ListedHook:
        """Delete the tenant's stored hook; UnknownHookError, or HookConflictError for a hook
        of the hooks file."""
        found = await self.show(name, tenant_id)
        if found.source is HookSource.FILE:
            raise HookConflictError(
                f"hook {name!r} is defined in the hooks file (PLAITA_HOOKS_FILE); remove it "
                "there and restart the console"
            )
        if not await self._store.remove(name):
            raise UnknownHookError(f"hook {name!r} was deleted meanwhile")
        audit.info("event=hook.deleted hook=%s tenant=%s by=%s", name, tenant_id, current_actor())
        return found


class ReceiveHook:
    """Turn one request to ``POST /hooks/{name}`` into a published event, or refuse it."""

    def __init__(
        self,
        *,
        catalog: HookCatalog,
        secrets: HookSecrets,
        seen: SeenSignatures,
        publish: PublishEvent,
        clock: Clock,
    ) -> None:
        self._catalog = catalog
        self._secrets = secrets
        self._seen = seen
        self._publish = publish
        self._clock = clock

    async def __call__(self, name: str, headers: Mapping[str, str], body: bytes) -> Event:
        hook = await self._hook(name, body)
        try:
            secret = await self._secret_of(hook)
            request = verify_request(
                hook, headers, body, secret=secret, now_ms=self._clock.now_ms()
            )
            event = map_payload(hook, body)
            if not await self._seen.claim(hook.name, request.signature, ttl_ms=request.seen_ttl_ms):
                raise replayed(hook)
        except HookError as refused:
            log.info("event=hook.refused hook=%s reason=%s", hook.name, type(refused).__name__)
            raise
        try:
            with tenant_scope(hook.tenant_id):
                published = await self._publish(
                    event.event_type,
                    data=event.data,
                    correlation_id=event.correlation_id,
                    source=f"hook:{hook.name}",
                    tenant_id=event.tenant_id,
                    event_id=hook_event_id(hook, request),
                )
        except BaseException:
            await self._seen.release(hook.name, request.signature)
            raise
        log.info(
            "event=hook.accepted hook=%s event_id=%s event_type=%s tenant=%s correlation_id=%s",
            hook.name,
            published.event_id,
            published.event_type,
            published.tenant_id,
            published.correlation_id,
        )
        return published

    async def _hook(self, name: str, body: bytes) -> HookDefinition:
        found = await self._catalog.find(name)
        if found is None:
            raise UnknownHookError(
                f"no hook is named {name!r}; an admin creates one with POST /api/v1/hooks or "
                "`plaita hooks create`, or in the hooks file"
            )
        if len(body) > MAX_HOOK_BODY_BYTES:
            raise HookBodyTooLargeError(
                f"the body is {len(body)} bytes; hook {name!r} reads at most "
                f"{MAX_HOOK_BODY_BYTES} (send less: the event's data needs only what the "
                "waiting flow reads)"
            )
        return found.hook

    async def _secret_of(self, hook: HookDefinition) -> bytes:
        secret = await self._secrets.resolve(hook.secret)
        if secret is None:
            log.warning(
                "event=hook.secret_unavailable hook=%s secret=%s: no request to this hook can "
                "be verified; set the variable or fix the file, with at least 16 characters",
                hook.name,
                hook.secret.source,
            )
            raise HookSecretUnavailableError(
                f"hook {hook.name!r} cannot verify requests now: its secret "
                f"({hook.secret.source}) is not set on the console or is too short; retry "
                "later (the operator is told)"
            )
        return secret
