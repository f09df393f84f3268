"""The console: HTTP API, auth and web page (C1, C2, C3); ``create_app`` builds it.

``create_app`` is imported on first use, so a command that only reads the token table
(``plaita.entrypoints.console.auth``) does not load the web application.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plaita.entrypoints.console.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from plaita.entrypoints.console.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
