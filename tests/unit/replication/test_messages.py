"""The replication stream's framing and error classification, without a server."""

from __future__ import annotations

import struct

import pytest

from streambed.core.errors import Kind, SourceError
from streambed.source.connection import classify, source_error
from streambed.source.stream import (
    Keepalive,
    XLogData,
    parse_copy_message,
    start_replication_command,
    status_update,
)


def test_parses_xlogdata() -> None:
    raw = b"w" + struct.pack(">QQq", 0x16_B374D848, 0x16_B374D900, 12345) + b"Bpayload"
    assert parse_copy_message(raw) == XLogData(0x16_B374D848, 0x16_B374D900, 12345, b"Bpayload")


def test_parses_keepalive() -> None:
    raw = b"k" + struct.pack(">QqB", 42, 7, 1)
    assert parse_copy_message(raw) == Keepalive(42, 7, True)


@pytest.mark.parametrize("raw", [b"", b"w" + b"\0" * 10, b"k\0\0", b"x" + b"\0" * 40])
def test_rejects_malformed(raw: bytes) -> None:
    with pytest.raises(SourceError) as caught:
        parse_copy_message(raw)
    assert caught.value.kind is Kind.PROTOCOL


def test_status_update_reports_one_lsn_for_write_flush_apply() -> None:
    raw = status_update(0x1_00000010, clock=99, reply_requested=False)
    assert raw[:1] == b"r" and len(raw) == 34
    assert struct.unpack(">QQQqB", raw[1:]) == (0x1_00000010, 0x1_00000010, 0x1_00000010, 99, 0)


def test_start_replication_command() -> None:
    assert start_replication_command("s1", "pub", 0x16_B374D848) == (
        "START_REPLICATION SLOT s1 LOGICAL 16/B374D848 (proto_version '2', streaming 'on', "
        "publication_names '\"pub\"', messages 'true')"
    )
    with pytest.raises(SourceError) as caught:
        start_replication_command("s1; DROP", "pub", 0)
    assert caught.value.kind is Kind.CONFIG


@pytest.mark.parametrize(
    ("detail", "kind"),
    [
        ('connection to server at "h", port 5 failed: Connection refused', Kind.SOURCE_UNREACHABLE),
        ('could not translate host name "x" to address', Kind.SOURCE_UNREACHABLE),
        ("server closed the connection unexpectedly", Kind.SOURCE_UNREACHABLE),
        ("FATAL:  the database system is starting up", Kind.SOURCE_UNREACHABLE),
        (
            'connection to server at "h" failed: FATAL:  password authentication failed for user',
            Kind.SOURCE_AUTH,
        ),
        ("FATAL:  must be superuser or replication role to start walsender", Kind.SOURCE_AUTH),
        ('FATAL:  no pg_hba.conf entry for replication connection from host "h"', Kind.SOURCE_AUTH),
        (
            'connection to server at "h" failed: FATAL:  database "x" does not exist',
            Kind.SOURCE_SETUP,
        ),
        ("logical decoding requires wal_level >= logical", Kind.SOURCE_SETUP),
        ('FATAL:  role "bob" does not exist', Kind.SOURCE_AUTH),
        ('replication slot "s" is active for PID 12', Kind.SOURCE_BUSY),
    ],
)
def test_classify(detail: str, kind: Kind) -> None:
    assert classify(detail) is kind


@pytest.mark.parametrize(
    ("detail", "fix"),
    [
        (
            'cannot read from logical replication slot "streambed" DETAIL:  This slot has been '
            "invalidated because it exceeded the maximum reserved size.",
            "replaces the invalidated slot and copies every table again",
        ),
        (
            'can no longer get changes from replication slot "streambed" DETAIL:  This slot has '
            "been invalidated because it exceeded the maximum reserved size.",
            "replaces the invalidated slot and copies every table again",
        ),
        (
            'replication slot "streambed" does not exist',
            "creates the slot and copies every table again",
        ),
    ],
)
def test_a_slot_that_cannot_stream_stops_with_the_way_back(detail: str, fix: str) -> None:
    """Retrying cannot bring back an invalidated or dropped slot: the error is not
    transient, and it says that starting again recovers (by copying every table)."""
    error = source_error("postgresql://u@h/db", "starting replication from slot streambed", detail)
    assert error.kind is Kind.SOURCE_SETUP
    assert fix in str(error)


def test_source_error_hides_the_password_everywhere() -> None:
    url = "postgresql://alice:hunter2@db:5432/app"
    error = source_error(url, "connecting", "weird server text mentioning hunter2")
    assert "hunter2" not in str(error)
    assert "alice:***@db" in str(error)


def test_source_error_hides_a_password_given_as_query_parameter() -> None:
    url = "postgresql://alice@db:5432/app?password=hunter2"
    error = source_error(url, "connecting", "refused")
    assert "hunter2" not in str(error)
