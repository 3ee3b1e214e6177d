"""RowDescription names a column's table and number; declared types held as text go out in
binary format as Postgres sends them."""

from __future__ import annotations

import struct
import uuid

import pyarrow as pa
import pytest

from streambed.server import pgtypes
from streambed.server.wire import results


def _as_text(pg_type: pgtypes.PgType) -> pgtypes.PgType:
    declared = pgtypes.declared_type(pg_type.oid, pg_type.typmod, "VARCHAR")
    assert declared is not None and declared.stored_as_text
    return declared


def test_row_description_carries_table_oid_and_column_number() -> None:
    specs = results.column_specs([("id", pgtypes.INT4), ("x", pgtypes.TEXT)], (), [(16400, 3)])
    body = results.row_description(specs)[5:]
    assert struct.unpack("!h", body[:2]) == (2,)
    first = body[2 + len(b"id\x00") :][:18]
    assert struct.unpack("!ihihih", first) == (16400, 3, 23, 4, -1, 0)
    second = body[2 + 3 + 18 + len(b"x\x00") :][:18]
    assert struct.unpack("!ihihih", second)[:2] == (0, 0)


def test_int_array_held_as_text_in_binary() -> None:
    int4_array = _as_text(pgtypes.BY_OID[1007])
    encode = results.binary_encoder(int4_array)
    assert encode is not None
    fields = encode(pa.array(["{1,NULL,3}", None, "{}"]))
    header = struct.pack("!iiiii", 1, 1, 23, 3, 1)
    items = struct.pack("!ii", 4, 1) + b"\xff\xff\xff\xff" + struct.pack("!ii", 4, 3)
    assert fields[0] == struct.pack("!i", len(header + items)) + header + items
    assert fields[1] == b"\xff\xff\xff\xff"
    assert fields[2] == struct.pack("!iiii", 12, 0, 0, 23)


def test_uuid_and_jsonb_held_as_text_in_binary() -> None:
    value = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    encode = results.binary_encoder(_as_text(pgtypes.UUID))
    assert encode is not None
    assert encode(pa.array([value]))[0][4:] == uuid.UUID(value).bytes
    encode = results.binary_encoder(_as_text(pgtypes.JSONB))
    assert encode is not None
    assert encode(pa.array(['{"k": 1}']))[0][4:] == b'\x01{"k": 1}'


@pytest.mark.parametrize("oid", [1186, 1187, 869])  # interval, interval[], inet held as text
def test_other_types_held_as_text_have_no_binary_form(oid: int) -> None:
    assert results.binary_encoder(_as_text(pgtypes.BY_OID[oid])) is None


def test_multidimensional_array_text_is_refused_in_binary() -> None:
    encode = results.binary_encoder(_as_text(pgtypes.BY_OID[1007]))
    assert encode is not None
    with pytest.raises(results.UnsupportedBinary):
        encode(pa.array(["{{1},{2}}"]))


def test_vectors_are_space_separated() -> None:
    values = pa.array([[1, 2], [3]], pa.list_(pa.int16()))
    assert pgtypes.encode_text_column(values, pgtypes.INT2VECTOR) == [b"1 2", b"3"]
