"""Query overhead of the wire server: the same queries through psycopg over the wire, in
process through the LakeDatabase (same Iceberg tables, same views), and against a source
Postgres holding the same rows.

    PYTHONPATH=. .venv/bin/python bench/query_overhead.py [--rows 200000] [--repeat 5]
        [--server-process]

Prints the median time per query and the ratios wire / in-process (target: <= 1.2 for results
up to 100k rows) and Postgres / wire (the speedup of reading the lake instead of the source).
In-process means: execute in the LakeDatabase session and turn the Arrow result into Python
tuples, which is what a client gets at the end of the wire too.

By default the wire server runs in the benchmark's own process, so the psycopg client and
the server's threads share one GIL; `--server-process` runs it in a child process over the
same warehouse (as `streambed serve` runs beside its clients).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.wire.server import QueryServer, ServerOptions
from tests.fixtures.postgres import ThrowawayPostgres  # run from the repository root

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "customer", StringType()),
    NestedField(3, "amount", DecimalType(12, 2)),
    NestedField(4, "qty", IntegerType()),
    NestedField(5, "score", DoubleType()),
    NestedField(6, "day", DateType()),
    NestedField(7, "created_at", TimestamptzType()),
    identifier_field_ids=[1],
)

QUERIES = [
    ("point lookup", "SELECT * FROM public.orders WHERE id = 4242"),
    ("aggregate", "SELECT customer, count(*), sum(amount) FROM orders GROUP BY 1 ORDER BY 1"),
    ("1k rows", "SELECT * FROM public.orders ORDER BY id LIMIT 1000"),
    ("10k rows", "SELECT * FROM public.orders ORDER BY id LIMIT 10000"),
    ("100k rows", "SELECT * FROM public.orders ORDER BY id LIMIT 100000"),
]  # fmt: skip


def rows(n: int) -> pa.Table:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    ids = list(range(1, n + 1))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": [f"customer {i % 500}" for i in ids],
            "amount": pa.array(
                [decimal.Decimal(i % 100000) / 100 for i in ids], pa.decimal128(12, 2)
            ),
            "qty": pa.array([i % 37 for i in ids], pa.int32()),
            "score": [i / 7 for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 700) for i in ids],
            "created_at": pa.array(
                [base + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us", "UTC")
            ),
        },
        schema=SCHEMA.as_arrow(),
    )


@dataclass
class Static:
    watermark: ServedWatermark

    def latest(self) -> ServedWatermark | None:
        return self.watermark


def _serve_in_child(
    warehouse: str, location: str, ports: multiprocessing.Queue[int], stop: Any
) -> None:
    db = LakeDatabase(
        DatabaseSettings(warehouse=warehouse),
        Static(ServedWatermark(lsn=1, tables={("public", "orders"): location})),
    )
    db.refresh()
    server = QueryServer(ServerOptions(port=0), db).start()
    ports.put(server.port)
    stop.wait()
    server.stop()
    db.close()


def median_seconds(run: Callable[[], Any], repeat: int) -> float:
    run()  # warm up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def load_postgres(pg: ThrowawayPostgres, data: pa.Table) -> None:
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), "
            "qty int, score float8, day date, created_at timestamptz)"
        )
        with conn.cursor().copy("COPY orders FROM STDIN") as copy:
            for row in zip(*(c.to_pylist() for c in data.columns), strict=True):
                copy.write_row(row)
        conn.execute("ANALYZE orders")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--server-process",
        action="store_true",
        help="run the wire server in a child process instead of a thread of this one",
    )
    args = parser.parse_args()
    data = rows(args.rows)
    with tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp:
        root = Path(tmp)
        warehouse = root / "warehouse"
        warehouse.mkdir()
        catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root / 'c.db'}", warehouse=warehouse.as_uri()
        )
        catalog.create_namespace("public")
        table = catalog.create_table("public.orders", SCHEMA)
        table.append(data)
        location = catalog.load_table("public.orders").metadata_location
        db = LakeDatabase(
            DatabaseSettings(warehouse=warehouse.as_uri()),
            Static(ServedWatermark(lsn=1, tables={("public", "orders"): location})),
        )
        db.refresh()
        child: multiprocessing.process.BaseProcess | None = None
        server: QueryServer | None = None
        stop: Any = None
        if args.server_process:
            spawn = multiprocessing.get_context("spawn")
            ports: multiprocessing.Queue[int] = spawn.Queue()
            stop = spawn.Event()
            child = spawn.Process(
                target=_serve_in_child, args=(warehouse.as_uri(), location, ports, stop)
            )
            child.start()
            port = ports.get(timeout=120)
        else:
            server = QueryServer(ServerOptions(port=0), db).start()
            port = server.port
        pg = ThrowawayPostgres()
        pg.start()
        try:
            load_postgres(pg, data)
            session = db.session()
            wire = psycopg.connect(
                f"host=127.0.0.1 port={port} user=bench dbname=streambed sslmode=disable",
                autocommit=True,
            )
            source = psycopg.connect(pg.url(), autocommit=True)
            where = "a child process" if child is not None else "this process"
            print(
                f"{args.rows} rows; median of {args.repeat} runs after one warm-up; "
                f"server in {where}\n"
            )
            header = (
                f"{'query':<14}{'in-process':>12}{'wire text':>12}{'wire bin':>12}{'postgres':>12}"
            )
            print(header + f"{'wire/inproc':>13}{'bin/inproc':>12}{'pg/wire':>9}")
            for name, sql in QUERIES:
                runs: list[Callable[[], object]] = [
                    partial(lambda q: session.execute(q).rows(), sql),
                    partial(lambda q: wire.execute(q).fetchall(), sql),
                    partial(lambda q: wire.cursor(binary=True).execute(q).fetchall(), sql),
                    partial(lambda q: source.execute(q).fetchall(), sql),
                ]
                inproc, text, binary, postgres = (median_seconds(r, args.repeat) for r in runs)
                times = "".join(f"{t * 1000:>10.1f}ms" for t in (inproc, text, binary, postgres))
                print(
                    f"{name:<14}{times}{text / inproc:>12.2f}x{binary / inproc:>11.2f}x"
                    f"{postgres / text:>8.2f}x"
                )
            wire.close()
            source.close()
            session.close()
        finally:
            pg.stop()
            if server is not None:
                server.stop()
            if child is not None:
                stop.set()
                child.join(60)
            db.close()
            catalog.engine.dispose()


if __name__ == "__main__":
    main()
