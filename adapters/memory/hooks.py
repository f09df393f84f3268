"""In-memory twins of the Redis hook store and seen-signature marks (V10)."""

from __future__ import annotations

from collections.abc import Sequence

from plaita.application.ports import Clock
from plaita.domain.hooks import HookDefinition, dump_hook, load_hook


class MemoryHookStore:
    """HookStore in memory; hooks are kept as their stored JSON, as Redis keeps them."""

    def __init__(self) -> None:
        self._documents: dict[str, str] = {}

    async def add(self, hook: HookDefinition) -> bool:
        if hook.name in self._documents:
            return False
        self._documents[hook.name] = dump_hook(hook)
        return True

    async def get(self, name: str) -> HookDefinition | None:
        document = self._documents.get(name)
        return None if document is None else load_hook(document)

    async def list(self) -> Sequence[HookDefinition]:
        return [load_hook(self._documents[name]) for name in sorted(self._documents)]

    async def remove(self, name: str) -> bool:
        return self._documents.pop(name, None) is not None


class MemorySeenSignatures:
    """SeenSignatures in memory; a mark expires on the injected clock's monotonic time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: (hook, signature) -> expiry in ms on the monotonic clock
        self._marks: dict[tuple[str, str], int] = {}

    async def claim(self, hook: str, signature: str, *, ttl_ms: int) -> bool:
        if ttl_ms <= 0:
            raise ValueError(f"a mark's ttl must be a positive number of ms, got {ttl_ms}")
        now_ms = round(self._clock.monotonic() * 1000)
        expiry = self._marks.get((hook, signature))
        if expiry is not None and now_ms < expiry:
            return False
        self._marks[(hook, signature)] = now_ms + ttl_ms
        # Expired marks go as new ones come, so the map stays as small as the live ones.
        for key, until in list(self._marks.items()):
            if until <= now_ms:
                del self._marks[key]
        return True

    async def release(self, hook: str, signature: str) -> None:
        self._marks.pop((hook, signature), None)
