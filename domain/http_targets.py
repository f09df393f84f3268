"""Where an ``http`` node may connect (E11): the SSRF rules, as pure decisions.

The adapter resolves a target's host name **once**, asks ``choose_address`` which of the
resolved addresses it may connect to — every one of them is checked, and one that is
blocked refuses the whole target, so a name that answers with a public and a private
address cannot be steered to the private one — and then connects to exactly that address
(keeping the ``Host`` header and TLS server name of the URL), so no second resolution can
rebind the name between the check and the connection. A redirect is a new target, checked
again by the same rules, at most ``MAX_REDIRECTS`` times.

Blocked when the policy is on: loopback, private, shared (carrier-grade NAT), link-local,
multicast, unspecified and reserved addresses, in IPv4 and IPv6, and the IPv6 forms that
carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4
``2002::/16``) judged by the IPv4 address they carry. The deployment's policy
(``PLAITA_HTTP_BLOCK_PRIVATE``) is a floor: a node's own ``blockPrivateNetworks`` may turn
the policy on, never off (``effective_block_private``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import attrs

from plaita.domain.failures import HttpTargetBlockedError

#: Redirects an http node follows before it fails (each one checked as a new target).
MAX_REDIRECTS = 5

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598, not is_private before 3.12.4
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIXTOFOUR = ipaddress.ip_network("2002::/16")


def effective_block_private(*, deployment: bool, node: bool | None) -> bool:
    """The policy one node runs under: the deployment's, tightened by the node's own."""
    return deployment or bool(node)


def _carried_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if address in _SIXTOFOUR:
        return address.sixtofour
    return None


def blocked_because(address: IPAddress) -> str | None:
    """Why ``address`` is not a public one (the first rule it meets), or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = _carried_ipv4(address)
        if carried is not None:
            reason = blocked_because(carried)
            return None if reason is None else f"{reason} (carried in {address})"
    for reason, hit in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("shared address space", isinstance(address, ipaddress.IPv4Address) and address in _SHARED),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if hit:
            return reason
    return None


@attrs.frozen
class TargetChoice:
    """The address to connect to, and whether it was checked against the policy."""

    address: str
    checked: bool


def choose_address(host: str, resolved: Sequence[str], *, block_private: bool) -> TargetChoice:
    """The address an http node connects to for ``host``, from the addresses one resolution
    gave (in the resolver's order).

    ``HttpTargetBlockedError`` when the policy is on and any of them is blocked (naming the
    host, the address and why), when one is not an IP address, or when there is none.
    """
    if not resolved:
        raise HttpTargetBlockedError(f"http target {host!r} resolved to no address")
    try:
        addresses = [ipaddress.ip_address(text) for text in resolved]
    except ValueError as exc:
        raise HttpTargetBlockedError(f"http target {host!r}: {exc}") from None
    if not block_private:
        return TargetChoice(str(addresses[0]), checked=False)
    for address in addresses:
        reason = blocked_because(address)
        if reason is not None:
            raise HttpTargetBlockedError(
                f"http target {host!r} resolves to {address}, a {reason} address, and "
                "PLAITA_HTTP_BLOCK_PRIVATE (or the node's blockPrivateNetworks) blocks such "
                "targets; call a public address, or turn the policy off for this deployment "
                "if the target is meant to be internal"
            )
    return TargetChoice(str(addresses[0]), checked=True)


def check_redirects(followed: int) -> None:
    """Refuse the redirect after ``MAX_REDIRECTS`` followed ones."""
    if followed >= MAX_REDIRECTS:
        raise HttpTargetBlockedError(
            f"http node followed {followed} redirects; at most {MAX_REDIRECTS} are followed "
            "(a redirect loop, or a target that should be called directly)"
        )
