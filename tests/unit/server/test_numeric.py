"""Postgres numeric division (select_div_scale and rounding), against values Postgres 15
prints for the same division."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from streambed.server import numeric


def _divide(x: str, y: str) -> Decimal:
    unscaled = numeric.divide(*numeric._parse(x), *numeric._parse(y))
    return Decimal(unscaled).scaleb(-numeric.SCALE)


@pytest.mark.parametrize(
    ("x", "y", "postgres"),
    [
        ("1", "3.0", "0.33333333333333333333"),  # qweight -1: 20 decimals
        ("10.00", "4", "2.5000000000000000"),
        ("4", "3", "1.3333333333333333"),  # avg(1, 1, 2)
        ("37037", "3", "12345.6666666666666667"),  # first digits 3 <= 3: qweight 0
        ("30000", "3", "10000.0000000000000000"),
        ("40000", "3", "13333.333333333333"),  # 4 > 3: qweight 1, 12 decimals
        ("123456789014", "2", "61728394507.00000000"),
        ("0.003", "2", "0.00150000000000000000"),
        ("-15", "2", "-7.5000000000000000"),
        ("15", "-2", "-7.5000000000000000"),
        ("-1", "-3", "0.33333333333333333333"),
        ("2", "3", "0.66666666666666666667"),  # rounded half away from zero
        ("-2", "3", "-0.66666666666666666667"),
        ("0", "3", "0.00000000000000000000"),
        ("123456789.123", "7", "17636684.160428571429"),  # qweight 1: 12 decimals
        ("1.000000", "7", "0.14285714285714285714"),
    ],
)
def test_division_equals_postgres(x: str, y: str, postgres: str) -> None:
    assert _divide(x, y) == Decimal(postgres)
    assert numeric.text(*numeric.quotient(*numeric._parse(x), *numeric._parse(y))) == postgres


@pytest.mark.parametrize(
    ("x", "y", "postgres"),
    [
        ("1", "30000000.0", "0.000000033333333333333333"),  # more than 20 decimals
        ("-2", "3000000", "-0.000000666666666666666667"),
        ("123456789012345678901234.5", "3", "41152263004115226300411.5"),  # past 10^18
    ],
)
def test_text_keeps_postgres_scale_beyond_the_decimal_form(x: str, y: str, postgres: str) -> None:
    assert numeric.text(*numeric.quotient(*numeric._parse(x), *numeric._parse(y))) == postgres


def test_division_by_zero() -> None:
    with pytest.raises(ValueError, match="division by zero"):
        numeric.divide(1, 0, 0, 2)


def test_udfs_build_decimal_arrays_with_nulls() -> None:
    out = numeric._div_udf(pa.array(["1.50", None, "-3"]), pa.array(["3", "2", "0.5"]))
    assert out.type == pa.decimal128(38, numeric.SCALE)
    assert out.to_pylist() == [Decimal("0.5"), None, Decimal("-6")]
    avg = numeric._avg_udf(pa.array(["4", None, "3.00"]), pa.array([3, 0, 0], pa.int64()))
    assert avg.to_pylist() == [Decimal("1.3333333333333333"), None, None]
    with pytest.raises(ValueError, match="overflow"):
        numeric._div_udf(pa.array(["1" + "0" * 30]), pa.array(["3"]))
