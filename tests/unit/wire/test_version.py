"""The Postgres version the query server reports agrees in every form clients read it
(`streambed.server.version`): the startup ParameterStatus, SHOW, current_setting,
pg_settings and version(), each parsed the way libpq (psycopg), pgjdbc and SQLAlchemy parse it."""

from __future__ import annotations

import re

from streambed import __version__
from streambed.server.version import SERVER_VERSION, SERVER_VERSION_NUM, version_num
from streambed.server.wire import messages
from streambed.server.wire.auth import UserStore
from streambed.server.wire.handler import ConnectionHandler, Database

SQLALCHEMY = re.compile(r".*(?:PostgreSQL|EnterpriseDB) (\d+)\.?(\d+)?(?:\.(\d+))?")
"""SQLAlchemy's psycopg dialect reads the server version from version() with this match."""


def _libpq_version_num(server_version: str) -> int:
    """libpq's PQserverVersion from the server_version ParameterStatus (10 and later: the
    leading major and minor numbers)."""
    numbers = re.match(r"(\d+)(?:\.(\d+))?", server_version)
    assert numbers is not None, server_version
    return int(numbers[1]) * 10_000 + int(numbers[2] or 0)


def _pgjdbc_version(server_version: str) -> tuple[int, int]:
    """pgjdbc's ServerVersion.from: the leading numbers of server_version, up to a non-digit."""
    numbers = re.match(r"(\d+)\.(\d+)", server_version)
    assert numbers is not None, server_version
    return int(numbers[1]), int(numbers[2])


def _values(handler: ConnectionHandler, sql: str) -> list[str]:
    out = b"".join(handler.handle(b"Q", sql.encode() + b"\x00"))
    values: list[str] = []
    for type_code, body in messages.split_backend(out):
        assert type_code != b"E", body
        if type_code == b"D":
            r = messages.Reader(body, "DataRow")
            assert r.int16() == 1
            values.append(r.raw(r.int32()).decode())
    return values


def test_every_form_of_the_server_version_agrees(database: Database) -> None:
    handler = ConnectionHandler(database, UserStore({}), process_id=7, secret_key=9)
    startup = messages.split_backend(
        b"".join(handler.startup(messages.StartupMessage({"user": "alice"})))
    )
    status = dict(body.split(b"\x00")[:2] for type_code, body in startup if type_code == b"S")
    reported = status[b"server_version"].decode()
    assert reported == SERVER_VERSION
    number = int(SERVER_VERSION_NUM)
    assert _libpq_version_num(reported) == number == version_num(SERVER_VERSION)
    assert _pgjdbc_version(reported) == (number // 10_000, number % 10_000)

    assert _values(handler, "SHOW server_version") == [reported]
    assert _values(handler, "SHOW server_version_num") == [SERVER_VERSION_NUM]
    assert _values(handler, "SELECT current_setting('server_version')") == [reported]
    assert _values(handler, "SELECT current_setting('server_version_num')") == [SERVER_VERSION_NUM]
    assert _values(
        handler, "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'server_version_num'"
    ) == [SERVER_VERSION_NUM]

    (version,) = _values(handler, "SELECT version()")
    assert version.startswith(f"PostgreSQL {reported} (streambed {__version__} ")
    match = SQLALCHEMY.match(version)
    assert match is not None
    assert (int(match[1]), int(match[2] or 0)) == _pgjdbc_version(reported)
    handler.close()
