"""The Lua scripts of the Redis adapters, one ``.lua`` file each.

Every key a script touches arrives in ``KEYS``; no script builds a key itself.
"""

from __future__ import annotations

from importlib import resources


def read_script(name: str) -> str:
    """The source of ``<name>.lua`` from this package."""
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
