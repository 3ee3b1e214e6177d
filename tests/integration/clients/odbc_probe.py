"""Run by test_odbc.py in a process of its own (a driver that crashes must not take pytest
with it): psqlODBC's catalog functions through unixODBC and pyodbc, printed as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pyodbc

DRIVER = "/usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so"


def _rows(cursor: Any) -> list[list[Any]]:
    names = [d[0] for d in cursor.description]
    # the database name, and OIDs the two servers give differently
    skip = {"table_cat", "pktable_cat", "fktable_cat", "remarks", "table oid", "base typeid"}
    return [
        [
            str(v) if v is not None else None
            for n, v in zip(names, row, strict=True)
            if n not in skip
        ]
        for row in cursor.fetchall()
    ]


def main() -> None:
    host, port, database, user, password = sys.argv[1:6]
    conn = pyodbc.connect(
        f"DRIVER={{{DRIVER}}};SERVER={host};PORT={port};DATABASE={database};UID={user};"
        f"PWD={password};SSLmode=disable",
        autocommit=True,
    )
    out: dict[str, Any] = {}
    calls: dict[str, Callable[[Any], Any]] = {
        "tables": lambda c: c.tables(schema="public", tableType="TABLE"),
        "columns.customers": lambda c: c.columns(table="customers", schema="public"),
        "columns.orders": lambda c: c.columns(table="orders", schema="public"),
        "primary_keys.customers": lambda c: c.primaryKeys("customers", schema="public"),
        "primary_keys.orders": lambda c: c.primaryKeys("orders", schema="public"),
        "foreign_keys.orders": lambda c: c.foreignKeys(
            foreignTable="orders", foreignSchema="public"
        ),
        "foreign_keys.customers": lambda c: c.foreignKeys(table="customers", schema="public"),
        "statistics.customers": lambda c: c.statistics("customers", schema="public"),
        "statistics.orders": lambda c: c.statistics("orders", schema="public"),
        "select": lambda c: c.execute(
            "SELECT id, email, tags, profile, token FROM customers ORDER BY id"
        ),
    }
    for key, call in calls.items():
        cursor = conn.cursor()
        try:
            out[key] = _rows(call(cursor))
        except pyodbc.Error as e:
            out[key] = f"ERROR {e}"
        finally:
            cursor.close()
    conn.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
