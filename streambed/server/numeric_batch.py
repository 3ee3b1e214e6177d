"""Postgres numeric division over Arrow arrays, vectorized with pyarrow.compute.

`quotients(x, xs, kx, y, ys, ky)` computes, for every row, x / y as Postgres's numeric
division answers it (`streambed.server.numeric_math.quotient`: the exact quotient rounded half
away from zero at the scale select_div_scale picks) and returns Postgres's text of each
value. DuckDB hands the operands over as DECIMAL(18, 6) (`x`, `y`: exact for values below
10^12 with at most 6 decimals) with their own scales `kx`, `ky` (the DuckDB type's, which
is Postgres's display scale), or, where that cast failed, as text (`xs`, `ys`).

The per-row work is integer arithmetic on int64 arrays: the base-10000 weights and leading
digits of both operands give the result scale; rows are grouped by scale, and each group is
divided by long division in chunks of up to 9 decimal digits (the remainder times 10^chunk
stays below 2^63), which keeps the quotient's digits exact without 128-bit arithmetic. The
text is assembled from the integer part and the zero-padded chunks. Rows the int64 path
cannot hold (text operands, divisors of 10^17 and more) take the scalar Python path.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from streambed.server import numeric_math

FAST_SCALE = 6  # the scale of the DECIMAL(18, 6) operands DuckDB passes
FAST_TYPE = f"DECIMAL(18,{FAST_SCALE})"
_POWERS = pa.array([10**i for i in range(19)], pa.int64())


def _unscaled(values: pa.Array) -> pa.Array:
    """The unscaled int64 integers of a decimal128(p <= 18, s) array (nulls kept)."""
    as_integers = pa.Array.from_buffers(
        pa.decimal128(values.type.precision, 0),
        len(values),
        values.buffers(),
        null_count=values.null_count,
        offset=values.offset,
    )
    return pc.cast(as_integers, pa.int64())


def _pow(exponent: pa.Array) -> pa.Array:
    return pc.take(_POWERS, exponent)


def _digits(magnitude: pa.Array) -> pa.Array:
    """Decimal digits of non-negative int64 values below 10^18 (0 has 1)."""
    positive = pc.max_element_wise(magnitude, 1)
    estimate = pc.cast(pc.floor(pc.log10(pc.cast(positive, pa.float64(), safe=False))), pa.int64())
    estimate = pc.subtract(estimate, pc.cast(pc.greater(_pow(estimate), positive), pa.int64()))
    upper = pc.min_element_wise(pc.add(estimate, 1), 18)
    too_small = pc.and_(pc.less(estimate, 18), pc.greater_equal(positive, _pow(upper)))
    return pc.add(pc.add(estimate, pc.cast(too_small, pa.int64())), 1)


def _weight_and_first_digit(magnitude: pa.Array, scale: int) -> tuple[pa.Array, pa.Array]:
    """Base-10000 weight and leading base-10000 digit (`numeric_math.weight_and_first_digit`)."""
    digits = _digits(magnitude)
    # floor((digits - 1 - scale) / 4), kept non-negative for the truncating divide
    weight = pc.subtract(pc.divide(pc.add(digits, 39 - scale), 4), 10)
    weight = pc.if_else(pc.equal(magnitude, 0), 0, weight)
    shift = pc.add(pc.multiply(weight, 4), scale)
    down = _pow(pc.max_element_wise(shift, 0))
    up = _pow(pc.max_element_wise(pc.negate(shift), 0))
    return weight, pc.multiply(pc.divide(magnitude, down), up)


def _result_scale(a: pa.Array, kx: int, b: pa.Array, ky: int) -> pa.Array:
    wx, fx = _weight_and_first_digit(a, kx)
    wy, fy = _weight_and_first_digit(b, ky)
    qweight = pc.subtract(pc.subtract(wx, wy), pc.cast(pc.less_equal(fx, fy), pa.int64()))
    scale = pc.subtract(16, pc.multiply(qweight, 4))
    return pc.min_element_wise(pc.max_element_wise(scale, max(kx, ky, 0)), 1000)


def _where(mask: pa.Array, value: object, other: object) -> pa.Array:
    return pc.if_else(mask, value, other)


def _long_division(
    a: pa.Array, b: pa.Array, negative: pa.Array, shift: int, scale: pa.Array
) -> pa.Array:
    """Text of round(a * 10^shift / b) at `scale` decimals per row, rounded half away from
    zero (a, b: non-negative int64; b * 10^max(-shift, 0) below 10^12; the quotient below
    10^18).

    The integer part is one division; the `scale` fraction digits come in chunks: a first
    chunk of 1 to `chunk` digits, then chunks of exactly `chunk` digits (as many as the row
    needs), so every chunk but the first is printed zero-padded to a fixed width."""
    if shift < 0:
        b = pc.multiply(b, 10**-shift)
    largest = pc.max(b).as_py() or 1
    chunk = 18 - len(str(largest))  # remainder * 10^chunk stays below 10^18
    whole = pc.divide(a, b)
    rest = pc.subtract(a, pc.multiply(whole, b))
    if shift > 0:
        shifted = pc.multiply(rest, 10**shift)
        digit = pc.divide(shifted, b)
        whole = pc.add(pc.multiply(whole, 10**shift), digit)
        rest = pc.subtract(shifted, pc.multiply(digit, b))
    # chunks after the first: m = (scale - 1) // chunk (-1: no fraction)
    more = pc.subtract(pc.divide(pc.add(scale, chunk - 1), chunk), 1)
    first_width = pc.subtract(scale, pc.multiply(more, chunk))
    steps = pc.max(more).as_py()
    digits: list[pa.Array] = []
    for step in range(steps + 1):
        active = pc.greater_equal(more, step)
        unit = _pow(first_width) if step == 0 else 10**chunk
        shifted = pc.multiply(rest, unit)
        digit = pc.divide(shifted, b)
        rest = _where(active, pc.subtract(shifted, pc.multiply(digit, b)), rest)
        digits.append(_where(active, digit, 0))
    carry = pc.greater_equal(pc.multiply(rest, 2), b)  # half away from zero
    for step in reversed(range(steps + 1)):
        active = pc.greater_equal(more, step)
        limit = _pow(first_width) if step == 0 else 10**chunk
        digit = pc.add(digits[step], pc.cast(pc.and_(active, carry), pa.int64()))
        overflow = pc.equal(digit, limit)
        digits[step] = _where(overflow, 0, digit)
        carry = _where(active, overflow, carry)
    whole = pc.add(whole, pc.cast(carry, pa.int64()))
    nonzero = pc.not_equal(whole, 0)
    for digit in digits:
        nonzero = pc.or_(nonzero, pc.not_equal(digit, 0))
    length = len(a)
    parts = [pc.cast(whole, pa.string())]
    if pc.any(pc.and_(negative, nonzero)).as_py():
        parts.insert(0, _where(pc.and_(negative, nonzero), "-", ""))
    for step, digit in enumerate(digits):
        if step == 0:
            # first_width digits, zero-padded: 10^width + digit printed without its "1"
            text = pc.cast(pc.add(digit, _pow(first_width)), pa.string())
            text = pc.utf8_slice_codeunits(text, 1)
            point = pa.array(["."] * length, pa.string())
            if pc.any(pc.equal(scale, 0)).as_py():
                point = _where(pc.equal(scale, 0), "", point)
            parts += [point, text]
        else:
            text = pc.utf8_lpad(pc.cast(digit, pa.string()), width=chunk, padding="0")
            active = pc.greater_equal(more, step)
            parts.append(text if pc.all(active).as_py() else _where(active, text, ""))
    return _concat(parts, length)


def _concat(parts: Sequence[pa.Array], length: int) -> pa.Array:
    if not parts:
        return pa.array([""] * length, pa.string())
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, "")


def _texts(unscaled: pa.Array, scale: int) -> pa.Array:
    """Plain text of unscaled * 10^-scale (e.g. -150, 2 -> "-1.50")."""
    if scale == 0:
        return pc.cast(unscaled, pa.string())
    digits = pc.utf8_lpad(pc.cast(pc.abs(unscaled), pa.string()), width=scale + 1, padding="0")
    sign = pc.if_else(pc.less(unscaled, 0), "-", "")
    head = pc.utf8_slice_codeunits(digits, 0, -scale)
    tail = pc.utf8_slice_codeunits(digits, -scale)
    return pc.binary_join_element_wise(sign, head, ".", tail, "")


def _scalar_text(x: str | None, y: str | None, max_scale: int | None) -> str | None:
    if x is None or y is None:
        return None
    value, scale = numeric_math.quotient(*numeric_math.parse(x), *numeric_math.parse(y), max_scale)
    return numeric_math.text(value, scale)


def quotients(
    x: pa.Array,
    xs: pa.Array,
    kx: int,
    y: pa.Array,
    ys: pa.Array,
    ky: int,
    max_scale: int | None = None,
) -> pa.Array:
    """Postgres's text of x / y for every row (None where an operand is NULL); at most
    `max_scale` decimals if given (rounded there instead). `x`/`y`: DECIMAL(18, 6) arrays,
    NULL where the operand is given as text in `xs`/`ys` instead (or is NULL)."""
    length = len(x)
    fast = pc.and_(pc.is_valid(x), pc.is_valid(y))
    ux = pc.divide(_unscaled(pc.fill_null(x, 0) if x.null_count else x), 10 ** (FAST_SCALE - kx))
    uy = pc.divide(_unscaled(pc.fill_null(y, 1) if y.null_count else y), 10 ** (FAST_SCALE - ky))
    a, b = pc.abs(ux), pc.abs(uy)
    if pc.any(pc.and_(fast, pc.equal(b, 0))).as_py():
        raise ValueError("division by zero")
    # the long division's limits: divisor (times 10^(kx - ky)) below 10^12
    fast = pc.and_(fast, pc.less(b, 10 ** min(12, 12 + ky - kx)))
    b = pc.if_else(fast, b, 1)
    a = pc.if_else(fast, a, 0)
    negative = pc.not_equal(pc.less(ux, 0), pc.less(uy, 0))
    scale = _result_scale(a, kx, b, ky)
    if max_scale is not None:
        scale = pc.min_element_wise(scale, max_scale)
    pieces: list[pa.Array] = []
    positions: list[pa.Array] = []
    rows = pc.indices_nonzero(fast)
    if len(rows) == length:
        pieces.append(_long_division(a, b, negative, ky - kx, scale))
        positions.append(pa.array(range(length), pa.int64()))
    elif len(rows):
        pieces.append(
            _long_division(
                pc.take(a, rows),
                pc.take(b, rows),
                pc.take(negative, rows),
                ky - kx,
                pc.take(scale, rows),
            )
        )
        positions.append(pc.cast(rows, pa.int64()))
    slow_rows = pc.indices_nonzero(pc.invert(fast)).to_pylist()
    if slow_rows:
        # an operand DuckDB could pass as DECIMAL(18, 6) is written at its own scale
        left = pc.if_else(pc.is_valid(x), _texts(ux, kx), xs).to_pylist()
        right = pc.if_else(pc.is_valid(y), _texts(uy, ky), ys).to_pylist()
        slow = [_scalar_text(left[i], right[i], max_scale) for i in slow_rows]
        pieces.append(pa.array(slow, pa.string()))
        positions.append(pa.array(slow_rows, pa.int64()))
    if not pieces:
        return pa.nulls(length, pa.string())
    order = pc.sort_indices(pa.concat_arrays(positions))
    return pc.take(pa.concat_arrays(pieces), order)
