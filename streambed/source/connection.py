"""Connections to the source: the replication connection (libpq, `replication=database`) and
normal SQL connections, with every failure turned into a `SourceError` of the right kind.

psycopg 3 has no replication API, so the replication connection is a bare
`psycopg.pq.PGconn`. Messages name what is wrong and the fix, and never contain the password.
"""

from __future__ import annotations

import re
import select
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq.abc import PGconn, PGresult

from streambed.core.config import redact_url
from streambed.core.errors import Kind, SourceError
from streambed.core.lsn import parse_lsn

DEFAULT_CONNECT_TIMEOUT = 10.0

# Identifiers streambed puts into replication commands unquoted (see config._NAME).
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# Error text (lowercase) → kind. The first match wins; order matters.
_AUTH_PATTERNS = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "fe_sendauth",
    "must be superuser or replication role",
    "permission denied to start wal sender",
    "no pg_hba.conf entry",
    "pg_hba.conf rejects",
)
_SETUP_PATTERNS = (
    "logical decoding requires wal_level",
    "wal_level",
    "does not exist",
    "replication slots can only be used if",
    "all replication slots are in use",
    "number of requested standby connections exceeds",
    "was not created in this database",
    "publication",
    "has been invalidated",  # the slot lost WAL it needed (max_slot_wal_keep_size)
    "can no longer get changes from replication slot",  # the same, Postgres 17
)
_UNREACHABLE_PATTERNS = (
    "connection refused",
    "could not connect",
    "could not translate host name",
    "name or service not known",
    "temporary failure in name resolution",
    "timeout expired",
    "timed out",
    "no route to host",
    "network is unreachable",
    "server closed the connection",
    "connection to server was lost",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "terminating connection",
    "too many clients",
    "remaining connection slots are reserved",
    "ssl syscall error",
    "eof detected",
    "connection reset",
    "broken pipe",
)


def classify(detail: str) -> Kind:
    """The kind of a connection or command failure, from libpq's / the server's error text."""
    text = detail.lower()
    if "fatal:" in text:  # the server answered: its own words decide, not libpq's preamble
        text = text.rsplit("fatal:", 1)[1]
    if any(p in text for p in _AUTH_PATTERNS) or re.search(r'role "[^"]*" does not exist', text):
        return Kind.SOURCE_AUTH
    if any(p in text for p in _UNREACHABLE_PATTERNS):
        return Kind.SOURCE_UNREACHABLE
    if "is active for pid" in text:
        return Kind.SOURCE_BUSY
    if any(p in text for p in _SETUP_PATTERNS):
        return Kind.SOURCE_SETUP
    return Kind.SOURCE_UNREACHABLE


def _fix(kind: Kind, detail: str, user: str) -> str:
    text = detail.lower()
    if kind is Kind.SOURCE_AUTH:
        if "password" in text or "fe_sendauth" in text or "does not exist" in text:
            return "fix the user name or password in STREAMBED_SOURCE_URL"
        if "pg_hba" in text:
            return (
                "add a pg_hba.conf line allowing this host, e.g. "
                f"`host replication {user} <client address> scram-sha-256` (and one for the "
                "database), then reload Postgres"
            )
        return (
            f"give the role the REPLICATION attribute: ALTER ROLE {user} WITH REPLICATION; "
            "or use a superuser"
        )
    if kind is Kind.SOURCE_BUSY:
        return (
            "another client is streaming from this slot: stop it, or use another "
            "STREAMBED_SLOT; if a previous streambed process just died, the source frees "
            "the slot after wal_sender_timeout"
        )
    if kind is Kind.SOURCE_SETUP:
        if "wal_level" in text:
            return "run ALTER SYSTEM SET wal_level = logical; as a superuser and restart Postgres"
        if "invalidated" in text or "can no longer get changes" in text:
            return (
                "the source removed WAL the slot still held (it held more than "
                "max_slot_wal_keep_size allows), so changes the lake had not received are "
                "gone; start streambed again: it replaces the invalidated slot and copies "
                "every table again"
            )
        if "replication slot" in text and "does not exist" in text:
            return (
                "the slot was dropped, or the source failed over to a server without it; "
                "start streambed again: it creates the slot and copies every table again"
            )
        if "all replication slots are in use" in text or "replication slots can only" in text:
            return "raise max_replication_slots on the source and restart Postgres"
        if "standby connections" in text:
            return "raise max_wal_senders on the source and restart Postgres"
        if "publication" in text:
            return (
                "create the publication as a superuser (CREATE PUBLICATION <name> FOR ALL TABLES "
                "WITH (publish_via_partition_root = true)) or set STREAMBED_PUBLICATION to an "
                "existing one"
            )
        if "database" in text:
            return "fix the database name in STREAMBED_SOURCE_URL"
        return "fix the source configuration named above"
    return (
        "check that Postgres is running and that host and port in STREAMBED_SOURCE_URL are "
        "right; streambed retries with backoff"
    )


def source_error(url: str, action: str, detail: str, kind: Kind | None = None) -> SourceError:
    """A SourceError saying what failed, why, and the fix; the password is removed."""
    kind = kind if kind is not None else classify(detail)
    params = _params(url)
    detail = _scrub(" ".join(detail.split()), params.get("password"))
    user = params.get("user") or "<user>"
    message = f"{action} at {redact_url(url)} failed: {detail}; {_fix(kind, detail, user)}"
    # redact_url misses a password given as ?password=...; remove it wherever it appears.
    return SourceError(_scrub(message, params.get("password")), kind=kind)


def _params(url: str) -> dict[str, str]:
    try:
        return {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except psycopg.ProgrammingError:
        return {}


def _scrub(text: str, password: str | None) -> str:
    if password:
        text = text.replace(password, "***")
    return text


def result_error(res: PGresult) -> tuple[str, str]:
    """(sqlstate, message) of a failed result."""
    sqlstate = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    return sqlstate, res.get_error_message()


def sql_connect(url: str, *, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> psycopg.Connection[Any]:
    """A normal autocommit SQL connection to the source."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=max(1, round(timeout)))
    except psycopg.Error as e:
        raise source_error(url, "connecting to the source", str(e)) from e


@dataclass(frozen=True)
class SystemIdentity:
    system_id: str
    timeline: int
    xlog_pos: int
    dbname: str | None


@dataclass(frozen=True)
class CreatedSlot:
    slot_name: str
    consistent_point: int
    snapshot_name: str | None  # set when created with SNAPSHOT 'export'
    output_plugin: str


# pgoutput renders tuple values with the walsender session's output settings; the
# conversion to Arrow (streambed.lake.convert) relies on these.
SESSION_OPTIONS = (
    "-c DateStyle=ISO,MDY -c IntervalStyle=postgres -c TimeZone=UTC "
    "-c extra_float_digits=3 -c bytea_output=hex"
)


def join_options(user_options: str, ours: str) -> str:
    """A connection's `options`: the user's, then ours (a later `-c` wins)."""
    return f"{user_options} {ours}".strip()


class ReplicationConnection:
    """A libpq connection in `replication=database` mode.

    Run replication commands (`identify_system`, `create_slot`), then hand the connection to
    `streambed.source.stream.ReplicationStream` with `START_REPLICATION`. A snapshot
    exported by `create_slot(export_snapshot=True)` stays valid until this connection runs its
    next command or closes.
    """

    def __init__(self, pgconn: PGconn, url: str) -> None:
        self.pgconn = pgconn
        self.url = url

    @classmethod
    def connect(
        cls, url: str, *, timeout: float = DEFAULT_CONNECT_TIMEOUT
    ) -> ReplicationConnection:
        try:
            conninfo = make_conninfo(
                url,
                replication="database",
                application_name="streambed",
                client_encoding="UTF8",
                options=join_options(_params(url).get("options", ""), SESSION_OPTIONS),
            )
        except psycopg.ProgrammingError as e:
            raise SourceError(
                f"STREAMBED_SOURCE_URL {redact_url(url)} is not a valid libpq URL: "
                f"{_scrub(str(e), _params(url).get('password'))}",
                kind=Kind.CONFIG,
            ) from e
        pgconn = pq.PGconn.connect_start(conninfo.encode())
        try:
            finished = _poll_connect(pgconn, time.monotonic() + timeout)
        except BaseException:
            pgconn.finish()
            raise
        if not finished or pgconn.status != pq.ConnStatus.OK:
            detail = (
                pgconn.get_error_message()
                if finished
                else f"connection timed out after {timeout:g} s"
            )
            pgconn.finish()
            raise source_error(url, "opening a replication connection", detail)
        return cls(pgconn, url)

    @property
    def closed(self) -> bool:
        return self.pgconn.status != pq.ConnStatus.OK

    def execute(self, command: str, action: str) -> PGresult:
        """Run one replication command; raise a classified SourceError when it fails."""
        try:
            res = self.pgconn.exec_(command.encode())
        except psycopg.OperationalError as e:
            raise source_error(self.url, action, str(e), Kind.SOURCE_UNREACHABLE) from e
        if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            sqlstate, message = result_error(res)
            if self.closed or not sqlstate:
                raise source_error(self.url, action, message, Kind.SOURCE_UNREACHABLE)
            raise source_error(self.url, action, message, _kind_of_sqlstate(sqlstate, message))
        return res

    def identify_system(self) -> SystemIdentity:
        res = self.execute("IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM")
        row = [res.get_value(0, i) for i in range(res.nfields)]
        return SystemIdentity(
            system_id=(row[0] or b"").decode(),
            timeline=int(row[1] or 0),
            xlog_pos=parse_lsn((row[2] or b"0/0").decode()),
            dbname=row[3].decode() if len(row) > 3 and row[3] is not None else None,
        )

    def create_slot(self, slot: str, *, export_snapshot: bool = False) -> CreatedSlot:
        """CREATE_REPLICATION_SLOT <slot> LOGICAL pgoutput; with the snapshot exported if asked.

        Raises SourceError(SOURCE_SETUP) when the slot exists (SQLSTATE 42710 is kept in the
        message) or slots are exhausted.
        """
        check_name(slot, "STREAMBED_SLOT")
        option = "EXPORT" if export_snapshot else "NOTHING"
        res = self.execute(
            f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput (SNAPSHOT '{option.lower()}')",
            f"creating replication slot {slot}",
        )
        values = [res.get_value(0, i) for i in range(res.nfields)]
        snapshot = values[2].decode() if values[2] is not None else None
        return CreatedSlot(
            slot_name=(values[0] or b"").decode(),
            consistent_point=parse_lsn((values[1] or b"0/0").decode()),
            snapshot_name=snapshot if export_snapshot else None,
            output_plugin=(values[3] or b"").decode(),
        )

    def close(self) -> None:
        self.pgconn.finish()

    def __enter__(self) -> ReplicationConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_name(name: str, setting: str) -> None:
    if not _NAME.match(name):
        raise SourceError(
            f"{setting}={name!r} must be a lowercase identifier (letters, digits, _)",
            kind=Kind.CONFIG,
        )


def _kind_of_sqlstate(sqlstate: str, message: str) -> Kind:
    if sqlstate.startswith("08") or sqlstate.startswith("57P"):  # connection, shutdown
        return Kind.SOURCE_UNREACHABLE
    if sqlstate.startswith("28") or sqlstate == "42501":  # auth, insufficient privilege
        return Kind.SOURCE_AUTH if "publication" not in message.lower() else Kind.SOURCE_SETUP
    if sqlstate == "53300":  # too many connections
        return Kind.SOURCE_UNREACHABLE
    if sqlstate == "55006":  # object in use: the slot is active for another process
        return Kind.SOURCE_BUSY
    return Kind.SOURCE_SETUP


def _poll_connect(pgconn: PGconn, deadline: float) -> bool:
    """Drive connect_poll until it succeeds or fails (True), or the deadline passes (False)."""
    status = pq.PollingStatus.WRITING
    while status not in (pq.PollingStatus.OK, pq.PollingStatus.FAILED):
        if pgconn.status == pq.ConnStatus.BAD:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        writing = status != pq.PollingStatus.READING
        if not socket_ready(pgconn.socket, remaining, write=writing):
            return False
        status = pq.PollingStatus(pgconn.connect_poll())
    return True


def socket_ready(fd: int, timeout: float, *, write: bool = False) -> bool:
    """Wait up to `timeout` seconds for `fd` to be readable (or writable). poll(), not
    select(): select() refuses descriptors of 1024 and more, which a process serving many
    query connections beside the stream reaches."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT if write else select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000 + 0.999))))
