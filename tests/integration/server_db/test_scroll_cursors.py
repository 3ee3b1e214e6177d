"""SCROLL cursors move like Postgres's: random FETCH/MOVE sequences give the same rows and
command tags on Postgres 15 (the oracle) and on the lake database."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streambed.server.database import LakeDatabase, QueryError
from tests.fixtures.postgres import ThrowawayPostgres

pytestmark = pytest.mark.integration

ROWS = 7
QUERY = f"SELECT i FROM generate_series(1, {ROWS}) g(i) ORDER BY i"

counts = st.integers(-ROWS - 2, ROWS + 2)
commands = st.one_of(
    st.sampled_from(["NEXT", "PRIOR", "FIRST", "LAST", "ALL", "FORWARD ALL", "BACKWARD ALL"]),
    counts.map(lambda n: f"ABSOLUTE {n}"),
    counts.map(lambda n: f"RELATIVE {n}"),
    counts.map(lambda n: f"FORWARD {n}"),
    counts.map(lambda n: f"BACKWARD {n}"),
    st.integers(0, ROWS + 2).map(str),
)
steps = st.lists(st.tuples(st.sampled_from(["FETCH", "MOVE"]), commands), max_size=12)


def _postgres(pg: ThrowawayPostgres, sequence: list[tuple[str, str]]) -> list[Any]:
    with pg.connect() as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"DECLARE c SCROLL CURSOR FOR {QUERY}")
        out = []
        for verb, how in sequence:
            cur.execute(f"{verb} {how} FROM c")
            rows = cur.fetchall() if cur.description else []
            out.append((cur.statusmessage, [r[0] for r in rows]))
        return out


def _lake(db: LakeDatabase, sequence: list[tuple[str, str]]) -> list[Any]:
    session = db.session()
    try:
        session.execute("BEGIN")
        session.execute(f"DECLARE c SCROLL CURSOR FOR {QUERY}")
        out = []
        for verb, how in sequence:
            result = session.execute(f"{verb} {how} FROM c")
            rows = result.rows() if result.columns else []
            out.append((result.command_tag, [r[0] for r in rows]))
        return out
    finally:
        session.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps)
def test_scroll_cursor_moves_as_postgres(
    pg_server: ThrowawayPostgres, db: LakeDatabase, sequence: list[tuple[str, str]]
) -> None:
    assert _lake(db, sequence) == _postgres(pg_server, sequence)


def test_a_cursor_without_scroll_refuses_to_go_back(db: LakeDatabase) -> None:
    session = db.session()
    try:
        session.execute("BEGIN")
        session.execute(f"DECLARE c CURSOR FOR {QUERY}")
        assert session.execute("FETCH 2 FROM c").rows() == [(1,), (2,)]
        with pytest.raises(QueryError) as info:
            session.execute("FETCH PRIOR FROM c")
        assert info.value.sqlstate == "55000"
        assert "SCROLL" in info.value.message
    finally:
        session.close()


def test_a_scroll_cursor_with_hold_reads_back_after_commit(db: LakeDatabase) -> None:
    session = db.session()
    try:
        session.execute(f"DECLARE h SCROLL CURSOR WITH HOLD FOR {QUERY}")
        assert session.execute("FETCH 3 FROM h").rows() == [(1,), (2,), (3,)]
        assert session.execute("FETCH BACKWARD 2 FROM h").rows() == [(2,), (1,)]
        assert session.execute("FETCH LAST FROM h").rows() == [(ROWS,)]
        assert session.execute("MOVE ABSOLUTE 0 FROM h").command_tag == "MOVE 0"
        assert session.execute("FETCH NEXT FROM h").rows() == [(1,)]
    finally:
        session.close()
