"""Hook secrets where they are kept (V10): with the hook, in an environment variable of this
process, or in a file. References are resolved on every request, so a rotated file is used
without a restart of the console (a variable only changes with the process)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

from plaita.domain.hooks import MIN_SECRET_LENGTH, HookSecret, SecretKind


class EnvironmentSecrets:
    """HookSecrets from ``environ`` (this process's environment unless given) and files."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    async def resolve(self, secret: HookSecret) -> bytes | None:
        if secret.kind is SecretKind.FILE:
            return await asyncio.to_thread(self.read, secret)
        return self.read(secret)

    def read(self, secret: HookSecret) -> bytes | None:
        """``resolve``, blocking: for the start-up check of the hooks file."""
        if secret.kind is SecretKind.STORED:
            value: str | None = secret.value
        elif secret.kind is SecretKind.ENV:
            value = self._environ.get(secret.value)
        else:
            value = _read(Path(secret.value))
        # A secret too short to be safe is as good as none: no request is verified with it.
        if value is None or len(value) < MIN_SECRET_LENGTH:
            return None
        return value.encode()


def _read(path: Path) -> str | None:
    try:
        # Surrounding whitespace is the file's, not the secret's (``echo secret > file``).
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
