"""Postgres's numeric division on Python integers: the scale select_div_scale picks and
the rounding, for one value at a time (`streambed.server.numeric_batch` does the same over
Arrow arrays)."""

from __future__ import annotations

MAX_DISPLAY_SCALE = 1000  # Postgres's NUMERIC_MAX_DISPLAY_SCALE


def parse(text: str) -> tuple[int, int]:
    """(unscaled integer, scale) of DuckDB's text form of an integer or decimal: "-1.50"
    is (-150, 2)."""
    negative = text.startswith("-")
    whole, _, fraction = text.lstrip("+-").partition(".")
    unscaled = int(whole + fraction)
    return (-unscaled if negative else unscaled), len(fraction)


def weight_and_first_digit(magnitude: int, scale: int) -> tuple[int, int]:
    """Base-10000 weight and leading base-10000 digit of magnitude * 10^-scale, as
    Postgres's NumericVar has them (zero: 0, 0)."""
    if magnitude == 0:
        return 0, 0
    weight = (len(str(magnitude)) - 1 - scale) // 4
    shift = scale + 4 * weight
    first = magnitude // 10**shift if shift >= 0 else magnitude * 10**-shift
    return weight, first


def quotient(ux: int, kx: int, uy: int, ky: int, max_scale: int | None = None) -> tuple[int, int]:
    """x / y for x = ux * 10^-kx and y = uy * 10^-ky as Postgres's numeric division answers
    it: (unscaled, scale) at the scale select_div_scale picks (16 significant digits, at
    least both scales, at most 1000; at most `max_scale` if given), rounded half away from
    zero."""
    if uy == 0:
        raise ValueError("division by zero")
    w1, f1 = weight_and_first_digit(abs(ux), kx)
    w2, f2 = weight_and_first_digit(abs(uy), ky)
    qweight = w1 - w2 - (1 if f1 <= f2 else 0)
    rscale = min(max(16 - 4 * qweight, kx, ky, 0), MAX_DISPLAY_SCALE)
    if max_scale is not None:
        rscale = min(rscale, max_scale)
    value, remainder = divmod(abs(ux) * 10 ** (ky + rscale - kx), abs(uy))
    if 2 * remainder >= abs(uy):
        value += 1
    return (-value if (ux < 0) != (uy < 0) else value), rscale


def text(unscaled: int, scale: int) -> str:
    """Postgres's text form of unscaled * 10^-scale: plain notation, `scale` decimals."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    sign = "-" if unscaled < 0 else ""
    if scale == 0:
        return sign + digits
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"
