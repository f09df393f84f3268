"""The console's effective configuration as GET /api/v1/config shows it: no secret in it.

Passwords in URLs and query values of URLs (webhook tokens) are masked, settings named like
secrets are masked whole, and console tokens are listed by name, role and tenants only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

if TYPE_CHECKING:
    from plaita.entrypoints.console.context import Console

MASK = "***"
_SECRET_WORDS = ("token", "secret", "password", "credential")


def effective_settings(console: Console) -> dict[str, Any]:
    values: Mapping[str, Any] = console.container.config() or {}
    shown = {name: mask_setting(name, value) for name, value in sorted(values.items())}
    shown["console_tokens"] = [token.describe() for token in console.tokens]
    shown["console_max_body_bytes"] = console.max_body_bytes
    shown["console_dev_mode"] = console.dev_mode
    # What this console stamps on the carriers it writes (W12): compare with the workers'.
    generations = console.container.generations()
    shown["config_generations"] = {
        "config_family": generations.config_family,
        "config_generation": generations.config_generation,
        "budget_generation": generations.budget_generation,
    }
    return shown


def mask_setting(name: str, value: Any) -> Any:
    if value is None or value == "":
        return value
    if any(word in name.lower() for word in _SECRET_WORDS):
        return MASK
    if isinstance(value, str) and name.endswith("_url"):
        return mask_url(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def mask_url(url: str) -> str:
    """``url`` with its password and its query values replaced by ``***``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return MASK  # not parseable: it may be anything, secrets included
    netloc = parts.hostname or ""
    if port is not None:
        netloc = f"{netloc}:{port}"
    if parts.username or parts.password:
        user = parts.username or ""
        netloc = f"{user}:{MASK}@{netloc}" if parts.password else f"{user}@{netloc}"
    query = "&".join(
        f"{quote(key)}={MASK}" for key, _ in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
