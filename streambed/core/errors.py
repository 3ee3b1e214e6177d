"""One error hierarchy for streambed.

Every error carries a kind. `policy(kind)` says what the process does about it:
retry with backoff (how, and how long: `streambed.core.retry`), stop and wait for an operator,
or stop for good. Messages say
what happened and what to do; they never contain passwords.
"""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    CONFIG = "config"  # a setting is missing or wrong
    SOURCE_UNREACHABLE = "source_unreachable"  # connection refused, DNS, network
    SOURCE_AUTH = "source_auth"  # wrong password, no REPLICATION privilege
    SOURCE_SETUP = "source_setup"  # wal_level, missing publication or slot, no rights
    SOURCE_BUSY = "source_busy"  # the slot is in use by another client (or a dead one, briefly)
    UNSUPPORTED_SCHEMA = "unsupported_schema"  # a type or table shape we cannot copy exactly
    DECODE = "decode"  # malformed pgoutput bytes
    PROTOCOL = "protocol"  # the server sent something out of order
    STORAGE = "storage"  # object store or warehouse I/O failed
    STORAGE_AUTH = "storage_auth"  # the object store refused the credentials or rights
    COMMIT_CONFLICT = "commit_conflict"  # someone else changed the Iceberg table
    STATE = "state"  # the local state store disagrees in a way we cannot fix
    INTERNAL = "internal"


class Policy(enum.Enum):
    RETRY = "retry"  # transient: back off and try again
    MANUAL = "manual"  # an operator must change something; exit non-zero
    FATAL = "fatal"  # a bug or corruption; exit non-zero, do not retry


_POLICY = {
    Kind.CONFIG: Policy.MANUAL,
    Kind.SOURCE_UNREACHABLE: Policy.RETRY,
    Kind.SOURCE_AUTH: Policy.MANUAL,
    Kind.SOURCE_SETUP: Policy.MANUAL,
    Kind.SOURCE_BUSY: Policy.RETRY,  # a few times only: streambed.core.retry
    Kind.UNSUPPORTED_SCHEMA: Policy.MANUAL,
    Kind.DECODE: Policy.FATAL,
    Kind.PROTOCOL: Policy.FATAL,
    Kind.STORAGE: Policy.RETRY,
    Kind.STORAGE_AUTH: Policy.MANUAL,
    Kind.COMMIT_CONFLICT: Policy.MANUAL,
    Kind.STATE: Policy.MANUAL,
    Kind.INTERNAL: Policy.FATAL,
}


def policy(kind: Kind) -> Policy:
    """What to do about an error of this kind."""
    return _POLICY[kind]


class StreambedError(Exception):
    """Base of every error streambed raises on purpose."""

    kind: Kind = Kind.INTERNAL

    def __init__(self, message: str, *, kind: Kind | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind

    @property
    def policy(self) -> Policy:
        return policy(self.kind)


class ConfigError(StreambedError):
    kind = Kind.CONFIG


class SourceError(StreambedError):
    kind = Kind.SOURCE_UNREACHABLE


class SchemaError(StreambedError):
    kind = Kind.UNSUPPORTED_SCHEMA


class DecodeError(StreambedError):
    """Malformed pgoutput input. Names the message kind and the byte offset."""

    kind = Kind.DECODE

    def __init__(self, message_kind: str, offset: int, detail: str) -> None:
        super().__init__(
            f"cannot decode pgoutput {message_kind} message at byte {offset}: {detail}"
        )
        self.message_kind = message_kind
        self.offset = offset
        self.detail = detail


class StorageError(StreambedError):
    kind = Kind.STORAGE


class StateError(StreambedError):
    kind = Kind.STATE


# Exit codes of the `streambed` command. Documented in docs/operations.md.
EXIT_OK = 0
EXIT_FATAL = 1
EXIT_CONFIG = 2
EXIT_MANUAL = 3
EXIT_INTERRUPTED = 130


def exit_code(error: StreambedError) -> int:
    if error.kind is Kind.CONFIG:
        return EXIT_CONFIG
    if error.policy is Policy.FATAL:
        return EXIT_FATAL
    return EXIT_MANUAL


def raised_by_spark(error: BaseException) -> bool:
    """Whether pyspark or py4j raised `error` (not every such error is a PySparkException:
    py4j's network errors, when Spark's JVM has ended, are not)."""
    return type(error).__module__.startswith(("py4j", "pyspark"))
