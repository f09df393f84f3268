"""The hooks file (``PLAITA_HOOKS_FILE``, ``plaita console --hooks-file``): inbound webhooks
defined beside the console's configuration (V10).

A JSON object or a TOML document whose ``hooks`` is a list of hook definitions (the fields
of ``POST /api/v1/hooks``); the suffix says which (``.json``, ``.toml``). It is read once,
when the console starts, and every problem is named at once: an entry that is not valid, a
name used twice, a secret reference that does not resolve on this machine. The console does
not start with a file it cannot use.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plaita.domain.errors import HookDefinitionError, HooksFileError
from plaita.domain.hooks import MIN_SECRET_LENGTH, HookDefinition, HookSecret, parse_hooks

#: Reads a hook's secret now (None: it does not resolve), as the console will per request.
SecretReader = Callable[[HookSecret], bytes | None]

_EXAMPLE = (
    '{"hooks": [{"name": "payments", "event_type": "payment.settled", '
    '"correlation_id_pointer": "/order_id", "secret_ref": "env:PAYMENTS_HOOK_SECRET"}]}'
)


def load_hooks_file(path: str | None, read_secret: SecretReader) -> tuple[HookDefinition, ...]:
    """The hooks of the file at ``path`` (none without one); HooksFileError otherwise."""
    if not path:
        return ()
    source = Path(path)
    document = _document(source)
    entries = document.get("hooks") if isinstance(document, dict) else None
    others = sorted(set(document) - {"hooks"}) if isinstance(document, dict) else []
    if not isinstance(entries, list) or others:
        raise HooksFileError(
            f"the hooks file {source} must hold one key, 'hooks', a list of hook definitions"
            + (f" (it also holds {others})" if others else "")
            + f"; e.g. {_EXAMPLE}"
        )
    try:
        hooks = parse_hooks(entries, source=str(source))
    except HookDefinitionError as exc:
        raise HooksFileError(str(exc)) from None
    unresolved = [
        f"hook {hook.name!r}: secret_ref {hook.secret.source} does not resolve here (an unset "
        f"variable, an unreadable file, or fewer than {MIN_SECRET_LENGTH} characters)"
        for hook in hooks
        if read_secret(hook.secret) is None
    ]
    if unresolved:
        raise HooksFileError(f"the hooks of {source} cannot be verified: " + "; ".join(unresolved))
    return hooks


def _document(source: Path) -> Any:
    suffix = source.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise HooksFileError(
            f"the hooks file {source} must end in .json or .toml (its suffix says how to read it)"
        )
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise HooksFileError(
            f"cannot read the hooks file {source}: {reason}; set PLAITA_HOOKS_FILE (or "
            "--hooks-file) to a readable file"
        ) from None
    try:
        return tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HooksFileError(f"the hooks file {source} is not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise HooksFileError(
            f"the hooks file {source} is not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}); e.g. {_EXAMPLE}"
        ) from None
