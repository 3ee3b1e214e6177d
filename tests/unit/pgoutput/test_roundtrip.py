"""Property: every message of every kind survives encode → decode unchanged.

The strategies here are also used by test_fuzz.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.pgoutput.decoder import Decoder, decode
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import (
    UNCHANGED,
    Begin,
    Binary,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    TupleValue,
    Type,
    Update,
)

u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFF_FFFF)
i32 = st.integers(-(2**31), 2**31 - 1)
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
# Names travel NUL-terminated, so they cannot contain NUL; surrogates are not UTF-8.
names = st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=12)

tuple_values: st.SearchStrategy[TupleValue] = st.one_of(
    st.binary(max_size=40),
    st.none(),
    st.just(UNCHANGED),
    st.builds(Binary, st.binary(max_size=16)),
)
tuples: st.SearchStrategy[TupleData] = st.lists(tuple_values, max_size=8).map(tuple)
columns = st.builds(RelationColumn, u8, names, u32, i32)


def unstreamed_messages() -> st.SearchStrategy[Message]:
    """Messages that never carry an xid after the type byte."""
    return st.one_of(
        st.builds(Begin, u64, i64, u32),
        st.builds(Commit, u8, u64, u64, i64),
        st.builds(Origin, u64, names),
        st.builds(StreamStart, u32, st.booleans()),
        st.just(StreamStop()),
        st.builds(StreamCommit, u32, u8, u64, u64, i64),
        st.builds(StreamAbort, u32, u32),
    )


def streamable_messages(xids: st.SearchStrategy[int | None]) -> st.SearchStrategy[Message]:
    """Messages that carry an xid inside a streamed block (and None outside one)."""
    # An Update has no old tuple (and then old_is_key_only is False), a 'K' or an 'O' one.
    old_tuples = st.one_of(st.tuples(st.none(), st.just(False)), st.tuples(tuples, st.booleans()))
    updates = st.builds(
        lambda relation_id, new, old, xid: Update(relation_id, new, old[0], old[1], xid),
        u32,
        tuples,
        old_tuples,
        xids,
    )
    return st.one_of(
        st.builds(
            Relation,
            u32,
            names,
            names,
            st.sampled_from("dnfi"),
            st.lists(columns, max_size=6).map(tuple),
            xids,
        ),
        st.builds(Type, u32, names, names, xids),
        st.builds(Insert, u32, tuples, xids),
        updates,
        st.builds(Delete, u32, tuples, st.booleans(), xids),
        st.builds(Truncate, u8, st.lists(u32, max_size=6).map(tuple), xids),
        st.builds(LogicalMessage, u8, u64, names, st.binary(max_size=40), xids),
    )


UNSTREAMABLE = unstreamed_messages()
STREAMED = streamable_messages(u32)
UNSTREAMED = streamable_messages(st.none())


@st.composite
def messages(draw: st.DrawFn) -> tuple[Message, bool]:
    """A message of any kind and whether it sits inside a streamed block."""
    in_stream = draw(st.booleans())
    rows = STREAMED if in_stream else UNSTREAMED
    message = draw(st.one_of(UNSTREAMABLE, rows))
    return message, in_stream


@settings(max_examples=500, deadline=None)
@given(messages())
def test_encode_then_decode_gives_the_message_back(case: tuple[Message, bool]) -> None:
    message, in_stream = case
    payload = encode(message, in_stream=in_stream)
    assert decode(payload, in_stream=in_stream) == message
    assert decode(memoryview(payload), in_stream=in_stream) == message


@settings(max_examples=150, deadline=None)
@given(messages())
def test_decode_then_encode_gives_the_bytes_back(case: tuple[Message, bool]) -> None:
    message, in_stream = case
    payload = encode(message, in_stream=in_stream)
    assert encode(decode(payload, in_stream=in_stream), in_stream=in_stream) == payload


@st.composite
def streams(draw: st.DrawFn) -> list[tuple[Message, bool]]:
    """A replication stream: plain transactions and streamed blocks, in protocol order."""
    sequence: list[tuple[Message, bool]] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            xid = draw(u32)
            sequence.append((StreamStart(xid, draw(st.booleans())), False))
            body = draw(st.lists(streamable_messages(st.just(xid)), max_size=5))
            sequence.extend((message, True) for message in body)
            sequence.append((StreamStop(), True))
            commit = st.builds(StreamCommit, st.just(xid), u8, u64, u64, i64)
            end = draw(st.one_of(commit, st.builds(StreamAbort, st.just(xid), u32)))
            sequence.append((end, False))
        else:
            sequence.append((draw(st.builds(Begin, u64, i64, u32)), False))
            body = draw(st.lists(UNSTREAMED, max_size=5))
            sequence.extend((message, False) for message in body)
            sequence.append((draw(st.builds(Commit, u8, u64, u64, i64)), False))
    return sequence


@settings(max_examples=100, deadline=None)
@given(streams())
def test_decoder_follows_streamed_blocks(stream: list[tuple[Message, bool]]) -> None:
    decoder = Decoder()
    for message, in_stream in stream:
        payload = encode(message, in_stream=in_stream)
        assert decoder.decode(payload) == message
        expected_in_stream = isinstance(message, StreamStart) or (
            in_stream and not isinstance(message, StreamStop)
        )
        assert decoder.in_stream == expected_in_stream
    assert not decoder.in_stream
