"""Who may use a ``plaita dev`` console: loopback needs no token, any other bind requires one."""

from __future__ import annotations

import pytest

from plaita.domain.dev_access import dev_access, is_loopback
from plaita.domain.errors import DevTokenRequiredError, InvalidConfigurationError


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("127.0.0.1", ["127.0.0.1"]),
        ("127.0.0.2", ["127.0.0.2"]),
        ("::1", ["::1"]),
        ("localhost", []),
        ("LOCALHOST", ["127.0.0.1", "::1"]),
        ("my-laptop", ["127.0.1.1"]),
    ],
)
def test_a_loopback_bind_needs_no_token(host: str, addresses: list[str]) -> None:
    access = dev_access(host, addresses, None)
    assert access.tokenless and access.loopback and access.token is None


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("0.0.0.0", ["0.0.0.0"]),
        ("::", ["::"]),
        ("192.168.1.20", ["192.168.1.20"]),
        ("", []),
        ("box", ["127.0.0.1", "10.0.0.5"]),  # a name that also reaches the network
        ("unresolved.example", []),
        ("fe80::1%eth0", ["fe80::1%eth0"]),
        ("weird", ["not-an-address"]),
    ],
)
def test_any_other_bind_requires_a_token_by_name(host: str, addresses: list[str]) -> None:
    assert not is_loopback(host, addresses)
    with pytest.raises(DevTokenRequiredError) as raised:
        dev_access(host, addresses, None)
    assert isinstance(raised.value, InvalidConfigurationError)
    message = str(raised.value)
    assert repr(host) in message and "--token" in message and "127.0.0.1" in message


def test_with_a_token_a_network_bind_admits_token_holders_only() -> None:
    access = dev_access("0.0.0.0", ["0.0.0.0"], "s3cret-s3cret-s3cret")
    assert (access.loopback, access.tokenless, access.token) == (
        False,
        False,
        "s3cret-s3cret-s3cret",
    )


def test_a_token_on_loopback_is_kept_beside_the_tokenless_access() -> None:
    access = dev_access("127.0.0.1", ["127.0.0.1"], "s3cret-s3cret-s3cret")
    assert access.tokenless and access.token == "s3cret-s3cret-s3cret"
