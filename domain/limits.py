"""How deep and how large a JSON document plaita accepts, checked the same way everywhere.

One limit for the values a caller or a handler hands in — an execution's input, an event's
data, a node's result or a variable it sets: at most ``MAX_JSON_DEPTH`` levels of nested
objects and arrays and ``MAX_JSON_BYTES`` bytes as compact UTF-8 JSON. A task envelope on the
stream carries such a value a few levels down, so it may be ``WRAPPER_DEPTH`` levels deeper
and ``WRAPPER_BYTES`` larger: whatever an entrance accepted always fits the envelope a worker
reads.

The depth limit sits far below every recursive JSON reader in the path (Python's ``json``
module, pydantic's parser and validators, the expression evaluator), so an accepted document
can never make one of them raise ``RecursionError``. The checks here are iterative: they
refuse a 10,000-deep document without ever recursing into it.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.domain.errors import PayloadNotUnicodeError, PayloadTooDeepError, PayloadTooLargeError

JSON = Any

MAX_JSON_DEPTH = 64
MAX_JSON_BYTES = 1024 * 1024
WRAPPER_DEPTH = 4
WRAPPER_BYTES = 64 * 1024


@attrs.frozen
class JsonLimit:
    """The limit of one kind of document; ``what`` names the kind in error messages.

    ``max_bytes`` None: no size limit at this layer (the console's request bodies have the
    operator's ``--max-body-bytes``; evidence is as large as what it copies).
    """

    what: str
    max_depth: int
    max_bytes: int | None


INPUT_LIMIT = JsonLimit("execution input", MAX_JSON_DEPTH, MAX_JSON_BYTES)
EVENT_DATA_LIMIT = JsonLimit("event data", MAX_JSON_DEPTH, MAX_JSON_BYTES)
#: The whole event as a resume carrier embeds it: its data one level down, with its type,
#: correlation id and source counted towards the same size.
EVENT_LIMIT = JsonLimit("event data", MAX_JSON_DEPTH + 1, MAX_JSON_BYTES)
RESULT_LIMIT = JsonLimit("node result", MAX_JSON_DEPTH, MAX_JSON_BYTES)
VARIABLE_LIMIT = JsonLimit("execution variable", MAX_JSON_DEPTH, MAX_JSON_BYTES)
ENVELOPE_LIMIT = JsonLimit(
    "task envelope", MAX_JSON_DEPTH + WRAPPER_DEPTH, MAX_JSON_BYTES + WRAPPER_BYTES
)
#: A console request body is parsed, never stored: it is refused only well before its parser
#: (Python's ``json``, which gives up near 1,000 levels) could fail, so that a value nested
#: deeper than its own limit inside it is refused by name, as its own field.
REQUEST_BODY_LIMIT = JsonLimit("request body", 512, None)

# A JSON string as one token (escapes included), or one bracket. Strings are matched whole so
# the brackets inside them are not counted. The closing quote is optional: an unterminated
# string then ends the scan in one pass, where a failed match would be retried from every
# escaped quote inside it (quadratic: a 1 MiB envelope would hold a worker for an hour). A
# parser stops at such a string too, so nothing after it can nest.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_OPENERS = ("[", "{")
_CLOSERS = ("]", "}")
_CONTAINERS = (Mapping, list, tuple)


def check_json_value(value: JSON, limit: JsonLimit, *, field: str) -> str:
    """Refuse ``value`` if it breaks ``limit``; else its compact JSON text.

    The shape is checked first, without recursion, so the encoding that measures the size
    never meets a document deep enough to overflow the stack (or a cycle). ``field`` names
    the value in the message (``input``, ``data``, ``node 'a' result``). A value that is not
    JSON raises ``TypeError``/``ValueError`` from the encoder, as ``json.dumps`` does.
    """
    shape = _value_shape(value, limit.max_depth, limit.max_bytes)
    if shape is _Shape.TOO_DEEP:
        raise _too_deep(limit, field)
    if shape is _Shape.TOO_LARGE:
        raise _too_large(limit, field, f"more than {limit.max_bytes} bytes")
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    check_json_size(text, limit, field=field)
    check_unicode(text, field=field)
    return text


def check_json_text(text: str | bytes, limit: JsonLimit, *, field: str) -> None:
    """Refuse the JSON text ``text`` if it breaks ``limit``, before anything parses it.

    Size first (cheap), then depth by a scan of the brackets outside strings. Text that is
    not valid JSON is left for the parser to refuse, except where its brackets alone already
    break the depth limit.
    """
    check_json_size(text, limit, field=field)
    if _text_too_deep(text, limit.max_depth):
        raise _too_deep(limit, field)
    if isinstance(text, str):
        check_unicode(text, field=field)


#: A lone surrogate as it stands in decoded text (JSON's ``\\ud800`` escapes are decoded).
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_unicode(text: str, *, field: str) -> None:
    """Refuse ``text`` when it holds a lone surrogate: it has no UTF-8 form to be stored in.

    ``PayloadNotUnicodeError`` names the field and the character's position. An escape in
    JSON text (``"\\ud800"``) is only found once the text is parsed and checked again.
    """
    found = _SURROGATE.search(text)
    if found is not None:
        raise PayloadNotUnicodeError(
            f"{field} holds a lone surrogate (U+{ord(found.group()):04X}) at character "
            f"{found.start()} of its JSON text: it is not Unicode text and cannot be stored; "
            "fix the encoder that produced it (a UTF-16 pair split in two, or bytes decoded "
            "with errors='surrogateescape')"
        )


def check_json_size(text: str | bytes, limit: JsonLimit, *, field: str) -> None:
    if limit.max_bytes is None:
        return
    size = _utf8_size(text, limit.max_bytes)
    if size > limit.max_bytes:
        raise _too_large(limit, field, f"{size} bytes")


def _too_deep(limit: JsonLimit, field: str) -> PayloadTooDeepError:
    return PayloadTooDeepError(
        f"{field} ({limit.what}) nests objects and arrays more than {limit.max_depth} levels "
        f"deep; at most {limit.max_depth} are allowed (the {limit.what} depth limit); "
        "flatten it"
    )


def _too_large(limit: JsonLimit, field: str, size: str) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"{field} ({limit.what}) is {size} as compact JSON; at most {limit.max_bytes} bytes "
        f"are allowed (the {limit.what} size limit); keep large data elsewhere and pass a "
        "reference to it"
    )


def _utf8_size(text: str | bytes, max_bytes: int) -> int:
    if isinstance(text, bytes):
        return len(text)
    # A character is at most 4 bytes in UTF-8: short text needs no encoding to be measured.
    if len(text) * 4 <= max_bytes:
        return len(text)
    return len(text.encode("utf-8", errors="surrogatepass"))


class _Shape(enum.Enum):
    FITS = "fits"
    TOO_DEEP = "too_deep"
    TOO_LARGE = "too_large"


def _value_shape(value: JSON, max_depth: int, max_bytes: int | None) -> _Shape:
    """Walk the containers of ``value`` without recursion, never further than the limits.

    Every element costs at least one byte of JSON, so more than ``max_bytes`` elements is too
    large however they are encoded: the walk ends there even when one list is shared many
    times over. A cycle is too deep.
    """
    stack: list[tuple[JSON, int]] = [(value, 0)]
    elements = 0
    while stack:
        current, depth = stack.pop()
        if isinstance(current, Mapping):
            children: Any = current.values()
        elif isinstance(current, list | tuple):
            children = current
        else:
            continue
        depth += 1
        if depth > max_depth:
            return _Shape.TOO_DEEP
        elements += len(current)
        if max_bytes is not None and elements > max_bytes:
            return _Shape.TOO_LARGE
        stack.extend((child, depth) for child in children if isinstance(child, _CONTAINERS))
    return _Shape.FITS


def _text_too_deep(text: str | bytes, max_depth: int) -> bool:
    if isinstance(text, bytes):
        # Brackets and quotes are ASCII: any decoding that keeps them in place will do.
        text = text.decode("utf-8", errors="surrogateescape")
    # Depth never exceeds the number of openers, strings included: most documents are
    # decided by two counts in C, and only the rest are scanned token by token.
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    for token in _TOKENS.finditer(text):
        bracket = token.group()
        if bracket in _OPENERS:
            depth += 1
            if depth > max_depth:
                return True
        elif bracket in _CLOSERS:
            depth = max(0, depth - 1)
    return False
