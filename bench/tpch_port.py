"""TPC-H through the query port against DuckDB in process, on the same Iceberg tables.

    make bench-tpch_port ARGS="--sf 0.1 [--repeat 3] [--queries 2,8,20,22]"

Generates TPC-H with DuckDB's tpch extension (loaded from the duckdb-extension-tpch wheel,
offline), writes the 8 tables as Iceberg tables (pyiceberg SqlCatalog, local warehouse),
then runs the 22 standard queries, interleaved, best of `--repeat`:

- in process: a plain DuckDB connection with one view per table over `iceberg_scan` of the
  same metadata, the rows fetched as Python tuples;
- through the port: a real QueryServer over a LakeDatabase, psycopg (text format).

Prints per-query times, the ratio port / in-process, the geometric mean and the goal check
(geometric mean <= 1.2, no query above 1.5). Then, per query, where the port's time goes,
measured by calling the session's steps directly (best of `--repeat` each): parse
(pglast), guard (allow-list), rewrite (Postgres semantics into DuckDB SQL), DuckDB running
the rewritten text to an Arrow table, the same for the client's text unrewritten (what the
rewrite costs in the plan), and the rest of the port's time (encoding rows, the wire,
psycopg decoding).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import psycopg
from pyiceberg.catalog.sql import SqlCatalog

from streambed.server import sqlparse
from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.extensions import extension_path, load_extensions, offline_config
from streambed.server.wire.server import QueryServer, ServerOptions

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
GOAL_MEAN, GOAL_MAX = 1.2, 1.5


@dataclass
class Static:
    watermark: ServedWatermark

    def latest(self) -> ServedWatermark | None:
        return self.watermark


def generate(sf: float) -> tuple[duckdb.DuckDBPyConnection, list[tuple[int, str]]]:
    """An in-memory DuckDB holding TPC-H at scale `sf`, and the 22 queries."""
    conn = duckdb.connect(config=dict(offline_config()))
    conn.execute(f"LOAD '{extension_path('tpch')}'")
    conn.execute(f"CALL dbgen(sf={sf})")
    queries = conn.execute("SELECT query_nr, query FROM tpch_queries() ORDER BY 1").fetchall()
    return conn, [(int(n), str(q)) for n, q in queries]


def write_iceberg(
    source: duckdb.DuckDBPyConnection, root: Path
) -> tuple[SqlCatalog, dict[str, str]]:
    """The TPC-H tables as Iceberg tables public.<name>; their metadata locations."""
    warehouse = root / "warehouse"
    warehouse.mkdir()
    catalog = SqlCatalog("tpch", uri=f"sqlite:///{root / 'c.db'}", warehouse=warehouse.as_uri())
    catalog.create_namespace("public")
    locations = {}
    for name in TABLES:
        data = source.sql(f"SELECT * FROM {name}").to_arrow_table()
        data = data.cast(data.schema)  # plain string columns for pyiceberg
        table = catalog.create_table(f"public.{name}", data.schema)
        table.append(data)
        locations[name] = catalog.load_table(f"public.{name}").metadata_location
    return catalog, locations


def in_process(locations: dict[str, str]) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(config=dict(offline_config()))
    load_extensions(conn)
    for name, location in locations.items():
        conn.execute(f"CREATE VIEW {name} AS SELECT * FROM iceberg_scan('{location}')")
    return conn


def seconds(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def fetch_local(conn: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    return conn.execute(sql).fetchall()


def fetch_port(conn: psycopg.Connection[Any], sql: str) -> list[Any]:
    return conn.execute(sql).fetchall()


def breakdown(db: LakeDatabase, sql: str, repeat: int) -> dict[str, float]:
    """Best of `repeat` for each step the port takes before the wire (seconds)."""
    session = db.session("bench")
    best: dict[str, float] = {}

    def note(step: str, value: float) -> None:
        best[step] = min(best.get(step, math.inf), value)

    try:
        for _ in range(repeat):
            note("refresh", seconds(db.refresh))  # unchanged watermark: the per-query check
            started = time.perf_counter()
            stmt = sqlparse.parse_sql(sql)[0].stmt
            note("parse", time.perf_counter() - started)
            assert stmt is not None
            note("guard", seconds(partial(session._check, stmt)))
            started = time.perf_counter()
            text, params, names = session._prepare_select(sql, stmt, [])
            note("rewrite", time.perf_counter() - started)
            for step, query, bound in (("execute", text, params), ("plain", sql, [])):
                started = time.perf_counter()
                session._run(query, bound, names, "SELECT").fetch_all()
                note(step, time.perf_counter() - started)
    finally:
        session.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--queries", default="", help="comma-separated query numbers (default: all)"
    )
    args = parser.parse_args()
    chosen = {int(q) for q in args.queries.split(",") if q}
    with tempfile.TemporaryDirectory(prefix="streambed-tpch-") as tmp:
        started = time.perf_counter()
        source, queries = generate(args.sf)
        catalog, locations = write_iceberg(source, Path(tmp))
        source.close()
        queries = [(n, q) for n, q in queries if not chosen or n in chosen]
        took = time.perf_counter() - started
        print(f"TPC-H SF{args.sf}: generated and written as Iceberg in {took:.1f}s")
        db = LakeDatabase(
            DatabaseSettings(warehouse=Path(tmp, "warehouse").as_uri()),
            Static(
                ServedWatermark(lsn=1, tables={("public", n): loc for n, loc in locations.items()})
            ),
        )
        db.refresh()
        server = QueryServer(ServerOptions(port=0), db).start()
        local = in_process(locations)
        wire = psycopg.connect(
            f"host=127.0.0.1 port={server.port} user=bench dbname=streambed sslmode=disable",
            autocommit=True,
        )
        try:
            best_local = {n: math.inf for n, _ in queries}
            best_port = dict(best_local)
            for _ in range(args.repeat):
                for n, sql in queries:
                    best_local[n] = min(best_local[n], seconds(partial(fetch_local, local, sql)))
                    best_port[n] = min(best_port[n], seconds(partial(fetch_port, wire, sql)))
            print(f"best of {args.repeat}, interleaved; port: psycopg text format over TCP\n")
            header = ("refresh", "parse", "guard", "rewrite", "execute", "plain", "wire")
            print(
                f"{'query':<6}{'duckdb':>10}{'port':>10}{'ratio':>8}   "
                + "".join(f"{s:>8}" for s in header)
            )
            ratios = []
            for n, sql in queries:
                ratio = best_port[n] / best_local[n]
                ratios.append(ratio)
                steps = breakdown(db, sql, args.repeat)
                before = sum(steps[s] for s in ("parse", "guard", "rewrite", "execute"))
                rest = best_port[n] - before
                ms = [
                    steps[s] * 1000
                    for s in ("refresh", "parse", "guard", "rewrite", "execute", "plain")
                ]
                local_ms, port_ms = best_local[n] * 1000, best_port[n] * 1000
                print(
                    f"Q{n:<5}{local_ms:>8.1f}ms{port_ms:>8.1f}ms{ratio:>7.2f}x   "
                    + "".join(f"{v:>8.1f}" for v in [*ms, rest * 1000])
                )
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            worst = max(ratios)
            met = mean <= GOAL_MEAN and worst <= GOAL_MAX
            print(
                "\n(steps in ms; execute: the rewritten text, plain: the client's text "
                "unrewritten, both to an Arrow table in the server's session; wire: port - "
                "parse - guard - rewrite - execute)"
            )
            print(
                f"geometric mean port/duckdb: {mean:.2f}x (goal <= {GOAL_MEAN}), "
                f"worst {worst:.2f}x (goal <= {GOAL_MAX}): {'MET' if met else 'NOT MET'}"
            )
        finally:
            wire.close()
            local.close()
            server.stop()
            db.close()
            catalog.engine.dispose()


if __name__ == "__main__":
    main()
