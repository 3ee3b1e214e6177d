"""Postgres numeric division (select_div_scale and rounding), against values Postgres 15
prints for the same division."""

from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pytest
from pglast import ast

from streambed.server import numeric, numeric_batch, numeric_math, sqlparse


def _quotient(x: str, y: str, max_scale: int | None = None) -> str:
    parsed = (*numeric_math.parse(x), *numeric_math.parse(y))
    return numeric_math.text(*numeric_math.quotient(*parsed, max_scale))


def _batch(
    x: list[str], kx: int, y: list[str], ky: int, max_scale: int | None = None
) -> list[str | None]:
    """numeric_batch.quotients with each operand as DECIMAL(18, 6) where that holds it
    (within 10^12), else as text, as the DuckDB macro passes them."""

    def split(values: list[str]) -> tuple[pa.Array, pa.Array]:
        fast = [Decimal(v) if abs(Decimal(v)) < 10**12 else None for v in values]
        text = [v if f is None else None for v, f in zip(values, fast, strict=True)]
        return pa.array(fast, pa.decimal128(18, 6)), pa.array(text, pa.string())

    (fx, sx), (fy, sy) = split(x), split(y)
    quotients = numeric_batch.quotients(fx, sx, kx, fy, sy, ky, max_scale)
    result: list[str | None] = quotients.texts.to_pylist()
    order = quotients.values.to_pylist()
    assert order == [None if t is None else pytest.approx(float(t)) for t in result]
    return result


POSTGRES = [  # x, y, Postgres 15's x / y
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
    ("1", "30000000.0", "0.000000033333333333333333"),  # more than 20 decimals
    ("-2", "3000000", "-0.000000666666666666666667"),
    ("123456789012345678901234.5", "3", "41152263004115226300411.5"),  # past 10^18
    ("-0.000001", "3", "-0.000000333333333333333333"),
    ("-0.000001", "3000000", "-0.00000000000033333333333333333333"),
    ("99999.99", "0.01", "9999999.000000000000"),
    ("0.01", "99999.99", "0.000000100000010000001000"),
]


@pytest.mark.parametrize(("x", "y", "postgres"), POSTGRES)
def test_division_equals_postgres(x: str, y: str, postgres: str) -> None:
    assert _quotient(x, y) == postgres


def _scale(text: str) -> int:
    return len(text.partition(".")[2])


def test_batch_division_equals_postgres() -> None:
    # one batch per pair of operand scales, as DuckDB calls the function
    for kx in range(8):
        for ky in range(8):
            rows = [(x, y, p) for x, y, p in POSTGRES if (_scale(x), _scale(y)) == (kx, ky)]
            if rows:
                got = _batch([r[0] for r in rows], kx, [r[1] for r in rows], ky)
                assert got == [r[2] for r in rows]


def test_batch_matches_scalar_on_random_operands() -> None:
    rng = random.Random(7)
    for _ in range(60):
        kx, ky = rng.randint(0, 6), rng.randint(0, 6)
        xs = [
            rng.choice([0, 1, -1, rng.randint(-(10 ** rng.randint(1, 17)), 10**17)])
            for _ in range(40)
        ]
        ys = [rng.choice([1, -3, 7, rng.randint(1, 10 ** rng.randint(1, 17))]) for _ in range(40)]
        x = [numeric_math.text(v, kx) for v in xs]
        y = [numeric_math.text(v, ky) for v in ys]
        for max_scale in (None, 20):
            expected = [_quotient(a, b, max_scale) for a, b in zip(x, y, strict=True)]
            assert _batch(x, kx, y, ky, max_scale) == expected


def test_batch_nulls_and_zero_divisor() -> None:
    got = _batch(["1.50", "2"], 2, ["3", "3"], 0)
    assert got == ["0.50000000000000000000", "0.66666666666666666667"]
    nulls = pa.nulls(2, pa.decimal128(18, 6))
    texts = pa.array([None, "4"], pa.string())
    assert numeric_batch.quotients(nulls, texts, 0, nulls, texts, 0).texts.to_pylist() == [
        None,
        "1.00000000000000000000",
    ]
    with pytest.raises(ValueError, match="division by zero"):
        _batch(["1"], 0, ["0"], 0)


def _udf_args(x: list[str | None], y: list[str | None]) -> list[pa.Array]:
    """The UDFs' operands as DuckDB passes them: DECIMAL(18, 6) values, no text, scales."""
    fx = pa.array([None if v is None else Decimal(v) for v in x], pa.decimal128(18, 6))
    fy = pa.array([None if v is None else Decimal(v) for v in y], pa.decimal128(18, 6))
    none = pa.nulls(len(x), pa.string())
    two, zero = pa.array([2] * len(x), pa.int32()), pa.array([0] * len(x), pa.int32())
    return [fx, none, two, fy, none, zero]


def test_udfs_build_decimal_and_text_results() -> None:
    out = numeric._quotient_udf(*_udf_args(["1.50", None, "-3.00"], ["3", "2", "7"]))
    assert out.type == pa.decimal128(38, numeric.SCALE)
    assert out.to_pylist() == [Decimal("0.5"), None, Decimal("-0.42857142857142857143")]
    text = numeric._quotient_text_udf(*_udf_args(["1.50", None], ["3", "2"]))
    assert text.to_pylist() == [
        {numeric.ORDER_FIELD: 0.5, numeric.TEXT_FIELD: "0.50000000000000000000"},
        None,
    ]
    big = [pa.nulls(1, pa.decimal128(18, 6)), pa.array(["1" + "0" * 30]), pa.array([0])]
    with pytest.raises(ValueError, match="overflow"):
        numeric._quotient_udf(*big, *_udf_args(["1"], ["3"])[3:])


@pytest.mark.parametrize("udf", [numeric._quotient_udf, numeric._quotient_text_udf])
def test_udf_results_live_in_memory_arrow_allocated(udf: Callable[..., pa.Array]) -> None:
    # A buffer numpy owns needs the GIL to be freed, and DuckDB frees UDF results on its
    # worker threads: such a buffer deadlocked the query server. Every byte of the result
    # must be held in Arrow's pool, which numpy-owned buffers are not.
    rows = 5000
    operands = _udf_args([f"{i}.25" for i in range(rows)], ["7"] * rows)
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    out = udf(*operands)
    held = pool.bytes_allocated() - before
    assert held >= sum(b.size for b in out.buffers() if b is not None) > 0


@pytest.mark.parametrize(
    ("sql", "forms"),
    [
        # no ORDER BY, or one that cannot name the item: the server computes the text
        ("SELECT avg(x), a / b FROM t", ["operands", "operands"]),
        ("SELECT g, avg(x) AS m FROM t GROUP BY g ORDER BY g, 1", ["operands"]),
        ("SELECT a / b AS q FROM t ORDER BY t.q", ["text"]),  # conservative: qualified
        # ORDER BY may sort by the item: computed in the query, with a double to sort by
        ("SELECT g, avg(x) AS m FROM t GROUP BY g ORDER BY m", ["text"]),
        ("SELECT g, avg(x) AS m FROM t GROUP BY g ORDER BY 2 DESC", ["text"]),
        ("SELECT a / b FROM t ORDER BY a / b", ["text"]),
        ("SELECT a / b, avg(x) FROM t GROUP BY a, b ORDER BY avg(x) + 1", ["text", "text"]),
        # not bare items of the outer query: DECIMAL(38, 20) inside the query
        ("SELECT avg(x) * 2 FROM t", []),
        ("SELECT DISTINCT a / b FROM t", []),
        ("SELECT a / b FROM t UNION SELECT 1", []),
    ],
)
def test_item_forms_by_order_by(sql: str, forms: list[str]) -> None:
    stmt = sqlparse.parse_sql(sql)[0].stmt
    assert isinstance(stmt, ast.SelectStmt)
    found = numeric.item_forms(stmt)
    items = [t.val for t in stmt.targetList or () if id(t.val) in found]
    assert [found[id(item)] for item in items] == forms


def test_operand_texts_take_each_operand_at_its_own_type() -> None:
    # the operands form: the query returns x and y as they are (integers, decimals of any
    # scale, HUGEINT sums as decimal128(38, 0)); the scale comes from the Arrow type
    x = pa.array(
        [Decimal("1.50"), Decimal("-10.00"), None, Decimal("7.00"), Decimal("0.00")],
        pa.decimal128(15, 2),
    )
    y = pa.array([3, 3, 1, None, 7], pa.int64())
    operands = pa.StructArray.from_arrays([x, y], names=[numeric.DIVIDEND, numeric.DIVISOR])
    texts = numeric.operand_texts(operands).to_pylist()
    assert texts == [
        _quotient("1.50", "3"),
        _quotient("-10.00", "3"),
        None,
        None,
        _quotient("0.00", "7"),
    ]
    assert texts[:2] == ["0.50000000000000000000", "-3.3333333333333333"]
    huge = pa.array([Decimal(10**35 + 1)], pa.decimal128(38, 0))  # past DECIMAL(38, 6)
    tiny = pa.array([Decimal("1E-20")], pa.decimal128(38, 20))  # scale above 6: as text
    operands = pa.StructArray.from_arrays([huge, tiny], names=[numeric.DIVIDEND, numeric.DIVISOR])
    assert numeric.operand_texts(operands).to_pylist() == [
        _quotient(str(10**35 + 1), "0.00000000000000000001")
    ]
    zero = pa.StructArray.from_arrays(
        [pa.array([1], pa.int64()), pa.array([0], pa.int64())],
        names=[numeric.DIVIDEND, numeric.DIVISOR],
    )
    with pytest.raises(ValueError, match="division by zero"):
        numeric.operand_texts(zero)
