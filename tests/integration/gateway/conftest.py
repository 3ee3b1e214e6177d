"""One `streambed run` (with its query port) and one `streambed serve` (same data dir and
catalog, its own port) over a throwaway source database, shared by this package's tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.postgres import ThrowawayPostgres, free_port
from tests.integration.pipeline.harness import StreambedProcess, slot_exists, wait_until

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE SCHEMA shop;
CREATE TABLE shop.customers (
    id int PRIMARY KEY, name text NOT NULL, country varchar(2), joined date
);
CREATE TABLE shop.orders (
    id bigint PRIMARY KEY, customer_id int, amount numeric(12,2), discount numeric(5,3),
    weight double precision, status text, placed_at timestamptz, shipped_at timestamp
);
CREATE SCHEMA ledger;
CREATE TABLE ledger.debits (id bigint PRIMARY KEY, transfer int, account int, amount bigint);
CREATE TABLE ledger.credits (id bigint PRIMARY KEY, transfer int, account int, amount bigint);
CREATE TABLE public.events (id int PRIMARY KEY, note text);
"""


TABLES = ("shop.customers", "shop.orders", "ledger.debits", "ledger.credits", "public.events")
TABLE_COUNT = (
    "SELECT count(*) FROM information_schema.tables "
    "WHERE table_schema IN ('shop', 'ledger', 'public')"
)


CUSTOMERS = 200
ORDERS = 5000

LOAD = [
    f"INSERT INTO shop.customers SELECT g, 'customer ' || g, "
    f"CASE WHEN g % 11 = 0 THEN NULL ELSE (ARRAY['FR','DE','US','JP','BR'])[1 + g % 5] END, "
    f"DATE '2020-01-01' + (g * 37 % 1500) FROM generate_series(1, {CUSTOMERS}) g",
    # customer_id beyond CUSTOMERS (no match) and NULL; amounts with cents; some NULL
    # statuses and weights; timestamps on both sides of midnight and of DST changes
    f"INSERT INTO shop.orders SELECT g, CASE WHEN g % 97 = 0 THEN NULL ELSE 1 + g * 11 % "
    f"({CUSTOMERS} + 10) END, (g * 7919 % 100000) / 100.0, (g % 13) / 40.0, "
    f"CASE WHEN g % 17 = 0 THEN NULL ELSE (g * 31 % 1000) / 8.0 END, "
    f"CASE WHEN g % 23 = 0 THEN NULL ELSE (ARRAY['new','paid','shipped','returned'])"
    f"[1 + g % 4] END, TIMESTAMPTZ '2024-03-30 20:00:00+00' + g * interval '17 minutes', "
    f"TIMESTAMP '2024-01-01 00:00:00' + g * interval '1 hour 3 minutes 5.25 seconds' "
    f"FROM generate_series(1, {ORDERS}) g",
]


class ServeProcess(StreambedProcess):
    """`python -m streambed.cli serve`."""

    def start(self, extra_env: object = None) -> ServeProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streambed.cli", "serve"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self


@dataclass
class Gateway:
    source_url: str
    run_port: int  # `streambed run`'s query port
    serve_port: int  # `streambed serve`'s query port
    run: StreambedProcess
    serve: ServeProcess
    data_dir: Path

    def conninfo(self, port: int | None = None) -> str:
        return (
            f"host=127.0.0.1 port={port or self.run_port} user=streambed dbname=streambed "
            "sslmode=disable connect_timeout=10"
        )

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


@pytest.fixture(scope="package")
def gateway(
    pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    name = "gw_" + uuid.uuid4().hex[:10]
    pg_server.create_database(name)
    root = tmp_path_factory.mktemp("gateway")
    url = pg_server.url(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    run_port, serve_port = free_port(), free_port()
    env = {
        "STREAMBED_SOURCE_URL": url,
        "STREAMBED_DATA_DIR": str(root / "data"),
        "STREAMBED_FLUSH_INTERVAL": "0.3",
        "STREAMBED_HEARTBEAT_INTERVAL": "2",
        "STREAMBED_SPARK_MASTER": "local[1]",
        "STREAMBED_LOG_LEVEL": "info",
    }
    run = StreambedProcess(
        {**env, "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{run_port}"}, root / "run.log"
    )
    serve = ServeProcess(
        {**env, "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{serve_port}"}, root / "serve.log"
    )
    gw = Gateway(url, run_port, serve_port, run, serve, root / "data")
    try:
        run.start()
        wait_until(lambda: slot_exists(url), 180, "the replication slot", run)
        # every table's initial copy (Spark) has committed: all five are queryable
        wait_until(
            lambda: lake_has(gw.conninfo(), TABLE_COUNT, len(TABLES)),
            300,
            "the initial copies",
            run,
        )
        serve.start()
        wait_until(
            lambda: lake_has(gw.conninfo(serve_port), TABLE_COUNT, len(TABLES)),
            60,
            "streambed serve",
            serve,
        )
        yield gw
    finally:
        for proc in (serve, run):
            if proc.running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.stop(60)
            proc.kill()
        if not pg_server.removed and pg_server.running:
            pg_server.drop_database(name)


def lake_has(conninfo: str, sql: str, expected: object) -> bool:
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == expected


@pytest.fixture(scope="package")
def loaded(gateway: Gateway) -> Gateway:
    gateway.execute(*LOAD)
    wait_until(
        lambda: lake_has(gateway.conninfo(), "SELECT count(*) FROM shop.orders", ORDERS),
        120,
        "the orders in the lake",
        gateway.run,
    )
    return gateway
