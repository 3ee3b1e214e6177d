"""The logical replication stream: START_REPLICATION, COPY BOTH, keepalives, status updates.

Contract: the stream tells the source only the LSN the caller acknowledged with `ack()` (data
durable downstream), never more, and that LSN never moves backward. `read()` never blocks longer
than its timeout, so the caller's single loop can flush on time.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import pq

from streambed.core.errors import Kind, SourceError
from streambed.core.lsn import format_lsn
from streambed.source.connection import (
    ReplicationConnection,
    check_name,
    result_error,
    socket_ready,
    source_error,
)

logger = logging.getLogger(__name__)

# Seconds between 1970-01-01 and 2000-01-01, the Postgres epoch.
_PG_EPOCH_OFFSET: Final = 946_684_800

_XLOG_HEADER = struct.Struct(">cQQq")  # 'w', wal_start, wal_end, send_time
_KEEPALIVE = struct.Struct(">cQqB")  # 'k', wal_end, send_time, reply_requested
_STATUS = struct.Struct(">cQQQqB")  # 'r', write, flush, apply, clock, reply_requested


@dataclass(frozen=True)
class XLogData:
    wal_start: int
    wal_end: int
    send_time: int  # microseconds since 2000-01-01 UTC
    payload: bytes  # one pgoutput message


@dataclass(frozen=True)
class Keepalive:
    wal_end: int
    send_time: int
    reply_requested: bool


@dataclass(frozen=True)
class Batch:
    payloads: list[bytes]  # pgoutput messages, in stream order
    keepalive_end: int  # highest WAL end of the keepalives in this batch; 0 if none


def pg_now() -> int:
    """The current time in microseconds since 2000-01-01 UTC."""
    return int((time.time() - _PG_EPOCH_OFFSET) * 1_000_000)


def parse_copy_message(data: bytes) -> XLogData | Keepalive:
    """One CopyData message of the replication stream ('w' or 'k')."""
    kind = data[:1]
    if kind == b"w" and len(data) >= _XLOG_HEADER.size:
        _, start, end, sent = _XLOG_HEADER.unpack_from(data)
        return XLogData(start, end, sent, data[_XLOG_HEADER.size :])
    if kind == b"k" and len(data) >= _KEEPALIVE.size:
        _, end, sent, reply = _KEEPALIVE.unpack_from(data)
        return Keepalive(end, sent, bool(reply))
    raise SourceError(
        f"unexpected replication message {data[:1]!r} of {len(data)} bytes from the source",
        kind=Kind.PROTOCOL,
    )


def status_update(lsn: int, clock: int, reply_requested: bool = False) -> bytes:
    """A standby status update reporting `lsn` as written, flushed and applied."""
    return _STATUS.pack(b"r", lsn, lsn, lsn, clock, int(reply_requested))


def start_replication_command(slot: str, publication: str, start_lsn: int) -> str:
    check_name(slot, "STREAMBED_SLOT")
    check_name(publication, "STREAMBED_PUBLICATION")
    return (
        f"START_REPLICATION SLOT {slot} LOGICAL {format_lsn(start_lsn)} "
        f"(proto_version '2', streaming 'on', publication_names '\"{publication}\"', "
        "messages 'true')"
    )


class ReplicationStream:
    """Streams pgoutput messages from `slot`, starting after `start_lsn`.

    Use `ReplicationStream.start(url, ...)` for a new connection, or pass a
    `ReplicationConnection` that already ran CREATE_REPLICATION_SLOT (its exported snapshot
    ends here). Call `send_status()` from the loop; `read()` also does, and answers keepalives
    that ask for a reply at once.
    """

    def __init__(
        self,
        connection: ReplicationConnection,
        slot: str,
        publication: str,
        start_lsn: int = 0,
        *,
        status_interval: float = 5.0,
    ) -> None:
        self._conn = connection
        self._pgconn = connection.pgconn
        self.slot = slot
        self.publication = publication
        self.status_interval = status_interval
        self._acked = 0  # 0: nothing acknowledged yet; the source ignores flush = 0
        self._last_status = 0.0
        self._last_wal_end = start_lsn
        self._closed = False
        command = start_replication_command(slot, publication, start_lsn)
        action = f"starting replication from slot {slot}"
        try:
            res = self._pgconn.exec_(command.encode())
        except psycopg.OperationalError as e:
            raise source_error(connection.url, action, str(e), Kind.SOURCE_UNREACHABLE) from e
        if res.status != pq.ExecStatus.COPY_BOTH:
            sqlstate, message = result_error(res)
            kind = Kind.SOURCE_UNREACHABLE if not sqlstate or connection.closed else None
            raise source_error(connection.url, action, message, kind)
        self._last_status = time.monotonic()
        logger.info(
            "replication started",
            extra={"fields": {"slot": slot, "start_lsn": format_lsn(start_lsn)}},
        )

    @classmethod
    def start(
        cls,
        url: str,
        slot: str,
        publication: str,
        start_lsn: int = 0,
        *,
        status_interval: float = 5.0,
        connect_timeout: float = 10.0,
    ) -> ReplicationStream:
        connection = ReplicationConnection.connect(url, timeout=connect_timeout)
        try:
            return cls(connection, slot, publication, start_lsn, status_interval=status_interval)
        except BaseException:
            connection.close()
            raise

    # ---- reading ------------------------------------------------------------------------

    @property
    def acked_lsn(self) -> int:
        """The LSN reported to the source as flushed (0 before the first ack)."""
        return self._acked

    @property
    def last_wal_end(self) -> int:
        """The highest WAL end the source has reported in data or keepalives."""
        return self._last_wal_end

    def read(self, timeout: float) -> XLogData | Keepalive | None:
        """The next message, or None when none arrives within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        polled = False
        while True:
            message = self._next_available()
            if message is not None:
                if message.wal_end > self._last_wal_end:
                    self._last_wal_end = message.wal_end
                if isinstance(message, Keepalive) and message.reply_requested:
                    self.send_status(force=True)
                else:
                    self.send_status()
                return message
            self.send_status()
            remaining = deadline - time.monotonic()
            if remaining <= 0 and polled:
                return None
            polled = True  # even with no time left, look at the socket once
            wait = max(0.0, min(remaining, max(self.status_interval, 0.01)))
            try:
                readable = socket_ready(self._pgconn.socket, wait)
            except (OSError, ValueError, psycopg.OperationalError) as e:
                raise self._lost(str(e)) from e
            if readable:
                try:
                    self._pgconn.consume_input()
                except psycopg.OperationalError as e:
                    raise self._lost(str(e)) from e

    def read_batch(self, timeout: float, limit: int = 4096) -> Batch:
        """Every message already received (up to `limit`), else wait up to `timeout` for some.

        The hot path of the pipeline: XLogData payloads come back as bytes, in order, without
        a per-message object; keepalives are answered here and reported as the highest WAL
        end seen, which the caller may acknowledge once everything before it is durable.
        """
        payloads: list[bytes] = []
        keepalive_end = 0
        last_data: bytes | memoryview = b""
        pgconn = self._pgconn
        deadline = time.monotonic() + timeout
        polled = refilled = False
        while len(payloads) < limit:
            try:
                nbytes, data = pgconn.get_copy_data(1)
            except psycopg.OperationalError as e:
                raise self._lost(str(e)) from e
            if nbytes > 0:
                kind = data[0]
                if kind == 0x77 and nbytes >= _XLOG_HEADER.size:  # 'w'
                    last_data = data
                    payloads.append(bytes(data[_XLOG_HEADER.size :]))
                    refilled = False
                    continue
                message = parse_copy_message(bytes(data))
                assert isinstance(message, Keepalive)
                keepalive_end = max(keepalive_end, message.wal_end)
                if message.reply_requested:
                    self.send_status(force=True)
                continue
            if nbytes < 0:
                self._next_available()  # raises with the source's reason
            if payloads or keepalive_end:
                if refilled:
                    break
                refilled = True  # read what the socket already holds, without waiting
                try:
                    pgconn.consume_input()
                except psycopg.OperationalError as e:
                    raise self._lost(str(e)) from e
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 and polled:
                break
            polled = True
            self.send_status()
            try:
                readable = socket_ready(pgconn.socket, remaining)
            except (OSError, ValueError, psycopg.OperationalError) as e:
                raise self._lost(str(e)) from e
            if readable:
                try:
                    pgconn.consume_input()
                except psycopg.OperationalError as e:
                    raise self._lost(str(e)) from e
        if last_data:
            wal_end = _XLOG_HEADER.unpack_from(last_data)[2]
            self._last_wal_end = max(self._last_wal_end, wal_end)
        self._last_wal_end = max(self._last_wal_end, keepalive_end)
        return Batch(payloads, keepalive_end)

    def _next_available(self) -> XLogData | Keepalive | None:
        if self._closed:
            raise SourceError("the replication stream is closed", kind=Kind.INTERNAL)
        try:
            nbytes, data = self._pgconn.get_copy_data(1)
        except psycopg.OperationalError as e:
            raise self._lost(str(e)) from e
        if nbytes > 0:
            return parse_copy_message(bytes(data))
        if nbytes == 0:
            return None
        # -1: the source ended the copy (shutdown); -2: an error. Either way, the result says.
        detail = "the source ended replication"
        sqlstate = ""
        try:
            res = self._pgconn.get_result()
            while res is not None:
                if res.status == pq.ExecStatus.FATAL_ERROR:
                    sqlstate, detail = result_error(res)
                res = self._pgconn.get_result()
        except psycopg.OperationalError as e:
            detail = str(e) or detail
        if nbytes == -2 and not sqlstate and self._pgconn.status == pq.ConnStatus.OK:
            detail = self._pgconn.get_error_message() or detail
        self._closed = True
        self._pgconn.finish()
        unreachable = not sqlstate or sqlstate.startswith(("08", "57P"))
        raise source_error(
            self._conn.url,
            f"streaming from slot {self.slot}",
            detail,
            Kind.SOURCE_UNREACHABLE if unreachable else None,
        )

    def _lost(self, detail: str) -> SourceError:
        self._closed = True
        self._pgconn.finish()
        return source_error(
            self._conn.url,
            f"streaming from slot {self.slot}",
            detail or "connection lost",
            Kind.SOURCE_UNREACHABLE,
        )

    # ---- acknowledging --------------------------------------------------------------------

    def ack(self, lsn: int) -> None:
        """Record `lsn` as durable downstream. Never moves backward; sent by `send_status`."""
        if lsn > self._acked:
            self._acked = lsn

    def send_status(self, force: bool = False) -> bool:
        """Send a standby status update if `status_interval` passed or `force`; True if sent."""
        now = time.monotonic()
        if not force and now - self._last_status < self.status_interval:
            return False
        if self._closed:
            raise SourceError("the replication stream is closed", kind=Kind.INTERNAL)
        try:
            if self._pgconn.put_copy_data(status_update(self._acked, pg_now())) != 1:
                raise psycopg.OperationalError(self._pgconn.get_error_message())
            self._pgconn.flush()
        except psycopg.OperationalError as e:
            raise self._lost(str(e)) from e
        self._last_status = now
        return True

    # ---- closing --------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Report the acknowledged LSN, end the copy and close the connection."""
        if self._closed:
            return
        self._closed = True
        pgconn = self._pgconn
        try:
            pgconn.put_copy_data(status_update(self._acked, pg_now()))
            pgconn.put_copy_end()
            pgconn.flush()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                nbytes, _ = pgconn.get_copy_data(1)
                if nbytes < 0:
                    while pgconn.get_result() is not None:
                        pass
                    break
                if nbytes == 0:
                    remaining = max(0.0, deadline - time.monotonic())
                    if socket_ready(pgconn.socket, remaining):
                        pgconn.consume_input()
        except (psycopg.OperationalError, OSError, ValueError):
            pass  # closing anyway
        finally:
            pgconn.finish()
        logger.info(
            "replication stopped",
            extra={"fields": {"slot": self.slot, "acked_lsn": format_lsn(self._acked)}},
        )

    def __enter__(self) -> ReplicationStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
