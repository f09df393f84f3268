"""The http node's SSRF rules (E11): which addresses are blocked, one resolution checked
whole, the node's flag only tightening the deployment's, a bounded redirect chain."""

from __future__ import annotations

import ipaddress

import pytest

from plaita.domain.failures import HttpTargetBlockedError
from plaita.domain.http_targets import (
    MAX_REDIRECTS,
    TargetChoice,
    blocked_because,
    check_redirects,
    choose_address,
    effective_block_private,
)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata address
        ("100.64.1.1", "shared address space"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::", "unspecified"),
        ("::ffff:127.0.0.1", "loopback (carried in ::ffff:7f00:1)"),
        ("::ffff:169.254.169.254", "link-local (carried in ::ffff:a9fe:a9fe)"),
        ("64:ff9b::a00:1", "private (carried in 64:ff9b::a00:1)"),
        ("2002:a00:1::", "private (carried in 2002:a00:1::)"),
    ],
)
def test_every_non_public_form_is_blocked_with_its_reason(address: str, reason: str) -> None:
    assert blocked_because(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_because(ipaddress.ip_address(address)) is None


def test_a_resolution_is_checked_whole_and_the_first_address_is_the_one_connected_to() -> None:
    assert choose_address("api.example", ["93.184.216.34", "2606:2800::1"], block_private=True) == (
        TargetChoice("93.184.216.34", checked=True)
    )
    with pytest.raises(HttpTargetBlockedError, match=r"'api\.example' resolves to 10\.0\.0\.5"):
        choose_address("api.example", ["93.184.216.34", "10.0.0.5"], block_private=True)


def test_without_the_policy_the_first_address_is_used_unchecked() -> None:
    assert choose_address("localhost", ["127.0.0.1"], block_private=False) == TargetChoice(
        "127.0.0.1", checked=False
    )


@pytest.mark.parametrize(
    ("resolved", "message"),
    [([], "resolved to no address"), (["not-an-ip"], "does not appear to be an IPv4 or IPv6")],
)
def test_an_empty_or_unreadable_resolution_is_refused(resolved: list[str], message: str) -> None:
    with pytest.raises(HttpTargetBlockedError, match=message):
        choose_address("odd.example", resolved, block_private=False)


@pytest.mark.parametrize(
    ("deployment", "node", "effective"),
    [
        (True, None, True),
        (True, False, True),  # a node cannot loosen the deployment's policy
        (True, True, True),
        (False, None, False),
        (False, False, False),
        (False, True, True),  # but it may tighten it
    ],
)
def test_a_node_may_only_tighten_the_policy(
    deployment: bool, node: bool | None, effective: bool
) -> None:
    assert effective_block_private(deployment=deployment, node=node) is effective


def test_redirects_are_followed_at_most_five_times() -> None:
    for followed in range(MAX_REDIRECTS):
        check_redirects(followed)
    with pytest.raises(HttpTargetBlockedError, match="at most 5"):
        check_redirects(MAX_REDIRECTS)
