"""psycopg's scrollable server-side cursors (`DECLARE ... SCROLL`, `MOVE`) over the wire."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest

from streambed.server.wire.server import QueryServer
from tests.integration.wire.conftest import ITEM_ROWS, conninfo

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("binary", [False, True])
def test_scrollable_named_cursor_moves_both_ways(server: QueryServer, binary: bool) -> None:
    with psycopg.connect(conninfo(server)) as c:
        with c.cursor(name="scroller", scrollable=True, binary=binary) as cur:
            cur.execute("SELECT id, price FROM public.items ORDER BY id")
            assert cur.fetchmany(3) == [
                (1, Decimal("0.01")),
                (2, Decimal("0.02")),
                (3, Decimal("0.03")),
            ]
            cur.scroll(-2)  # MOVE -2: back onto row 1
            assert cur.fetchone() == (2, Decimal("0.02"))
            cur.scroll(ITEM_ROWS - 1, mode="absolute")
            assert cur.fetchall() == [(ITEM_ROWS, Decimal(ITEM_ROWS) / 100)]
            cur.scroll(0, mode="absolute")
            assert [row[0] for row in cur.fetchmany(2)] == [1, 2]
        c.rollback()
