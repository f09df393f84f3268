"""The Lua scripts of the Redis adapters, one ``.lua`` file each.

Every key a script touches arrives in ``KEYS``; no script builds a key itself. A line
``-- #include <name>`` is replaced by ``<name>.lua`` (a function several scripts share).
"""

from __future__ import annotations

from importlib import resources

_INCLUDE = "-- #include "


def read_script(name: str) -> str:
    """The source of ``<name>.lua`` from this package, its includes in place."""
    source = resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return "".join(
        read_script(line.removeprefix(_INCLUDE).strip()) if line.startswith(_INCLUDE) else line
        for line in source.splitlines(keepends=True)
    )
