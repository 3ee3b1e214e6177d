"""Property: any bytes decode to a message or raise DecodeError, never anything else.

Random bytes, random bytes behind each valid type byte, every truncation of valid messages,
valid messages with trailing bytes, and valid messages with one byte changed.
"""

from __future__ import annotations

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from streambed.core.errors import DecodeError
from streambed.pgoutput.decoder import Decoder, decode
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import Insert, Message, StreamStart
from tests.unit.pgoutput.test_roundtrip import messages

KIND_BY_TYPE_BYTE = {
    ord("B"): "Begin",
    ord("C"): "Commit",
    ord("O"): "Origin",
    ord("R"): "Relation",
    ord("Y"): "Type",
    ord("I"): "Insert",
    ord("U"): "Update",
    ord("D"): "Delete",
    ord("T"): "Truncate",
    ord("M"): "Message",
    ord("S"): "StreamStart",
    ord("E"): "StreamStop",
    ord("c"): "StreamCommit",
    ord("A"): "StreamAbort",
}


def decode_or_error(payload: bytes, in_stream: bool) -> Message | DecodeError:
    """Decode; a DecodeError is returned after checking it names the kind and an offset."""
    try:
        return decode(payload, in_stream=in_stream)
    except DecodeError as error:
        expected_kind = KIND_BY_TYPE_BYTE.get(payload[0], "unknown") if payload else "unknown"
        assert error.message_kind == expected_kind
        assert 0 <= error.offset <= len(payload)
        assert error.detail
        return error


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64), st.booleans())
@example(b"", False)
@example(b"\xff", False)
def test_random_bytes(payload: bytes, in_stream: bool) -> None:
    result = decode_or_error(payload, in_stream)
    if not isinstance(result, DecodeError):
        # Anything accepted is a message that encodes back to exactly the input.
        assert encode(result, in_stream=in_stream) == payload


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(sorted(KIND_BY_TYPE_BYTE)), st.binary(max_size=64), st.booleans())
def test_random_bytes_behind_a_valid_type_byte(
    type_byte: int, body: bytes, in_stream: bool
) -> None:
    payload = bytes([type_byte]) + body
    result = decode_or_error(payload, in_stream)
    if not isinstance(result, DecodeError):
        assert encode(result, in_stream=in_stream) == payload


@settings(max_examples=300, deadline=None)
@given(messages())
def test_every_truncation_of_a_valid_message_is_an_error(case: tuple[Message, bool]) -> None:
    message, in_stream = case
    payload = encode(message, in_stream=in_stream)
    for cut in range(len(payload)):
        result = decode_or_error(payload[:cut], in_stream)
        # Every message is self-delimiting: no strict prefix of one is a message.
        assert isinstance(result, DecodeError), (cut, result)


@settings(max_examples=200, deadline=None)
@given(messages(), st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_an_error(case: tuple[Message, bool], tail: bytes) -> None:
    message, in_stream = case
    payload = encode(message, in_stream=in_stream)
    result = decode_or_error(payload + tail, in_stream)
    assert isinstance(result, DecodeError)
    assert result.offset == len(payload)
    assert "unexpected bytes" in result.detail or "protocol 4" in result.detail


@settings(max_examples=300, deadline=None)
@given(messages(), st.data())
def test_one_changed_byte(case: tuple[Message, bool], data: st.DataObject) -> None:
    message, in_stream = case
    payload = bytearray(encode(message, in_stream=in_stream))
    index = data.draw(st.integers(0, len(payload) - 1))
    payload[index] = data.draw(st.integers(0, 255))
    result = decode_or_error(bytes(payload), in_stream)
    if not isinstance(result, DecodeError):
        assert encode(result, in_stream=in_stream) == bytes(payload)


@settings(max_examples=200, deadline=None)
@given(messages())
def test_wrong_stream_flag_never_crashes(case: tuple[Message, bool]) -> None:
    # A caller that loses track of streamed blocks gets garbage or DecodeError, not a crash.
    message, in_stream = case
    decode_or_error(encode(message, in_stream=in_stream), not in_stream)


def assert_insert_row_agrees(payload: bytes) -> None:
    """`Decoder.insert_row` gives what `decode` gives for an Insert outside a streamed
    block (the row, or the same DecodeError), and None for everything else."""
    expected = decode_or_error(payload, False)
    try:
        row = Decoder().insert_row(payload)
    except DecodeError as error:
        assert isinstance(expected, DecodeError)
        assert (error.message_kind, error.offset, error.detail) == (
            expected.message_kind,
            expected.offset,
            expected.detail,
        )
        return
    if payload[:1] != b"I":
        assert row is None
    else:
        assert isinstance(expected, Insert)
        assert row == (expected.relation_id, expected.new)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=8).map(lambda b: b"I" + b) | st.binary(max_size=64))
def test_insert_row_agrees_with_decode_on_random_bytes(payload: bytes) -> None:
    assert_insert_row_agrees(payload)


@settings(max_examples=300, deadline=None)
@given(messages(), st.data())
def test_insert_row_agrees_with_decode_on_changed_and_cut_messages(
    case: tuple[Message, bool], data: st.DataObject
) -> None:
    message, in_stream = case
    assume(not in_stream)
    payload = bytearray(encode(message, in_stream=False))
    assert_insert_row_agrees(bytes(payload))
    index = data.draw(st.integers(0, len(payload) - 1))
    payload[index] = data.draw(st.integers(0, 255))
    assert_insert_row_agrees(bytes(payload))
    assert_insert_row_agrees(bytes(payload[: data.draw(st.integers(0, len(payload)))]))


def test_insert_row_leaves_streamed_inserts_to_decode() -> None:
    decoder = Decoder()
    decoder.decode(encode(StreamStart(7, True), in_stream=False))
    assert decoder.insert_row(encode(Insert(1, (b"1",), 7), in_stream=True)) is None
