"""The console: HTTP API, auth and web page (C1, C2, C3); ``create_app`` builds it."""

from plaita.entrypoints.console.app import create_app

__all__ = ["create_app"]
