"""Task envelopes on the wire: round trip and named errors for bad entries (W11, R4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.application.codec import (
    ENVELOPE_FIELD,
    SCHEMA_FIELD,
    decode_dead_letter,
    decode_delivery,
    decode_envelope,
    encode_dead_letter,
    encode_envelope,
    envelope_document,
)
from plaita.domain.config_generations import MALFORMED_EVENT
from plaita.domain.envelope import (
    CURRENT_SCHEMA_VERSION,
    LEGACY_GENERATIONS,
    CarrierGenerations,
    EventPath,
    ResumeType,
    TaskEnvelope,
    copy_envelope,
)
from plaita.domain.errors import InvalidEnvelopeError, SchemaVersionError
from plaita.domain.limits import ENVELOPE_LIMIT, MAX_JSON_DEPTH
from plaita.domain.priorities import Priority

from ..strategies import json_objects, valid_ids

ids = valid_ids
millis = st.integers(min_value=0, max_value=2**53)
tenants = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,15}", fullmatch=True)
digests = st.text("0123456789abcdef", min_size=16, max_size=16)
generations = st.builds(
    CarrierGenerations,
    config_family=st.none() | digests.map("cf1-".__add__),
    config_generation=st.none() | digests.map("cfg1-".__add__),
    budget_generation=st.none() | digests.map("bg1-".__add__),
)

start_envelopes = st.builds(
    TaskEnvelope.start,
    execution_id=ids,
    flow_id=ids,
    version=st.none() | ids,
    params=json_objects,
    now_ms=millis,
    tenant_id=tenants,
    dedup_key=st.none() | ids,
    generations=generations,
    target_instance_id=st.none() | ids,
    priority=st.sampled_from(Priority),
)
resume_envelopes = st.builds(
    TaskEnvelope.resume,
    execution_id=ids,
    flow_id=ids,
    resume_type=st.sampled_from(ResumeType),
    now_ms=millis,
    event=st.none() | json_objects,
    subscription_id=st.none() | ids,
    tenant_id=tenants,
    generations=generations,
    origin=st.none() | st.sampled_from([path.value for path in EventPath]),
)


VALID_BODY: dict[str, Any] = {
    "kind": "resume",
    "execution_id": "x-1",
    "flow_id": "approval",
    "timestamp_ms": 1_000,
    "resume_type": "event",
    "event": {"event_type": "approval_decision"},
    "subscription_id": "s-1",
}


def entry(body: Any, schema_version: str | None = "1") -> dict[str, str]:
    fields = {ENVELOPE_FIELD: body if isinstance(body, str) else json.dumps(body)}
    if schema_version is not None:
        fields[SCHEMA_FIELD] = schema_version
    return fields


@given(start_envelopes | resume_envelopes)
def test_every_envelope_survives_encode_then_decode(envelope: TaskEnvelope) -> None:
    assert decode_envelope(encode_envelope(envelope)) == envelope


def test_an_encoded_envelope_is_flat_string_fields_with_the_schema_version_apart() -> None:
    """A worker can refuse a newer envelope without parsing the rest of it (W11)."""
    envelope = TaskEnvelope.start(
        execution_id="x",
        flow_id="f",
        version=None,
        params={"a": 1},
        now_ms=5,
        generations=LEGACY_GENERATIONS,
    )

    fields = encode_envelope(envelope)

    assert set(fields) == {ENVELOPE_FIELD, SCHEMA_FIELD}
    assert all(isinstance(value, str) for value in fields.values())
    assert fields[SCHEMA_FIELD] == str(CURRENT_SCHEMA_VERSION)
    assert json.loads(fields[ENVELOPE_FIELD])["params"] == {"a": 1}


def test_a_valid_entry_decodes_to_the_envelope_it_describes() -> None:
    envelope = decode_envelope(entry(VALID_BODY))

    assert envelope == TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="approval",
        resume_type=ResumeType.EVENT,
        now_ms=1_000,
        event={"event_type": "approval_decision"},
        subscription_id="s-1",
        generations=LEGACY_GENERATIONS,
    )


def test_an_event_resumes_origin_travels_only_when_it_is_set() -> None:
    """The path that routed an event (for its history); older carriers have none and an
    unreadable one is dropped, never a reason to refuse the carrier."""
    plain = decode_envelope(entry(VALID_BODY))
    assert plain.origin is None and "origin" not in json.loads(
        encode_envelope(plain)[ENVELOPE_FIELD]
    )
    routed = decode_envelope(entry({**VALID_BODY, "origin": "reconciler"}))
    assert routed.origin == "reconciler"
    assert decode_envelope(entry({**VALID_BODY, "origin": ["odd"]})).origin is None


def test_an_entry_without_schema_version_is_read_as_the_current_one() -> None:
    """Missing fields mean a legacy carrier, which stays executable (W11, W12)."""
    assert decode_envelope(entry(VALID_BODY, schema_version=None)).schema_version == 1


def test_an_entry_without_generations_is_a_legacy_carrier() -> None:
    """W12 rule 4: carriers written before generations existed stay executable."""
    assert decode_envelope(entry(VALID_BODY)).generations == LEGACY_GENERATIONS


@pytest.mark.parametrize("malformed", ["cf1-not-hex", "", 7, ["cf1-0123456789abcdef"]])
def test_a_malformed_generation_is_read_as_missing_with_a_warning(
    malformed: object, caplog: pytest.LogCaptureFixture
) -> None:
    """W12 rule 4: never replaced by this worker's value, never a reason to refuse the carrier."""
    body = VALID_BODY | {"config_family": malformed, "budget_generation": "bg1-0123456789abcdef"}

    with caplog.at_level("WARNING", logger="plaita.codec"):
        envelope = decode_envelope(entry(body))

    assert envelope.generations == CarrierGenerations(budget_generation="bg1-0123456789abcdef")
    warned = [r.getMessage() for r in caplog.records]
    assert (len(warned) == 1 and MALFORMED_EVENT in warned[0]) is (malformed != "")


def test_unknown_body_fields_are_ignored() -> None:
    envelope = decode_envelope(entry(VALID_BODY | {"shiny_new_field": "w-2"}))

    assert envelope.execution_id == "x-1"


# --- affinity (W25) -------------------------------------------------------------------


@given(start_envelopes, st.integers(min_value=0, max_value=10_000))
def test_a_target_and_its_hand_over_count_survive_the_wire(
    envelope: TaskEnvelope, handovers: int
) -> None:
    copy = copy_envelope(envelope, handovers=handovers)
    assert decode_envelope(encode_envelope(copy)) == copy


def test_a_carrier_without_a_target_is_written_as_before_affinity_existed() -> None:
    """Neither field is written when unset, so older workers and byte counts see no change;
    an older carrier without them reads as naming no target."""
    plain = decode_envelope(entry(VALID_BODY))
    document = json.loads(encode_envelope(plain)[ENVELOPE_FIELD])
    assert "target_instance_id" not in document and "handovers" not in document
    assert (plain.target_instance_id, plain.handovers) == (None, 0)


def test_an_entry_naming_a_target_decodes_it() -> None:
    envelope = decode_envelope(entry(VALID_BODY | {"target_instance_id": "w-2", "handovers": 3}))
    assert (envelope.target_instance_id, envelope.handovers) == ("w-2", 3)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"target_instance_id": "two words"}, "target instance id"),
        ({"target_instance_id": ""}, "target instance id"),
        ({"target_instance_id": 7}, "target instance id"),
        ({"handovers": -1}, "hand-over count"),
        ({"handovers": "3"}, "hand-over count"),
        ({"handovers": True}, "hand-over count"),
    ],
)
def test_a_malformed_target_or_count_makes_the_entry_malformed_by_name(
    fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidEnvelopeError, match=problem):
        decode_envelope(entry(VALID_BODY | fields))


def test_a_normal_carrier_encodes_no_priority_and_an_older_one_reads_as_normal() -> None:
    """A normal carrier is byte for byte what it was before priorities existed."""
    plain = decode_envelope(entry(VALID_BODY))
    assert "priority" not in json.loads(encode_envelope(plain)[ENVELOPE_FIELD])
    assert plain.priority is Priority.NORMAL


@pytest.mark.parametrize("level", [Priority.HIGH, Priority.LOW])
def test_a_high_or_low_carrier_travels_with_its_priority(level: Priority) -> None:
    envelope = decode_envelope(entry(VALID_BODY | {"priority": level.value}))
    assert envelope.priority is level
    assert json.loads(encode_envelope(envelope)[ENVELOPE_FIELD])["priority"] == level.value


@pytest.mark.parametrize("raw", ["urgent", "HIGH", 1, ""])
def test_a_malformed_priority_makes_the_entry_malformed_by_name(raw: object) -> None:
    with pytest.raises(InvalidEnvelopeError, match="priority"):
        decode_envelope(entry(VALID_BODY | {"priority": raw}))


# --- schema versions (W11) ----------------------------------------------------------


@pytest.mark.parametrize("version", ["2", "99"])
def test_a_newer_schema_version_raises_schema_version_error(version: str) -> None:
    with pytest.raises(SchemaVersionError):
        decode_envelope(entry(VALID_BODY, schema_version=version))


@pytest.mark.parametrize("body", ["{", "{}", '{"kind": "shiny-new-kind"}'])
def test_a_newer_schema_version_is_refused_before_the_body_is_read(body: str) -> None:
    """A newer envelope is dead-lettered as too new, not as malformed (W11)."""
    with pytest.raises(SchemaVersionError):
        decode_envelope(entry(body, schema_version="2"))


@pytest.mark.parametrize("version", ["0", "-1"])
def test_zero_or_negative_schema_version_raises_schema_version_error(version: str) -> None:
    with pytest.raises(SchemaVersionError):
        decode_envelope(entry(VALID_BODY, schema_version=version))


@pytest.mark.parametrize("version", ["", "one", "1.0", "v1"])
def test_a_schema_version_that_is_not_an_integer_raises_invalid_envelope(version: str) -> None:
    with pytest.raises(InvalidEnvelopeError, match="schema_version"):
        decode_envelope(entry(VALID_BODY, schema_version=version))


# --- malformed entries (R4) ---------------------------------------------------------


def test_an_entry_without_the_envelope_field_raises_invalid_envelope() -> None:
    with pytest.raises(InvalidEnvelopeError, match=ENVELOPE_FIELD):
        decode_envelope({SCHEMA_FIELD: "1", "payload": "{}"})


@pytest.mark.parametrize("body", ["", "{", "not json", '{"kind": "start",}', "\x00"])
def test_malformed_json_raises_invalid_envelope(body: str) -> None:
    with pytest.raises(InvalidEnvelopeError, match="malformed"):
        decode_envelope(entry(body))


@pytest.mark.parametrize("body", ["[]", "null", '"start"', "7"])
def test_json_that_is_not_an_object_raises_invalid_envelope(body: str) -> None:
    with pytest.raises(InvalidEnvelopeError):
        decode_envelope(entry(body))


@pytest.mark.parametrize("missing", ["kind", "execution_id", "flow_id", "timestamp_ms"])
def test_a_missing_required_field_raises_invalid_envelope_naming_it(missing: str) -> None:
    body = {key: value for key, value in VALID_BODY.items() if key != missing}

    with pytest.raises(InvalidEnvelopeError, match=missing):
        decode_envelope(entry(body))


BAD_BODIES: dict[str, dict[str, Any]] = {
    "unknown kind": VALID_BODY | {"kind": "restart"},
    "unknown resume_type": VALID_BODY | {"resume_type": "rewind"},
    "resume without resume_type": VALID_BODY | {"resume_type": None},
    "start with a resume_type": VALID_BODY | {"kind": "start"},
    "empty execution_id": VALID_BODY | {"execution_id": ""},
    "empty flow_id": VALID_BODY | {"flow_id": ""},
    "empty tenant_id": VALID_BODY | {"tenant_id": ""},
    "negative timestamp": VALID_BODY | {"timestamp_ms": -1},
    "timestamp is text": VALID_BODY | {"timestamp_ms": "yesterday"},
    "params is a list": VALID_BODY | {"params": [1, 2]},
    "event is a string": VALID_BODY | {"event": "approved"},
    # R4: ids that would be unaddressable once stored.
    "execution_id with a slash": VALID_BODY | {"execution_id": "../../etc"},
    "execution_id is a number": VALID_BODY | {"execution_id": 7},
    "flow_id with a space": VALID_BODY | {"flow_id": "my flow"},
    "event_id with a brace": VALID_BODY | {"event": {"event_type": "t", "event_id": "{x}"}},
    "params is a string": VALID_BODY | {"params": "amount=1"},
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_an_invalid_body_raises_invalid_envelope(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidEnvelopeError, match="malformed"):
        decode_envelope(entry(body))


def test_an_entry_naming_an_invalid_tenant_raises_invalid_envelope() -> None:
    """W24: a carrier with a tenant no namespace can hold is malformed, kept as evidence."""
    body = {**VALID_BODY, "tenant_id": "acme:eu"}
    with pytest.raises(InvalidEnvelopeError, match="'acme:eu'"):
        decode_envelope(entry(body))


# --- R4: hostile entries, decoded one at a time -----------------------------------


def test_an_envelope_over_the_depth_limit_is_refused_before_it_is_parsed() -> None:
    """R4: a 10,000-deep envelope names the limit instead of a parser's RecursionError."""
    deep = "[" * 10_000 + "]" * 10_000
    with pytest.raises(InvalidEnvelopeError, match="task envelope depth limit"):
        decode_envelope(entry(deep))


def test_an_envelope_over_the_size_limit_is_refused_naming_it() -> None:
    body = VALID_BODY | {"params": {"blob": "x" * (ENVELOPE_LIMIT.max_bytes + 1)}}
    with pytest.raises(InvalidEnvelopeError, match="task envelope size limit"):
        decode_envelope(entry(body))


def test_an_envelope_carrying_event_data_at_the_limit_is_accepted() -> None:
    """The boundaries agree: event data the publish accepted fits the envelope carrying it."""
    data: Any = 1
    for _ in range(MAX_JSON_DEPTH):
        data = {"k": data}
    body = VALID_BODY | {"event": {"event_type": "t", "event_id": "e-1", "data": data}}
    assert decode_envelope(entry(body)).event == body["event"]


def test_a_non_utf8_entry_becomes_an_undecodable_delivery_with_its_exact_bytes() -> None:
    """R4: decoded on its own, named, and kept losslessly (base64) as evidence."""
    delivery = decode_delivery("1-0", {b"envelope": b"\xff\xfe", b"schema_version": b"1"}, 1)

    assert delivery.envelope is None
    assert delivery.problem == (
        "entry is not UTF-8: field 'envelope' has byte 0xff at offset 0; its exact bytes are "
        "kept in raw_base64 as evidence"
    )
    assert delivery.raw == {"envelope": "\\xff\\xfe", "schema_version": "1"}
    assert delivery.raw_base64 == (("ZW52ZWxvcGU=", "//4="), ("c2NoZW1hX3ZlcnNpb24=", "MQ=="))


def test_a_non_utf8_field_name_is_named_too() -> None:
    delivery = decode_delivery("1-0", {b"\xc3": b"v"}, 1)
    assert delivery.problem and "a field name has byte 0xc3" in delivery.problem
    assert delivery.raw_base64 == (("ww==", "dg=="),)


def test_a_utf8_entry_read_as_bytes_decodes_like_text() -> None:
    envelope = decode_envelope(entry(VALID_BODY))
    fields = encode_envelope(envelope)
    raw = {name.encode(): value.encode() for name, value in fields.items()}

    delivery = decode_delivery("1-0", raw, 2, reclaimed=True)

    assert (delivery.envelope, delivery.raw, delivery.raw_base64) == (envelope, fields, None)
    assert (delivery.delivery_count, delivery.reclaimed) == (2, True)


def test_the_dead_letter_of_a_non_utf8_entry_is_ascii_and_round_trips() -> None:
    delivery = decode_delivery("1-0", {b"envelope": b"\xff"}, 1)

    fields = encode_dead_letter(delivery, "not UTF-8")

    assert all(value.isascii() for value in fields.values())
    letter = decode_dead_letter("2-0", fields)
    assert (letter.raw, letter.raw_base64) == (delivery.raw, delivery.raw_base64)


def test_a_hand_written_dead_letter_is_shown_as_best_it_can_be() -> None:
    letter = decode_dead_letter("2-0", {"raw": "[" * 10_000, "raw_base64": "nope"})
    assert letter.raw == {"raw": "[" * 10_000}
    assert letter.raw_base64 is None


@pytest.mark.parametrize("body", ["[" * 10_000 + "]" * 10_000, "not json", "[]", "\\xff"], ids=repr)
def test_the_evidence_view_of_a_hostile_envelope_is_none_never_an_error(body: str) -> None:
    assert envelope_document({ENVELOPE_FIELD: body}) is None


def test_the_evidence_view_of_a_readable_envelope_is_its_document() -> None:
    assert envelope_document(entry(VALID_BODY)) == VALID_BODY
