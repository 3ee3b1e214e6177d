"""Logging: lowercase structured lines, text or JSON, with secrets scrubbed.

Call `setup(level, fmt)` once at start. Use `log(logger, "event name", key=value, ...)` or
plain logging with `extra={"fields": {...}}`; both render the fields after the message.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

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


def setup(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("py4j", "pyspark", "botocore", "boto3", "urllib3", "s3transfer", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    logger.log(level, message, extra={"fields": fields})
