"""TPC-H through the query port against DuckDB in process, on the same Iceberg tables.

    make bench-tpch_port ARGS="--sf 0.1 [--repeat 3] [--queries 2,8,20,22]"

Generates TPC-H with DuckDB's tpch extension (loaded from the duckdb-extension-tpch wheel,
offline), writes the 8 tables as Iceberg tables (pyiceberg SqlCatalog, local warehouse),
then runs the 22 standard queries, interleaved, best of `--repeat`:

- in process: a plain DuckDB connection with one view per table over `iceberg_scan` of the
  same metadata, the rows fetched as Python tuples;
- through the port: a real QueryServer over a LakeDatabase, psycopg (text format).

Prints per-query times, the ratio port / in-process, the geometric mean and the goal check
(geometric mean <= 1.2, no query above 1.5), and the same ratio in CPU time of the process
(client, server and DuckDB threads), which a loaded machine disturbs less than wall time.
Then, per query, where the port's time goes, measured by calling the session's steps
directly (best of `--repeat` each, after the timed runs): the per-query refresh check,
parse (pglast), guard (allow-list), rewrite (Postgres semantics into DuckDB SQL), the
prepared-statement cache's lookup that replaces those three from the second run of a text
on, DuckDB running the rewritten text to Arrow batches (with the exact quotients the server
computes), the same for the client's text unrewritten (what the rewrite costs in the plan),
encoding the rows as DataRow messages (text format, as psycopg asks), and the rest of the
port's time (the socket, the protocol, psycopg decoding). The timed runs after the first
find the statement prepared; `uncached` estimates the ratios without that cache (port
time plus parse, guard and rewrite).
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

from streambed.server import prepared, sqlparse
from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.extensions import extension_path, load_extensions, offline_config
from streambed.server.wire import results
from streambed.server.wire.server import QueryServer, ServerOptions

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
GOAL_MEAN, GOAL_MAX = 1.2, 1.5


@dataclass
class Static:
    watermark: ServedWatermark

    def latest(self) -> ServedWatermark | None:
        return self.watermark


def generate(sf: float, root: Path) -> tuple[duckdb.DuckDBPyConnection, list[tuple[int, str]]]:
    """An in-memory DuckDB holding TPC-H at scale `sf`, and the 22 queries."""
    conn = duckdb.connect(config=dict(offline_config(str(root / "ext-dbgen"))))
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


def in_process(locations: dict[str, str], root: Path) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(config=dict(offline_config(str(root / "ext-local"))))
    load_extensions(conn)
    for name, location in locations.items():
        conn.execute(f"CREATE VIEW {name} AS SELECT * FROM iceberg_scan('{location}')")
    return conn


def seconds(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def timed(run: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds (this process, all threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fetch_local(conn: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    return conn.execute(sql).fetchall()


def fetch_port(conn: psycopg.Connection[Any], sql: str) -> list[Any]:
    return conn.execute(sql).fetchall()


def encode(columns: list[Any], batches: list[Any]) -> None:
    """The rows as DataRow messages, in text format (what psycopg asks for)."""
    specs = results.column_specs([(c.name, c.pg_type) for c in columns], [])
    encoder = results.BatchEncoder(specs, "UTC")
    for batch in batches:
        encoder.encode(batch)


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
            session._prepared.put(
                session._cache_key(sql), prepared.PreparedSelect(text, tuple(names), None, "SELECT")
            )
            note("cached", seconds(lambda: session._prepared.get(session._cache_key(sql))))
            for step, query, bound in (("execute", text, params), ("plain", sql, [])):
                started = time.perf_counter()
                result = session._run(query, bound, names, "SELECT")
                batches = list(result.batches())
                note(step, time.perf_counter() - started)
                if step == "execute":
                    note("encode", seconds(partial(encode, result.columns, batches)))
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
        source, queries = generate(args.sf, Path(tmp))
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
        local = in_process(locations, Path(tmp))
        wire = psycopg.connect(
            f"host=127.0.0.1 port={server.port} user=bench dbname=streambed sslmode=disable",
            autocommit=True,
        )
        try:
            wall: dict[str, dict[int, float]] = {"duckdb": {}, "port": {}}
            cpu: dict[str, dict[int, float]] = {"duckdb": {}, "port": {}}
            for _ in range(args.repeat):
                for n, sql in queries:
                    for side, run in (
                        ("duckdb", partial(fetch_local, local, sql)),
                        ("port", partial(fetch_port, wire, sql)),
                    ):
                        took, used = timed(run)
                        wall[side][n] = min(wall[side].get(n, math.inf), took)
                        cpu[side][n] = min(cpu[side].get(n, math.inf), used)
            print(
                f"best of {args.repeat}, interleaved; port: psycopg text format over TCP; "
                "cpu: CPU time of this process (client, server and DuckDB threads)\n"
            )
            steps_shown = ("refresh", "parse", "guard", "rewrite", "cached", "execute", "plain")
            header = (*steps_shown, "encode", "wire")
            print(
                f"{'query':<6}{'duckdb':>9}{'port':>9}{'ratio':>7}{'cpu':>7}   "
                + "".join(f"{s:>8}" for s in header)
            )
            ratios, cpu_ratios, uncached = [], [], []
            for n, sql in queries:
                ratio = wall["port"][n] / wall["duckdb"][n]
                cpu_ratio = cpu["port"][n] / cpu["duckdb"][n]
                ratios.append(ratio)
                cpu_ratios.append(cpu_ratio)
                steps = breakdown(db, sql, args.repeat)
                before = sum(steps[s] for s in ("cached", "execute", "encode"))
                rest = wall["port"][n] - before
                ms = [steps[s] * 1000 for s in (*steps_shown, "encode")]
                cold = sum(steps[s] for s in ("parse", "guard", "rewrite"))
                uncached.append((wall["port"][n] + cold) / wall["duckdb"][n])
                local_ms, port_ms = wall["duckdb"][n] * 1000, wall["port"][n] * 1000
                print(
                    f"Q{n:<5}{local_ms:>7.1f}ms{port_ms:>7.1f}ms{ratio:>6.2f}x{cpu_ratio:>6.2f}x   "
                    + "".join(f"{v:>8.1f}" for v in [*ms, rest * 1000])
                )
            mean, worst = geometric_mean(ratios), max(ratios)
            met = mean <= GOAL_MEAN and worst <= GOAL_MAX
            print(
                "\n(steps in ms; cached: the prepared-statement lookup that replaces parse, "
                "guard and rewrite once a text ran; execute: the rewritten text, plain: the "
                "client's text unrewritten, both to Arrow batches in the server's session; "
                "encode: DataRow messages, text format; wire: port - cached - execute - encode)"
            )
            print(
                f"geometric mean port/duckdb: {mean:.2f}x (goal <= {GOAL_MEAN}), "
                f"worst {worst:.2f}x (goal <= {GOAL_MAX}): {'MET' if met else 'NOT MET'}"
            )
            print(
                f"CPU time port/duckdb: geometric mean {geometric_mean(cpu_ratios):.2f}x, "
                f"worst {max(cpu_ratios):.2f}x"
            )
            print(
                "uncached (port + parse + guard + rewrite) / duckdb: geometric mean "
                f"{geometric_mean(uncached):.2f}x, worst {max(uncached):.2f}x"
            )
        finally:
            wire.close()
            local.close()
            server.stop()
            db.close()
            catalog.engine.dispose()


if __name__ == "__main__":
    main()
