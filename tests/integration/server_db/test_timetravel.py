"""streambed.at_snapshot / at_time / at_lsn over real Iceberg snapshots."""

from __future__ import annotations

import pytest

from streambed.server.database import LakeDatabase, QueryError

from .conftest import FakeSnapshots, Lake, orders_rows


def test_time_travel(db: LakeDatabase, lake: Lake, snapshots: FakeSnapshots) -> None:
    first = lake.tables["public.orders"].current_snapshot()
    assert first is not None
    lake.append("public.orders", orders_rows([4, 5]), lsn=0x300)
    snapshots.current = lake.watermark()
    db.refresh()
    session = db.session()
    assert session.execute("SELECT count(*) FROM orders").rows() == [(5,)]
    at_snapshot = session.execute(
        "SELECT count(*) FROM streambed.at_snapshot('public.orders', $1)", [first.snapshot_id]
    )
    assert at_snapshot.rows() == [(3,)]
    assert session.execute(
        "SELECT count(*) FROM streambed.at_lsn('public.orders', '0/2FF')"
    ).rows() == [(3,)]
    assert session.execute(
        "SELECT count(*) FROM streambed.at_lsn('public.orders', '0/300')"
    ).rows() == [(5,)]
    assert session.execute(
        "SELECT count(*) FROM streambed.at_time('public.orders', '2999-01-01 00:00:00+00')"
    ).rows() == [(5,)]
    for sql, state in [
        ("SELECT * FROM streambed.at_lsn('public.orders', '0/1')", "22023"),
        ("SELECT * FROM streambed.at_time('public.orders', '2000-01-01 00:00:00+00')", "22023"),
        ("SELECT * FROM streambed.at_snapshot('public.orders', 42)", "22023"),
        ("SELECT * FROM streambed.at_snapshot('public.nope', 42)", "42P01"),
    ]:
        with pytest.raises(QueryError) as info:
            session.execute(sql).rows()
        assert info.value.sqlstate == state, info.value.message
