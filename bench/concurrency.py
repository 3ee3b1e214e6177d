"""Concurrent clients against the query server over real Iceberg tables: N psycopg clients
(default 32) each run a mix of queries (point lookups, aggregates, joins, 1k-row scans,
prepared statements with parameters, binary results) for a fixed time.

    PYTHONPATH=. .venv/bin/python bench/concurrency.py [--clients 32] [--seconds 60]

Prints queries/s, latency percentiles, errors and lost connections; the last two must be 0
(the exit status is 1 otherwise).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from pyiceberg.catalog.sql import SqlCatalog

from bench.query_overhead import SCHEMA, Static, rows
from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.wire.server import QueryServer, ServerOptions

MIX = [
    ("SELECT * FROM public.orders WHERE id = %s", lambda r: [r.randint(1, 100_000)]),
    ("SELECT customer, count(*), sum(amount) FROM orders GROUP BY 1 ORDER BY 2 DESC LIMIT 5", None),
    ("SELECT * FROM public.orders WHERE id > %s ORDER BY id LIMIT 1000",
     lambda r: [r.randint(1, 90_000)]),
    ("SELECT day, avg(score), max(created_at) FROM orders WHERE qty = %s GROUP BY day ORDER BY day",
     lambda r: [r.randint(0, 36)]),
    ("SELECT a.customer, count(*) FROM orders a JOIN orders b ON a.id = b.id + 1 "
     "WHERE a.id < %s GROUP BY 1 ORDER BY 1", lambda r: [r.randint(100, 5000)]),
    ("SELECT count(*) FROM orders WHERE customer = %s AND day >= %s",
     lambda r: [f"customer {r.randint(0, 499)}", "2024-06-01"]),
]  # fmt: skip


def client(
    port: int, seed: int, until: float, latencies: list[float], errors: list[str], lost: list[str]
) -> None:
    rng = random.Random(seed)
    try:
        conn = psycopg.connect(
            f"host=127.0.0.1 port={port} user=bench dbname=streambed sslmode=disable",
            autocommit=True,
        )
    except psycopg.Error as e:
        lost.append(f"connect: {e}")
        return
    with conn:
        while time.monotonic() < until:
            sql, make = rng.choice(MIX)
            started = time.perf_counter()
            try:
                cur = conn.cursor(binary=rng.random() < 0.3)
                cur.execute(sql, make(rng) if make else None, prepare=rng.random() < 0.5)
                cur.fetchall()
            except psycopg.OperationalError as e:
                lost.append(str(e))
                return
            except psycopg.Error as e:
                errors.append(f"{sql[:40]}: {e}")
                continue
            latencies.append(time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp:
        root = Path(tmp)
        warehouse = root / "warehouse"
        warehouse.mkdir()
        catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root / 'c.db'}", warehouse=warehouse.as_uri()
        )
        catalog.create_namespace("public")
        table = catalog.create_table("public.orders", SCHEMA)
        data = rows(args.rows)
        for start in range(0, args.rows, 25_000):  # several data files, as a lake has
            table.append(data.slice(start, 25_000))
        location = catalog.load_table("public.orders").metadata_location
        db = LakeDatabase(
            DatabaseSettings(warehouse=warehouse.as_uri()),
            Static(ServedWatermark(lsn=1, tables={("public", "orders"): location})),
        )
        db.refresh()
        server = QueryServer(ServerOptions(port=0), db).start()
        latencies: list[float] = []
        errors: list[str] = []
        lost: list[str] = []
        try:
            until = time.monotonic() + args.seconds
            threads = [
                threading.Thread(
                    target=client, args=(server.port, i, until, latencies, errors, lost)
                )
                for i in range(args.clients)
            ]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
        finally:
            server.stop()
            db.close()
            catalog.engine.dispose()
    ordered = sorted(latencies) or [0.0]
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"{args.clients} clients, {elapsed:.0f} s, {args.rows} rows: "
        f"{len(latencies)} queries, {len(latencies) / elapsed:.1f} queries/s, "
        f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"errors {len(errors)}, lost connections {len(lost)}"
    )
    for problem in (errors + lost)[:10]:
        print("  " + problem)
    return 1 if errors or lost else 0


if __name__ == "__main__":
    sys.exit(main())
