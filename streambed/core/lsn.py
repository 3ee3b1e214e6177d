"""Postgres log sequence numbers: 64-bit integers shown as 'XXXXXXXX/XXXXXXXX'."""

from __future__ import annotations

from streambed.core.errors import ConfigError


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, sep, low = text.partition("/")
    try:
        if not sep:
            raise ValueError(text)
        value = (int(high, 16) << 32) | int(low, 16)
    except ValueError as e:
        raise ConfigError(f"{text!r} is not an LSN; expected the form '16/B374D848'") from e
    if not 0 <= value < 1 << 64:
        raise ConfigError(f"{text!r} is out of range for an LSN")
    return value
