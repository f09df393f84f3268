"""Inbound webhook definitions (V10): a named mapping from a signed HTTP request to an event.

A hook has a name (the id rule, ``plaita.domain.ids``: it is the last segment of ``POST
/hooks/{name}``), the event type it publishes, the tenant the event belongs to, where the
correlation id and the data sit in the JSON body (RFC 6901 JSON pointers), its secret, the
names of its signature and timestamp headers and its replay window.

A secret is kept with the hook (``secret``), or referenced (``secret_ref``): ``env:NAME``
is the value of an environment variable of the console, ``file:PATH`` the content of a file
(surrounding whitespace stripped). A reference keeps the secret itself out of the hook store
and out of the hooks file.

One reader checks a definition wherever it comes from — the hooks file, the admin API, the
hook store — and names every problem at once; a secret's value never appears in a message.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import attrs
import jsonpointer
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from plaita.domain.errors import (
    HookDefinitionError,
    InvalidTenantIdError,
)
from plaita.domain.ids import id_problem
from plaita.domain.tenancy import DEFAULT_TENANT, validate_tenant_id

JSON = Any

DEFAULT_SIGNATURE_HEADER = "X-Plaita-Signature"
DEFAULT_TIMESTAMP_HEADER = "X-Plaita-Timestamp"
DEFAULT_REPLAY_WINDOW_SECONDS = 300
MAX_REPLAY_WINDOW_SECONDS = 86_400
#: As the console's tokens: a shorter secret can be guessed.
MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 4096
#: An HTTP header name (RFC 9110 token), kept short.
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
_SECRET_FIELDS = frozenset({"secret"})


class SecretKind(enum.StrEnum):
    STORED = "stored"
    ENV = "env"
    FILE = "file"


@attrs.frozen(repr=False)
class HookSecret:
    """Where a hook's secret is: ``value`` is the secret itself (stored), the variable's name
    (env) or the file's path (file)."""

    kind: SecretKind
    value: str

    def __repr__(self) -> str:  # the secret never reaches a log line or a traceback
        return f"HookSecret({self.source})"

    @property
    def source(self) -> str:
        """``stored``, ``env:NAME`` or ``file:PATH``: what may be shown of it."""
        if self.kind is SecretKind.STORED:
            return "stored"
        return f"{self.kind.value}:{self.value}"


def _name(value: str) -> str:
    problem = id_problem(value, "hook name")
    if problem is not None:
        raise ValueError(problem)
    return value


def _tenant(value: str) -> str:
    try:
        return validate_tenant_id(value)
    except InvalidTenantIdError as exc:
        raise ValueError(str(exc)) from None


def _pointer(value: str) -> str:
    try:
        jsonpointer.JsonPointer(value)
    except jsonpointer.JsonPointerException as exc:
        raise ValueError(
            f"{value!r} is not a JSON pointer (RFC 6901): {exc}; write '' for the whole body "
            "or '/a/b/0' for body['a']['b'][0] ('~1' stands for '/', '~0' for '~')"
        ) from None
    return value


def _header(value: str) -> str:
    if _HEADER.fullmatch(value) is None:
        raise ValueError(
            f"{value!r} is not an HTTP header name (letters, digits and !#$%&'*+.^_`|~-, "
            "at most 128)"
        )
    return value


def _secret_ref(value: str) -> str:
    kind, _, rest = value.partition(":")
    if kind == SecretKind.ENV and _ENV_NAME.fullmatch(rest):
        return value
    if kind == SecretKind.FILE and rest.strip():
        return value
    raise ValueError(
        f"{value!r} is not a secret reference; write 'env:VARIABLE' (an environment variable "
        "of the console) or 'file:/path/to/secret'"
    )


_Text = Annotated[StrictStr, Field(min_length=1, max_length=256)]


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[StrictStr, AfterValidator(_name)]
    event_type: Annotated[_Text, Field(pattern=r"^\S(.*\S)?$")]
    tenant: Annotated[StrictStr, AfterValidator(_tenant)] = DEFAULT_TENANT
    correlation_id_pointer: Annotated[StrictStr, AfterValidator(_pointer)]
    data_pointer: Annotated[StrictStr, AfterValidator(_pointer)] = ""
    secret: (
        Annotated[StrictStr, Field(min_length=MIN_SECRET_LENGTH, max_length=MAX_SECRET_LENGTH)]
        | None
    ) = None
    secret_ref: Annotated[StrictStr, AfterValidator(_secret_ref)] | None = None
    signature_header: Annotated[StrictStr, AfterValidator(_header)] = DEFAULT_SIGNATURE_HEADER
    timestamp_header: Annotated[StrictStr, AfterValidator(_header)] = DEFAULT_TIMESTAMP_HEADER
    replay_window_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_REPLAY_WINDOW_SECONDS)] = (
        DEFAULT_REPLAY_WINDOW_SECONDS
    )

    @model_validator(mode="after")
    def _one_secret(self) -> _Entry:
        if (self.secret is None) == (self.secret_ref is None):
            raise ValueError(
                "give exactly one of secret (the secret itself, at least "
                f"{MIN_SECRET_LENGTH} characters) and secret_ref ('env:VARIABLE' or "
                "'file:/path')"
            )
        if self.signature_header.lower() == self.timestamp_header.lower():
            raise ValueError(
                f"signature_header and timestamp_header are both {self.signature_header!r}; "
                "they must be two headers"
            )
        return self


@attrs.frozen
class HookDefinition:
    name: str
    event_type: str
    tenant_id: str
    correlation_id_pointer: str
    data_pointer: str
    secret: HookSecret
    signature_header: str = DEFAULT_SIGNATURE_HEADER
    timestamp_header: str = DEFAULT_TIMESTAMP_HEADER
    replay_window_seconds: int = DEFAULT_REPLAY_WINDOW_SECONDS

    @property
    def replay_window_ms(self) -> int:
        return self.replay_window_seconds * 1000

    def describe(self) -> dict[str, JSON]:
        """The hook as the API and the CLI show it: everything but the secret's value."""
        return {
            "name": self.name,
            "event_type": self.event_type,
            "tenant": self.tenant_id,
            "correlation_id_pointer": self.correlation_id_pointer,
            "data_pointer": self.data_pointer,
            "secret_source": self.secret.source,
            "signature_header": self.signature_header,
            "timestamp_header": self.timestamp_header,
            "replay_window_seconds": self.replay_window_seconds,
        }

    def to_document(self) -> dict[str, JSON]:
        """The stored form, secret included; ``parse_hook`` reads it back."""
        document = self.describe()
        del document["secret_source"]
        if self.secret.kind is SecretKind.STORED:
            document["secret"] = self.secret.value
        else:
            document["secret_ref"] = self.secret.source
        return document


def parse_hook(raw: object, *, label: str = "the hook") -> HookDefinition:
    """A hook from its JSON form (the file's entries, the API's body, the stored document);
    HookDefinitionError naming every problem otherwise."""
    problems = hook_problems(raw)
    if problems:
        raise HookDefinitionError(f"{label} is not valid: " + "; ".join(problems))
    return _definition(_Entry.model_validate(raw))


def hook_problems(raw: object) -> list[str]:
    """Every problem of a hook's JSON form, one line each (none: it is valid)."""
    if not isinstance(raw, Mapping):
        return [f"a hook is a JSON object, got {type(raw).__name__}"]
    try:
        _Entry.model_validate(raw)
    except ValidationError as exc:
        return [_problem(error) for error in exc.errors()]
    return []


def parse_hooks(entries: Sequence[object], *, source: str) -> tuple[HookDefinition, ...]:
    """The hooks of a list of entries (the hooks file); HookDefinitionError naming every
    problem of every entry, and every name used twice."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(entries):
        name = raw.get("name") if isinstance(raw, Mapping) else None
        label = f"entry {index}" + (f" ({name!r})" if isinstance(name, str) else "")
        problems.extend(f"{label}: {problem}" for problem in hook_problems(raw))
        if isinstance(name, str):
            if name in seen:
                problems.append(f"{label}: the name is taken by entry {seen[name]}")
            seen.setdefault(name, index)
    if problems:
        raise HookDefinitionError(f"the hooks of {source} are not valid: " + "; ".join(problems))
    return tuple(parse_hook(raw) for raw in entries)


def dump_hook(hook: HookDefinition) -> str:
    """The stored form of ``hook`` as compact JSON text (every store keeps this)."""
    return json.dumps(hook.to_document(), sort_keys=True, separators=(",", ":"))


def load_hook(text: str | bytes) -> HookDefinition:
    """The hook of a stored JSON text (``dump_hook``); HookDefinitionError if unreadable."""
    try:
        raw = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HookDefinitionError(f"a stored hook is not JSON ({exc})") from None
    name = raw.get("name") if isinstance(raw, dict) else None
    return parse_hook(raw, label=f"the stored hook {name!r}")


def _definition(entry: _Entry) -> HookDefinition:
    if entry.secret is not None:
        secret = HookSecret(SecretKind.STORED, entry.secret)
    else:
        assert entry.secret_ref is not None
        kind, _, value = entry.secret_ref.partition(":")
        secret = HookSecret(SecretKind(kind), value)
    return HookDefinition(
        name=entry.name,
        event_type=entry.event_type,
        tenant_id=entry.tenant,
        correlation_id_pointer=entry.correlation_id_pointer,
        data_pointer=entry.data_pointer,
        secret=secret,
        signature_header=entry.signature_header,
        timestamp_header=entry.timestamp_header,
        replay_window_seconds=entry.replay_window_seconds,
    )


def _problem(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "hook"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"{where}: required"
    if error["type"] == "extra_forbidden":
        return f"{where}: not a field of a hook (see the hook fields in docs/operations.md)"
    if error["type"] == "value_error" or set(map(str, error["loc"])) & _SECRET_FIELDS:
        return f"{where}: {message}"  # the message names the value; never the secret's
    return f"{where}: {message} (got {error.get('input')!r})"
