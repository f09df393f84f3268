"""Who may call the console, and for which tenant (C3).

Every API request carries ``Authorization: Bearer <token>``. A token has a name (for audit
lines), a role and the tenants it may act for; roles are ordered viewer < operator < admin.
Tokens are compared in constant time against every entry of the table, so neither a match's
position nor a near miss shows in the response time.
"""

from __future__ import annotations

import enum
import hmac
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import attrs
from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from plaita.application.actor import Actor
from plaita.domain.errors import InvalidTenantIdError, PlaitaError
from plaita.domain.tenancy import DEFAULT_TENANT, validate_tenant_id

ALL_TENANTS = "*"
#: Shorter tokens can be guessed; ``secrets.token_urlsafe(32)`` gives 43 characters.
MIN_TOKEN_LENGTH = 16
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Role(enum.IntEnum):
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class ConsoleTokensError(PlaitaError):
    """The console's token table is not usable; the message names every problem (C3)."""


class MissingTokenError(PlaitaError):
    """The request carries no ``Authorization: Bearer <token>`` header (401)."""


class UnknownTokenError(PlaitaError):
    """The bearer token is not in the console's token table (401)."""


class RoleNotAllowedError(PlaitaError):
    """The token's role is below what the endpoint needs (403)."""


class TenantNotAllowedError(PlaitaError):
    """The token may not act for the tenant the request names (403)."""


class SharedFlowNotAllowedError(TenantNotAllowedError):
    """A deployment-wide flow definition runs for every tenant: only a token of every tenant
    (``*``) may register one (403)."""


@attrs.frozen(repr=False)
class ConsoleToken:
    token: str
    name: str
    role: Role
    tenants: frozenset[str]

    def __repr__(self) -> str:  # the secret never reaches a log line or a traceback
        return f"ConsoleToken(name={self.name!r}, role={self.role.label}, tenants={self.scope})"

    @property
    def scope(self) -> list[str]:
        return sorted(self.tenants)

    def may_act_for(self, tenant_id: str) -> bool:
        return ALL_TENANTS in self.tenants or tenant_id in self.tenants

    def describe(self) -> dict[str, Any]:
        """The token without its secret, for /api/v1/config and logs."""
        return {"name": self.name, "role": self.role.label, "tenants": self.scope}


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(min_length=MIN_TOKEN_LENGTH)
    name: str = Field(min_length=1, max_length=200)
    role: Role
    tenants: list[str] = Field(min_length=1)

    @field_validator("role", mode="before")
    @classmethod
    def _role_by_name(cls, value: object) -> object:
        if isinstance(value, str) and value.upper() in Role.__members__:
            return Role[value.upper()]
        if isinstance(value, Role):
            return value
        raise ValueError(f"role must be one of viewer, operator, admin; got {value!r}")

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, value: list[str]) -> list[str]:
        if ALL_TENANTS in value:
            if len(value) != 1:
                raise ValueError(f"'*' means every tenant and must stand alone; got {value!r}")
            return value
        for tenant in value:
            try:
                validate_tenant_id(tenant)
            except InvalidTenantIdError as exc:
                raise ValueError(str(exc)) from None
        return value


class TokenTable:
    """The console's tokens; ``lookup`` finds one in constant time per entry."""

    def __init__(self, tokens: Iterable[ConsoleToken]) -> None:
        self._tokens = tuple(tokens)
        seen: dict[str, str] = {}
        for entry in self._tokens:
            if entry.token in seen:
                raise ConsoleTokensError(
                    f"tokens {seen[entry.token]!r} and {entry.name!r} share one secret; give "
                    "every token its own (python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))')"
                )
            seen[entry.token] = entry.name

    @classmethod
    def from_entries(cls, entries: Sequence[Mapping[str, Any]], *, source: str) -> TokenTable:
        problems: list[str] = []
        tokens: list[ConsoleToken] = []
        for index, raw in enumerate(entries):
            try:
                entry = _TokenEntry.model_validate(raw)
            except ValidationError as exc:
                name = raw.get("name") if isinstance(raw, Mapping) else None
                label = f"entry {index}" + (f" ({name!r})" if isinstance(name, str) else "")
                for error in exc.errors():
                    where = ".".join(str(p) for p in error["loc"]) or "entry"
                    problems.append(f"{label}: {where}: {_without_secret(error)}")
                continue
            tokens.append(
                ConsoleToken(entry.token, entry.name, entry.role, frozenset(entry.tenants))
            )
        if problems:
            raise ConsoleTokensError(
                f"the console tokens from {source} are not usable: " + "; ".join(problems)
            )
        return cls(tokens)

    @classmethod
    def from_json(cls, text: str, *, source: str) -> TokenTable:
        """Tokens from a JSON list of {"token", "name", "role", "tenants"} objects."""
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConsoleTokensError(
                f"the console tokens from {source} are not valid JSON ({exc.msg} at line "
                f"{exc.lineno} column {exc.colno}); expected a list such as "
                '[{"token": "...", "name": "ops", "role": "operator", "tenants": ["*"]}]'
            ) from None
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ConsoleTokensError(
                f"the console tokens from {source} must be a JSON list of objects with "
                '"token", "name", "role" and "tenants"; got a JSON '
                f"{type(entries).__name__}"
            )
        return cls.from_entries(entries, source=source)

    @classmethod
    def from_file(cls, path: Path) -> TokenTable:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConsoleTokensError(
                f"cannot read the tokens file {path}: {exc.strerror}; pass an existing file "
                "to --tokens-file"
            ) from None
        return cls.from_json(text, source=str(path))

    def __len__(self) -> int:
        return len(self._tokens)

    def __iter__(self) -> Iterator[ConsoleToken]:
        return iter(self._tokens)

    def lookup(self, presented: str) -> ConsoleToken | None:
        found = None
        given = presented.encode()
        for entry in self._tokens:
            # Every entry is compared, whatever matched before: no early exit to time.
            if hmac.compare_digest(entry.token.encode(), given):
                found = entry
        return found


def _without_secret(error: Mapping[str, Any]) -> str:
    message = str(error["msg"])
    if error["loc"] and error["loc"][0] == "token":
        return f"{message} (a token needs at least {MIN_TOKEN_LENGTH} characters)"
    value = error.get("input")
    return f"{message} (got {value!r})" if not isinstance(value, dict) else message


def as_token_table(tokens: TokenTable | Iterable[ConsoleToken | Mapping[str, Any]]) -> TokenTable:
    if isinstance(tokens, TokenTable):
        return tokens
    given = list(tokens)
    if all(isinstance(t, ConsoleToken) for t in given):
        return TokenTable(t for t in given if isinstance(t, ConsoleToken))
    return TokenTable.from_entries(
        [t.describe() | {"token": t.token} if isinstance(t, ConsoleToken) else t for t in given],
        source="create_app(tokens=...)",
    )


# --- FastAPI dependencies ------------------------------------------------------------------

bearer_scheme = HTTPBearer(
    auto_error=False, description="A console token: Authorization: Bearer ..."
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
TenantQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=64,
        pattern=TENANT_PATTERN,
        description="The tenant the request acts for.",
    ),
]


#: Who a request without a token is in the local ``dev`` mode (and only there, C3).
DEV_ANONYMOUS = ConsoleToken("", "dev-anonymous", Role.ADMIN, frozenset({ALL_TENANTS}))


def authenticate(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> ConsoleToken:
    """The token of the request, or MissingTokenError / UnknownTokenError (401).

    In the local ``dev`` mode a request without any token acts as an admin of every tenant;
    a wrong token is refused there too.
    """
    table: TokenTable = request.app.state.tokens
    if credentials is None or not credentials.credentials:
        if request.app.state.dev_mode:
            return DEV_ANONYMOUS
        raise MissingTokenError(
            "this endpoint needs a console token: send 'Authorization: Bearer <token>' "
            "(tokens come from PLAITA_CONSOLE_TOKENS or --tokens-file)"
        )
    token = table.lookup(credentials.credentials)
    if token is None:
        raise UnknownTokenError(
            "the bearer token is not one of the console's tokens; check for a typo or ask an "
            "admin for a token (PLAITA_CONSOLE_TOKENS / --tokens-file)"
        )
    return token


def require(role: Role) -> Callable[..., ConsoleToken]:
    """A dependency: the request's token, if its role is at least ``role`` (401/403)."""

    def dependency(request: Request, credentials: Credentials) -> ConsoleToken:
        token = authenticate(request, credentials)
        if token.role < role:
            raise RoleNotAllowedError(
                f"token {token.name!r} has the {token.role.label} role; "
                f"{request.method} {request.url.path} needs {role.label} or above"
            )
        return token

    dependency.__name__ = f"require_{role.label}"
    return dependency


def api_actor(token: ConsoleToken) -> Actor:
    """Who a request acts for, as the execution's history records it: the token's name."""
    return Actor("api", f"token {token.name}")


def authorize_tenant(token: ConsoleToken, tenant_id: str) -> str:
    """``tenant_id`` if ``token`` may act for it, else TenantNotAllowedError (403)."""
    if not token.may_act_for(tenant_id):
        raise TenantNotAllowedError(
            f"token {token.name!r} may act for tenants {token.scope}, not for {tenant_id!r}; "
            "pass one of those as the request's tenant or use a token of that tenant"
        )
    return tenant_id


def authorize_shared(token: ConsoleToken) -> None:
    """Nothing if ``token`` acts for every tenant, else SharedFlowNotAllowedError (403)."""
    if ALL_TENANTS not in token.tenants:
        raise SharedFlowNotAllowedError(
            f"token {token.name!r} may act for tenants {token.scope} only, and a deployment-wide "
            "flow runs for every tenant: registering one needs an admin token of every tenant "
            '(\'*\'); register the flow for your tenant instead ("tenant": "<yours>")'
        )


class DeploymentActionNotAllowedError(TenantNotAllowedError):
    """A tenant's status and quota are the deployment's: only a token of every tenant
    (``*``) may change them (403)."""


def authorize_deployment(token: ConsoleToken, what: str) -> None:
    """Nothing if ``token`` acts for every tenant, else DeploymentActionNotAllowedError."""
    if ALL_TENANTS not in token.tenants:
        raise DeploymentActionNotAllowedError(
            f"token {token.name!r} may act for tenants {token.scope} only, and {what} is the "
            "deployment's to decide, not a tenant's: it needs an admin token of every tenant "
            "('*')"
        )


@attrs.frozen
class Access:
    """The token of a request and the tenant it acts for, once both were checked."""

    token: ConsoleToken
    tenant: str


def access_for_query(role: Role) -> Callable[..., Access]:
    """A dependency for requests naming their tenant in the query (GET, DELETE)."""
    check_role = require(role)

    # A plain default, not an annotation: annotations are strings here and ``check_role`` is
    # local, so FastAPI could not resolve it from the module.
    def dependency(
        tenant: TenantQuery = DEFAULT_TENANT,
        token: ConsoleToken = Depends(check_role),  # noqa: B008
    ) -> Access:
        return Access(token, authorize_tenant(token, tenant))

    dependency.__name__ = f"access_{role.label}"
    return dependency


Viewer = Annotated[ConsoleToken, Depends(require(Role.VIEWER))]
Operator = Annotated[ConsoleToken, Depends(require(Role.OPERATOR))]
Admin = Annotated[ConsoleToken, Depends(require(Role.ADMIN))]
ViewerAccess = Annotated[Access, Depends(access_for_query(Role.VIEWER))]
OperatorAccess = Annotated[Access, Depends(access_for_query(Role.OPERATOR))]
AdminAccess = Annotated[Access, Depends(access_for_query(Role.ADMIN))]
