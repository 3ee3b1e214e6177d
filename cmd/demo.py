"""`make demo`: a throwaway Postgres with a small shop, streambed following it, and a writer.

Starts Postgres 15 (wal_level=logical) on a free port with sample tables, runs
`streambed run` against it with the embedded defaults (SQLite catalog, local warehouse in
.demo/), keeps writing orders, and every few seconds shows the same count read from the
source and from the lake through streambed's query port. Ctrl-C stops everything.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.fixtures.postgres import ThrowawayPostgres  # noqa: E402

DEMO_DIR = ROOT / ".demo"
USER, PASSWORD = "demo", "demo"

SAMPLE = """
CREATE SCHEMA shop;
CREATE TABLE shop.customers (id int PRIMARY KEY, name text NOT NULL, city text,
                             created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.orders (id bigint PRIMARY KEY, customer_id int NOT NULL,
                          amount numeric(10,2) NOT NULL, status text NOT NULL,
                          placed_at timestamptz NOT NULL DEFAULT now());
INSERT INTO shop.customers (id, name, city)
  SELECT g, 'customer ' || g, (ARRAY['Lisbon','Oslo','Austin','Kyoto'])[1 + g % 4]
  FROM generate_series(1, 1000) g;
INSERT INTO shop.orders (id, customer_id, amount, status)
  SELECT g, 1 + g % 1000, round((random() * 500)::numeric, 2), 'placed'
  FROM generate_series(1, 20000) g;
"""

QUERY = "SELECT count(*), sum(amount) FROM shop.orders WHERE status = 'placed'"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> None:
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    DEMO_DIR.mkdir()
    port, metrics_port = free_port(), free_port()
    with ThrowawayPostgres() as pg:
        pg.psql(SAMPLE)
        env = {
            **os.environ,
            "STREAMBED_SOURCE_URL": pg.url(),
            "STREAMBED_DATA_DIR": str(DEMO_DIR / "data"),
            "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{port}",
            "STREAMBED_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            "STREAMBED_QUERY_USERS": f"{USER}:{PASSWORD}",
            "STREAMBED_FLUSH_INTERVAL": "1",
        }
        log = (DEMO_DIR / "streambed.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "streambed.cli", "run"], env=env, stderr=log)
        lake_url = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/streambed"
        print(f"source:     {pg.url().replace(pg.password, '***')}")
        print(f"lake:       PGPASSWORD={PASSWORD} psql -h 127.0.0.1 -p {port} -U {USER} streambed")
        print(f"metrics:    http://127.0.0.1:{metrics_port}/metrics")
        print(f"logs:       {DEMO_DIR / 'streambed.log'}")
        print("writing orders into the source; Ctrl-C stops the demo\n")
        stop = False

        def on_signal(signum: int, frame: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        next_id = 20_001
        try:
            with psycopg.connect(pg.url(), autocommit=True) as source:
                while not stop and proc.poll() is None:
                    for _ in range(20):
                        source.execute(
                            "INSERT INTO shop.orders (id, customer_id, amount, status) "
                            "VALUES (%s, %s, %s, 'placed')",
                            (next_id, random.randint(1, 1000), round(random.uniform(1, 500), 2)),
                        )
                        next_id += 1
                    source.execute(
                        "UPDATE shop.orders SET status = 'shipped' WHERE id = %s",
                        (random.randint(1, next_id - 1),),
                    )
                    row = source.execute(QUERY).fetchone()
                    print(f"source {row}   lake {lake_answer(lake_url)}", flush=True)
                    time.sleep(2)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            log.close()
    print("\nstopped; the lake stays in .demo/data")


def lake_answer(url: str) -> object:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute(QUERY).fetchone()
    except psycopg.Error as e:
        return f"(not ready: {str(e).strip().splitlines()[0][:60]})"


if __name__ == "__main__":
    main()
