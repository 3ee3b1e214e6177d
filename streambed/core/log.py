"""Logging: lowercase structured lines, text or JSON, with secrets scrubbed.

Call `setup(level, fmt)` once at start. Use `log(logger, "event name", key=value, ...)` or
plain logging with `extra={"fields": {...}}`; both render the fields after the message.

On a terminal, lines can also be kept at its foot (the copy progress: `LiveRegion`,
`terminal()`): each log line is written above them and they are drawn again below it, so
neither overwrites the other (before, a progress redraw moved up over the log lines written
since the last one and wrote over them). Written here, as tqdm's and rich's live displays
do it, since neither is a dependency; lines are cut to the terminal's width, as a wrapped
line would take two rows and the next redraw would go up one too few.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

# user:password@ in URLs, and password=... in conninfo strings.
_SECRET_PATTERNS = (
    (re.compile(r"(://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),
    (re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE), r"\1***"),
)


def scrub(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"{stamp}.{int(record.msecs):03d}Z",
            record.levelname.lower(),
            record.name,
            record.getMessage(),
        ]
        line = " ".join(parts)
        fields = _fields(record)
        if fields:
            line += " " + " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return scrub(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        body.update(_fields(record))
        if record.exc_info:
            body["error"] = self.formatException(record.exc_info)
        return scrub(json.dumps(body, default=str))


def _text(value: object) -> str:
    """A field's value as is, or quoted (JSON) when it is empty or holds a blank or a
    control character (a line break in a table's name must not start a new line).
    Non-ASCII characters stay as they are: a name in any script reads as it is written."""
    text = str(value)
    if text and not any(c.isspace() or not c.isprintable() for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class LiveRegion:
    """Lines kept at the foot of a terminal, under everything written through `write`.

    Not on a terminal (`live` false), `show` draws nothing and `write` just writes. Nor on
    a pseudo-terminal nobody gave a size (`script` writing to a file, a CI runner, a
    container's tty read by its log collector): no person watches it, and lines wrapped at
    an unknown width would leave their rows behind at each redraw."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        isatty = getattr(out, "isatty", None)
        self._lines: list[str] = []
        self._lock = threading.RLock()
        self.live = bool(isatty is not None and isatty()) and self._size()[0] > 0

    def write(self, text: str) -> None:
        """Write `text` (whole lines) above the region's lines."""
        with self._lock:
            self.out.write(self._erase() + text + self._draw())
            self.out.flush()

    def show(self, lines: Sequence[str]) -> None:
        """Draw `lines` in place of the region's lines (a terminal only). On a terminal
        too short for them all, the first ones and a line counting the others."""
        if not self.live:
            return
        with self._lock:
            erase = self._erase()
            width, height = self._size()
            room = max(1, height - 1)  # the cursor's line below them stays on the screen
            if len(lines) > room:
                lines = [*lines[: room - 1], f"... and {len(lines) - room + 1} more"]
            self._lines = [fit(line, width) for line in lines]
            self.out.write(erase + self._draw())
            self.out.flush()

    def keep(self) -> None:
        """Leave the lines shown where they are: later writes go below them."""
        with self._lock:
            self._lines = []

    def _erase(self) -> str:
        # To the first of the lines (their count above the cursor), then clear to the end.
        return f"\x1b[{len(self._lines)}F\x1b[J" if self._lines else ""

    def _draw(self) -> str:
        return "".join(f"{line}\n" for line in self._lines)

    def _size(self) -> tuple[int, int]:
        """(columns, rows) of the terminal; 0 where it is not known."""
        try:
            size = os.get_terminal_size(self.out.fileno())
        except (OSError, ValueError, AttributeError):  # not a real terminal's file
            return 0, 0
        return size.columns, size.lines


def fit(line: str, width: int) -> str:
    """`line` cut to fewer than `width` columns (wide characters take two), so it never
    wraps, nor leaves the cursor in the last column. A width not known (0): as it is."""
    if width <= 0:
        return line
    used = 0
    for i, c in enumerate(line):
        used += 0 if unicodedata.combining(c) else _columns(c)
        if used >= width:
            return line[:i]
    return line


def _columns(c: str) -> int:
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


class RegionHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A log handler writing above a `LiveRegion`'s lines."""

    def __init__(self, region: LiveRegion) -> None:
        super().__init__(region.out)
        self.region = region

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.region.write(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


_terminal: LiveRegion | None = None


def terminal() -> LiveRegion:
    """The region at the foot of stderr, which `setup`'s log handler writes above."""
    global _terminal
    if _terminal is None or _terminal.out is not sys.stderr:
        _terminal = LiveRegion(sys.stderr)
    return _terminal


def setup(level: str = "info", fmt: str = "text") -> None:
    handler = RegionHandler(terminal())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("py4j", "pyspark", "botocore", "boto3", "urllib3", "s3transfer", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    logger.log(level, message, extra={"fields": fields})
