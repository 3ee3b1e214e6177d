"""The column-at-once binary numeric encoder gives the bytes the value-by-value one gives."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.server.wire.results import (
    _I32,
    _NULL,
    _numeric,
    numeric_binary_column,
    numeric_binary_unscaled,
)

WIDE = decimal.Context(prec=50)  # Decimal rounds to 28 digits by default
int64s = st.integers(-(2**63), 2**63 - 1)
edges = st.sampled_from([0, 1, -1, 9999, 10000, -10000, 10**15, 2**63 - 1, -(2**63)])


@settings(max_examples=300, deadline=None)
@given(st.lists(int64s | edges, min_size=1, max_size=50), st.integers(0, 15))
def test_column_encoder_equals_the_value_encoder(values: list[int], scale: int) -> None:
    fields = numeric_binary_column(np.array(values, dtype=np.int64), scale)
    expected = [numeric_binary_unscaled(v, scale) for v in values]
    assert fields == [_I32.pack(len(e)) + e for e in expected]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.none() | st.integers(-(10**37) + 1, 10**37 - 1), min_size=1, max_size=30),
    st.integers(0, 20),
)
def test_decimal_columns_with_nulls_and_wide_values(values: list[int | None], scale: int) -> None:
    # wide values and scales above 15 take the value-by-value path; the bytes are the same
    array = pa.array(
        [None if v is None else decimal.Decimal(v).scaleb(-scale, WIDE) for v in values],
        pa.decimal128(38, scale),
    )
    expected = [
        _NULL if v is None else _I32.pack(len(b)) + b
        for v, b in ((v, numeric_binary_unscaled(v or 0, scale)) for v in values)
    ]
    assert _numeric(array) == expected


def test_integer_columns_are_numeric_with_scale_zero() -> None:
    array = pa.array([5, None, -123456789012], pa.int64())
    assert _numeric(array)[1] == _NULL
    assert _numeric(array)[2] == _I32.pack(14) + numeric_binary_unscaled(-123456789012, 0)


def test_unsigned_values_beyond_int64_take_the_value_path() -> None:
    array = pa.array([2**64 - 1, 3], pa.uint64())
    expected = [numeric_binary_unscaled(2**64 - 1, 0), numeric_binary_unscaled(3, 0)]
    assert _numeric(array) == [_I32.pack(len(e)) + e for e in expected]
