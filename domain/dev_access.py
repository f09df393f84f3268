"""Who may use a ``plaita dev`` console: the rule of its bind address and its token (C3, C4).

``plaita dev`` is a laptop's server. Bound to loopback only (``127.0.0.0/8``, ``::1``), it is
reachable from this machine alone, and a request without a token acts as an admin of every
tenant: nothing to copy into a browser or a script. Bound to any other address (``0.0.0.0``,
a LAN address, a name that resolves beyond loopback), anyone who reaches the port could act
as that admin, so a token is required and every request must carry it; without one the dev
process refuses to start (``DevTokenRequiredError``). A token given on loopback is accepted
beside the tokenless access.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import attrs

from plaita.domain.errors import DevTokenRequiredError

#: The name every resolver maps to loopback; other names are decided by their addresses.
LOOPBACK_NAMES = frozenset({"localhost"})


@attrs.frozen
class DevAccess:
    """How the dev console admits requests: ``tokenless`` (loopback only) and its tokens."""

    host: str
    loopback: bool
    token: str | None

    @property
    def tokenless(self) -> bool:
        return self.loopback


def is_loopback(host: str, addresses: Sequence[str]) -> bool:
    """Whether ``host`` — resolved to ``addresses`` — reaches this machine only.

    Every address must be a loopback one: a name that also resolves to a LAN address is not
    loopback. An empty host (bind every interface) or an unresolved name is not either.
    """
    if not host.strip():
        return False
    if host.strip().lower() in LOOPBACK_NAMES:
        return True
    if not addresses:
        return False
    try:
        return all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses)
    except ValueError:
        return False


def dev_access(host: str, addresses: Sequence[str], token: str | None) -> DevAccess:
    """The access of a dev console bound to ``host``, or ``DevTokenRequiredError``."""
    loopback = is_loopback(host, addresses)
    if not loopback and not token:
        raise DevTokenRequiredError(
            f"--host {host!r} makes the dev console reachable beyond this machine, and without a "
            "token anyone who reaches it could act as an admin of every tenant: pass --token "
            "SECRET (or PLAITA_DEV_TOKEN; at least 16 characters) and send it as 'Authorization: "
            "Bearer SECRET', or bind to 127.0.0.1 (the default), where no token is needed"
        )
    return DevAccess(host=host, loopback=loopback, token=token or None)
