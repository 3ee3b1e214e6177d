"""Postgres numeric division over Arrow arrays, vectorized.

`quotients(x, xs, kx, y, ys, ky)` computes, for every row, x / y as Postgres's numeric
division answers it (`streambed.server.numeric_math.quotient`: the exact quotient rounded
half away from zero at the scale select_div_scale picks) and returns Postgres's text of
each value. DuckDB hands the operands over as DECIMAL(38, 6) (`x`, `y`) when their
scales `kx`, `ky` (the DuckDB type's, which is Postgres's display scale) are at most 6, else
as text (`xs`, `ys`).

The per-row work is int64 arithmetic in numpy: the base-10000 weights and leading digits of
both operands give each row's result scale, then long division produces the integer part
and the fraction in chunks of up to 17 digits (the remainder times 10^chunk stays below
10^18), which keeps every digit exact without 128-bit arithmetic. Only the chunks' text is
assembled with pyarrow string kernels (a fixed handful per batch). Rows the int64 path
cannot hold (text operands, values of 10^12 and more) take the scalar Python path.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from streambed.server import numeric_math

FAST_SCALE = 6  # the scale of the DECIMAL(38, 6) operands DuckDB passes
FAST_TYPE = f"DECIMAL(38,{FAST_SCALE})"
_FAST_LIMIT = 10**18  # unscaled operands below this (values below 10^12) take the int64 path
_FAST_DIVISOR = 10**12  # divisors (times 10^(kx - ky)) below this take the int64 path
_POWERS = np.array([10**i for i in range(19)], dtype=np.int64)

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def _unscaled(values: pa.Array) -> tuple[Ints, Bools]:
    """The unscaled integers of a decimal128 array where they are below 10^18 in magnitude
    (else 0), and where that is so (False for NULLs)."""
    words = np.frombuffer(values.buffers()[1], dtype=np.int64)
    pairs = words[2 * values.offset : 2 * (values.offset + len(values))].reshape(-1, 2)
    low, high = pairs[:, 0], pairs[:, 1]  # little-endian two's complement
    fits = _valid(values) & (high == (low >> 63)) & (np.abs(low) < _FAST_LIMIT)
    return np.where(fits, low, 0), fits


def _exact(values: pa.Array, row: int) -> int:
    """The unscaled integer of one decimal128 value."""
    start = 16 * (values.offset + row)
    return int.from_bytes(values.buffers()[1][start : start + 16], "little", signed=True)


def _arrow(values: Ints) -> pa.Array:
    # with the type given: without it pyarrow inspects every value (milliseconds a batch)
    return pa.array(values, pa.int64())


def _valid(values: pa.Array) -> Bools:
    mask: Bools = pc.is_valid(values).to_numpy(zero_copy_only=False)
    return mask


def _digits(magnitude: Ints) -> Ints:
    """Decimal digits of non-negative values below 10^18 (0 has 0)."""
    digits: Ints = np.searchsorted(_POWERS, magnitude, side="right").astype(np.int64)
    return digits


def _weight_and_first_digit(magnitude: Ints, scale: int) -> tuple[Ints, Ints]:
    """Base-10000 weight and leading base-10000 digit (`numeric_math.weight_and_first_digit`)."""
    weight = np.where(magnitude == 0, 0, (_digits(magnitude) - 1 - scale) // 4)
    shift = weight * 4 + scale
    first = magnitude // _POWERS[np.maximum(shift, 0)] * _POWERS[np.maximum(-shift, 0)]
    return weight, first


def result_scale(a: Ints, kx: int, b: Ints, ky: int) -> Ints:
    """select_div_scale for |x| / |y| (a, b unscaled at kx, ky): 16 significant digits by
    the estimated quotient weight, at least both scales, at most 1000."""
    wx, fx = _weight_and_first_digit(a, kx)
    wy, fy = _weight_and_first_digit(b, ky)
    qweight = wx - wy - (fx <= fy)
    scale: Ints = np.clip(16 - 4 * qweight, max(kx, ky, 0), numeric_math.MAX_DISPLAY_SCALE)
    return scale


def _long_division(
    a: Ints, b: Ints, negative: Bools, shift: int, scale: Ints
) -> tuple[pa.Array, Floats]:
    """Text of round(a * 10^shift / b) at `scale` decimals per row, rounded half away from
    zero (a, b: non-negative; b * 10^max(-shift, 0) below 10^12; the quotient below 10^18).

    The integer part is one division; the `scale` fraction digits come in chunks: a first
    chunk of 1 to `chunk` digits, then chunks of exactly `chunk` digits (as many as the row
    needs), so every chunk but the first prints zero-padded to one fixed width."""
    if shift < 0:
        b = b * 10**-shift
    chunk = 18 - len(str(int(b.max(initial=1))))  # remainder * 10^chunk < 10^18
    whole, rest = np.divmod(a, b)
    if shift > 0:
        digit, rest = np.divmod(rest * 10**shift, b)
        whole = whole * 10**shift + digit
    more = (scale + chunk - 1) // chunk - 1  # chunks after the first; -1: no fraction
    first_width = scale - more * chunk
    steps = int(more.max(initial=-1)) + 1
    digits: list[Ints] = []
    for step in range(steps):
        active = more >= step
        unit = _POWERS[first_width] if step == 0 else 10**chunk
        digit, remainder = np.divmod(rest * unit, b)
        rest = np.where(active, remainder, rest)
        digits.append(np.where(active, digit, 0))
    carry = 2 * rest >= b  # half away from zero
    for step in reversed(range(steps)):
        active = more >= step
        limit = _POWERS[first_width] if step == 0 else 10**chunk
        digit = digits[step] + (active & carry)
        overflow = digit == limit
        digits[step] = np.where(overflow, 0, digit)
        carry = np.where(active, overflow, carry)
    whole = whole + carry
    nonzero = whole != 0
    for digit in digits:
        nonzero |= digit != 0
    approximate = whole.astype(np.float64)
    for step, digit in enumerate(digits):
        approximate += digit / 10.0 ** (first_width + step * chunk)
    sign = np.where(negative, -1.0, 1.0)
    text = _text(whole, digits, negative & nonzero, scale, more, first_width, chunk)
    return text, sign * approximate


def _text(
    whole: Ints,
    digits: list[Ints],
    negative: Bools,
    scale: Ints,
    more: Ints,
    first_width: Ints,
    chunk: int,
) -> pa.Array:
    """sign, integer part, "." and the fraction chunks joined, in one join per batch."""
    head = pc.cast(_arrow(whole), pa.string())
    fraction: list[pa.Array] = []
    for step, digit in enumerate(digits):
        if step == 0:
            # first_width digits, zero-padded: 10^width + digit printed without its "1"
            text = pc.cast(_arrow(digit + _POWERS[first_width]), pa.string())
            text = pc.utf8_slice_codeunits(text, 1)
        else:
            text = pc.utf8_lpad(pc.cast(_arrow(digit), pa.string()), width=chunk, padding="0")
        active = more >= step
        fraction.append(
            text if active.all() else pc.if_else(pa.array(active, pa.bool_()), text, "")
        )
    sign = pc.if_else(pa.array(negative, pa.bool_()), "-", "") if negative.any() else ""
    if not fraction:
        return head if sign == "" else pc.binary_join_element_wise(sign, head, "")
    text = pc.binary_join_element_wise(sign, head, ".", *fraction, "")
    if (scale == 0).any():  # no point
        text = pc.if_else(
            pa.array(scale > 0, pa.bool_()), text, pc.binary_join_element_wise(sign, head, "")
        )
    return text


def _scalar_text(x: str | None, y: str | None, max_scale: int | None) -> str | None:
    if x is None or y is None:
        return None
    parsed = (*numeric_math.parse(x), *numeric_math.parse(y))
    return numeric_math.text(*numeric_math.quotient(*parsed, max_scale))


def _operand_text(values: pa.Array, texts: pa.Array, scale: int, row: int) -> str | None:
    """One operand's text at its own scale: from the DECIMAL(38, 6) value, else the text."""
    if values[row].is_valid:
        return numeric_math.text(_exact(values, row) // 10 ** (FAST_SCALE - scale), scale)
    text: str | None = texts[row].as_py()
    return text


class Quotients(NamedTuple):
    texts: pa.Array  # Postgres's text of each quotient (string, NULL where an operand is)
    values: pa.Array  # the same as double precision, for ORDER BY


def quotients(
    x: pa.Array,
    xs: pa.Array,
    kx: int,
    y: pa.Array,
    ys: pa.Array,
    ky: int,
    max_scale: int | None = None,
) -> Quotients:
    """Postgres's text of x / y for every row (None where an operand is NULL); at most
    `max_scale` decimals if given (rounded there instead). `x`/`y`: DECIMAL(38, 6) arrays,
    NULL where the operand is given as text in `xs`/`ys` instead (or is NULL)."""
    length = len(x)
    ux, x_fits = _unscaled(x)
    uy, y_fits = _unscaled(y)
    ux, uy = ux // 10 ** (FAST_SCALE - kx), uy // 10 ** (FAST_SCALE - ky)
    a, b = np.abs(ux), np.abs(uy)
    fast = x_fits & y_fits
    if (fast & (b == 0)).any():
        raise ValueError("division by zero")
    fast &= b < _FAST_DIVISOR // 10 ** max(kx - ky, 0)
    values = np.full(length, np.nan)
    pieces: list[pa.Array] = []
    positions: list[pa.Array] = []
    if fast.any():
        rows = np.flatnonzero(fast)
        a, b, negative = a[rows], b[rows], (ux[rows] < 0) != (uy[rows] < 0)
        scale = result_scale(a, kx, b, ky)
        if max_scale is not None:
            scale = np.minimum(scale, max_scale)
        texts, values[rows] = _long_division(a, b, negative, ky - kx, scale)
        pieces.append(texts)
        positions.append(_arrow(rows))
    slow_rows = np.flatnonzero(~fast)
    if len(slow_rows):
        slow = [
            _scalar_text(_operand_text(x, xs, kx, i), _operand_text(y, ys, ky, i), max_scale)
            for i in slow_rows.tolist()
        ]
        values[slow_rows] = [np.nan if t is None else float(t) for t in slow]
        pieces.append(pa.array(slow, pa.string()))
        positions.append(_arrow(slow_rows))
    order = pa.array(values, pa.float64(), mask=np.isnan(values))
    if len(pieces) == 1 and len(positions[0]) == length:
        return Quotients(pieces[0], order)
    where = pc.sort_indices(pa.concat_arrays(positions))
    return Quotients(pc.take(pa.concat_arrays(pieces), where), order)
