"""The Redis URL rule: redis://, rediss:// and unix:// are opened; anything else is named."""

from __future__ import annotations

import pytest

from plaita.domain.errors import InvalidConfigurationError, InvalidRedisUrlError
from plaita.domain.store_urls import check_redis_url


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:secret@cache.internal:6380/2",
        "rediss://cache.example:6380/0",
        "unix:///run/redis/redis.sock",
        "REDIS://localhost",
    ],
)
def test_the_redis_schemes_pass_unchanged(url: str) -> None:
    assert check_redis_url(url) == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:6379", "'http://' is not a Redis scheme"),
        ("127.0.0.1:6379", "it has no scheme"),
        ("redis//127.0.0.1", "it has no scheme"),
        ("redis://", "it names no host"),
        ("redis+cluster://10.0.0.1:7000", "give redis://10.0.0.1:7000 with --redis-cluster"),
        ("memory://", "'memory://' is not a Redis scheme"),
        ("", "it has no scheme"),
    ],
)
def test_anything_else_is_named_with_the_forms_it_could_be(url: str, says: str) -> None:
    with pytest.raises(InvalidRedisUrlError) as raised:
        check_redis_url(url)
    assert isinstance(raised.value, InvalidConfigurationError)
    message = str(raised.value)
    assert repr(url) in message and says in message and "rediss://" in message
