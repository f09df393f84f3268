"""Which Redis URLs plaita opens: the rule every command and setting applies to a Redis URL.

A Redis client opens three schemes — ``redis://`` (TCP), ``rediss://`` (TCP with TLS) and
``unix://`` (a local socket) — and a URL with any other scheme (``http://``, a bare
``host:port``, a typo such as ``redis//``) is refused where it comes in, by name and with the
forms it could have been, instead of failing deep in the client library. A Redis Cluster is
the same URL of one of its nodes with ``--redis-cluster`` (the Python client's
``redis+cluster://`` form is the client's own spelling of that pair).
"""

from __future__ import annotations

from plaita.domain.errors import InvalidRedisUrlError

REDIS_URL_SCHEMES = ("redis", "rediss", "unix")
REDIS_URL_FORMS = (
    "redis://HOST:PORT/DB, rediss://HOST:PORT/DB (TLS) or unix:///path/to/redis.sock; "
    "for a Redis Cluster, the URL of one of its nodes with --redis-cluster"
)


def check_redis_url(url: str) -> str:
    """``url`` when a Redis client can open it; ``InvalidRedisUrlError`` naming it otherwise."""
    scheme, separator, rest = url.partition("://")
    if separator and scheme.lower() in REDIS_URL_SCHEMES and rest:
        return url
    if not separator:
        hint = "it has no scheme"
    elif scheme.lower() in REDIS_URL_SCHEMES:
        hint = "it names no host"
    elif scheme.lower() in ("redis+cluster", "rediss+cluster"):
        hint = f"give {scheme.split('+')[0]}://{rest} with --redis-cluster instead"
    elif scheme.lower() == "memory":
        hint = (
            "'memory://' is not a Redis scheme: the in-memory twin lives inside one process; "
            "a command reaches the one of `plaita dev` when run in its directory without a URL"
        )
    else:
        hint = f"{scheme + '://'!r} is not a Redis scheme"
    raise InvalidRedisUrlError(f"Redis URL {url!r} cannot be opened: {hint}; use {REDIS_URL_FORMS}")
