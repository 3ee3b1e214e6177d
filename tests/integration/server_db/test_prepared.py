"""A session keeps the SELECTs it prepared (parsed, checked, rewritten) by text, and prepares
a text again whenever what the preparation read changed: the session's settings, the tables
served, or something resolved at preparation that a text does not fix (set_config(), time
travel, parameters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streambed.server import sqlparse
from streambed.server.database import LakeDatabase, QueryError

from .conftest import CUSTOMERS, FakeSnapshots, Lake, orders_rows

pytestmark = pytest.mark.integration


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the sessions parse, in order."""
    seen: list[str] = []
    original: Callable[[str], Any] = sqlparse.parse_sql

    def counting(sql: str) -> Any:
        seen.append(sql)
        return original(sql)

    monkeypatch.setattr(sqlparse, "parse_sql", counting)
    return seen


def test_a_text_is_parsed_checked_and_rewritten_once(db: LakeDatabase, parses: list[str]) -> None:
    session = db.session()
    sql = "SELECT id, amount / 3 AS third FROM orders ORDER BY id"
    first = session.execute(sql)
    first_columns, first_rows = first.columns, first.rows()
    second = session.execute(sql)
    assert (second.columns, second.rows()) == (first_columns, first_rows)
    assert parses.count(sql) == 1
    assert second.columns[0].table_oid != 0  # the column origins came from the cache too
    session.close()


def test_a_settings_change_prepares_the_text_again(db: LakeDatabase) -> None:
    session = db.session()
    setting = "SELECT current_setting('application_name'), current_schema()"
    assert session.execute(setting).rows() == [("", "public")]
    session.execute("SET application_name = 'dashboard'")
    session.execute("SET search_path = sales, public")
    assert session.execute(setting).rows() == [("dashboard", "sales")]
    assert session.execute("SELECT count(*) FROM customers").rows() == [(2,)]
    session.execute("SET search_path = public")
    with pytest.raises(QueryError) as error:  # sales.customers is no longer on the path
        session.execute("SELECT count(*) FROM customers").rows()
    assert error.value.sqlstate == "42P01"
    session.close()


def test_set_config_is_applied_every_time(db: LakeDatabase) -> None:
    session = db.session()
    sql = "SELECT set_config('application_name', 'a', false)"
    assert session.execute(sql).rows() == [("a",)]
    session.execute("SET application_name = 'b'")
    assert session.execute(sql).rows() == [("a",)]
    assert session.execute("SHOW application_name").rows() == [("a",)]
    session.close()


def test_a_refresh_prepares_the_text_again(
    db: LakeDatabase, lake: Lake, snapshots: FakeSnapshots
) -> None:
    session = db.session()
    session.execute("SET search_path = extra, public")
    sql = "SELECT current_schema(), count(*) FROM orders"
    assert session.execute(sql).rows() == [("public", 3)]
    # a new schema on the search path: current_schema() and unqualified names move to it
    lake.catalog.create_namespace("extra")
    lake.tables["extra.orders"] = lake.catalog.create_table("extra.orders", CUSTOMERS)
    lake.append("public.orders", orders_rows([4]), lsn=0x300)
    snapshots.current = lake.watermark()
    assert db.refresh() is True
    assert session.execute(sql).rows() == [("extra", 0)]
    session.close()


def test_statements_with_parameters_or_time_travel_are_not_kept(
    db: LakeDatabase, lake: Lake, snapshots: FakeSnapshots, parses: list[str]
) -> None:
    session = db.session()
    sql = "SELECT count(*) FROM orders WHERE id > $1"
    assert [session.execute(sql, [v]).rows() for v in (1, 2)] == [[(2,)], [(1,)]]
    assert parses.count(sql) == 2
    lake.append("public.orders", orders_rows([4]), lsn=0x300)
    snapshots.current = lake.watermark()
    db.refresh()
    travel = "SELECT count(*) FROM streambed.at_lsn('public.orders', '0/2FF')"
    assert [session.execute(travel).rows() for _ in range(2)] == [[(3,)], [(3,)]]
    assert parses.count(travel) == 2
    session.close()


def test_a_kept_statement_in_a_failed_transaction_is_refused(db: LakeDatabase) -> None:
    session = db.session()
    sql = "SELECT count(*) FROM orders"
    assert session.execute(sql).rows() == [(3,)]
    session.execute("BEGIN")
    with pytest.raises(QueryError):
        session.execute("SELECT 1 / 0").rows()
    with pytest.raises(QueryError) as error:
        session.execute(sql)
    assert error.value.sqlstate == "25P02"
    session.execute("ROLLBACK")
    assert session.execute(sql).rows() == [(3,)]
    session.close()
