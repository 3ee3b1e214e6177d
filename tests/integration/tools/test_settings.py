"""set_config / current_setting / pg_settings (pgjdbc, pgAdmin) and psql's \\df, on Postgres
and on the query server."""

from __future__ import annotations

import pytest

from streambed.server.database import QueryError

from . import pgjdbc_queries, psql_queries
from .conftest import Pair

pytestmark = pytest.mark.integration


def test_pg_settings_lookups(pair: Pair) -> None:
    for sql in (pgjdbc_queries.MAX_INDEX_KEYS, pgjdbc_queries.SERVER_VERSION_NUM):
        expected, got = pair.both(sql)
        assert len(got.rows) == 1
        assert got.rows == expected.rows or sql == pgjdbc_queries.SERVER_VERSION_NUM
    expected, got = pair.both("SELECT name, setting, vartype FROM pg_settings WHERE name = $1",
                              ["max_identifier_length"])  # fmt: skip
    assert got.rows == expected.rows


def test_set_config_and_current_setting(pair: Pair) -> None:
    for sql in (
        "SELECT set_config('application_name', 'tool', false) AS v",
        "SELECT current_setting('application_name') AS v",
        "SELECT current_setting('Application_Name') AS v",
        "SELECT current_setting('no_such_setting', true) AS v",
        "SELECT setting FROM pg_settings WHERE name = 'application_name'",
        "SELECT current_setting('max_index_keys') AS v",
    ):
        expected, got = pair.both(sql)
        assert got.rows == expected.rows, sql
    # local: only until the end of the transaction block
    pair.served("BEGIN")
    assert pair.served("SELECT set_config('application_name', 'x', true)").rows == [("x",)]
    assert pair.served("SHOW application_name").rows == [("x",)]
    pair.served("COMMIT")
    assert pair.served("SHOW application_name").rows == [("tool",)]
    # validated like SET; never DuckDB's settings
    for sql, state in (
        ("SELECT set_config('TimeZone', 'Nowhere/City', false)", "22023"),
        ("SELECT set_config('memory_limit', '1GB', false)", "42501"),
        ("SELECT current_setting('home_directory')", "42704"),
        ("SELECT current_setting('threads')", "42704"),
    ):
        with pytest.raises(QueryError) as raised:
            pair.served(sql)
        assert raised.value.sqlstate == state, sql
    assert pair.served("SELECT count(*) FROM pg_settings WHERE name = 'home_directory'").rows == [
        (0,)
    ]


def test_psql_df(pair: Pair) -> None:
    expected, got = pair.both(psql_queries.DF)
    assert got.rows == expected.rows == []


def test_settings_over_the_wire(pair: Pair) -> None:
    """The extended protocol (parameters bound, statement described before it runs)."""
    with pair.connect() as conn:
        row = conn.execute("SELECT set_config('application_name', %s, false)", ["wired"])
        assert row.fetchall() == [("wired",)]
        assert conn.execute("SHOW application_name").fetchall() == [("wired",)]
        row = conn.execute(
            "SELECT current_setting(%s), current_setting(%s, true)", ["TimeZone", "x.y"]
        )
        assert row.fetchall() == [("UTC", None)]
        rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = %s", ["TimeZone"])
        assert rows.fetchall() == [("TimeZone", "UTC")]
        assert conn.execute("SELECT datname FROM pg_database").fetchall() == [(pair.dbname,)]
