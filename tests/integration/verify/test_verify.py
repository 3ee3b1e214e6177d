"""`streambed verify` against one real `streambed run`: equal under a concurrent write load,
a lake made to diverge (changes the slot skipped, a data file damaged) found and named, a
keyless table compared as a multiset."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFileContent

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.state.store import StateStore
from tests.fixtures.postgres import ThrowawayPostgres
from tests.integration.pipeline.harness import StreambedProcess, slot_exists, wait_until

SLOT = "verify_slot"

SCHEMA = """
CREATE TABLE public.typed (
    id int PRIMARY KEY, amount numeric(12,3), free numeric, f8 double precision, f4 real,
    at timestamptz, ts timestamp, d date, tags text[], doc jsonb, raw json, data bytea,
    u uuid, iv interval, note text, flag bool, code char(6), ip inet, net cidr, bits bit(3)
);
CREATE TABLE public.load (id bigint PRIMARY KEY, n int, note text);
CREATE TABLE public.bag (a int, b text);
ALTER TABLE public.bag REPLICA IDENTITY FULL;
INSERT INTO public.typed VALUES
    (1, 1.5, 'NaN', 'NaN', '-0', '2024-03-31 01:30:00+02', '0044-03-15 12:00:00 BC',
     'infinity', '{"a,b",NULL,"q\\"uote"}', '{"b": [1, 2.50], "a": null}', '{"z":  1}',
     '\\x00ff2c', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1 year 2 mons -3 days 04:05:06.5',
     'comma, "quote" and ''apostrophe''', true, 'ab', '10.1.2.3', '10.1.0.0/16', B'101'),
    (2, -0.001, '1e-20', 'Infinity', 3.4e38, 'infinity', '2000-01-01', '-infinity', '{}',
     '[]', 'null', '\\x', NULL, '0', '', false, '', '::1', '::/0', B'000'),
    (3, NULL, NULL, 0.1, -1.5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL),
    (4, 0, 0, 0, 0, NULL, NULL, NULL, '{"(a)","b c",""}', '{"k": "t\\tab"}', '" \\\\ "', NULL,
     NULL, NULL, E'tab\\t nl\\n vt\\x0b ff\\f cr\\r back\\\\ (paren) é', NULL, ' ', NULL, NULL,
     NULL);
INSERT INTO public.load SELECT g, g, 'row ' || g FROM generate_series(1, 2000) g;
INSERT INTO public.bag VALUES (1, 'x'), (1, 'x'), (2, 'y'), (NULL, NULL);
"""
TABLES = ("public.typed", "public.load", "public.bag")


@dataclass
class Deployment:
    url: str
    env: dict[str, str]
    proc: StreambedProcess

    def verify(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streambed.cli", "verify", "--timeout", "120", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


def _ready(settings: Settings) -> bool:
    if not settings.state_path.exists():
        return False
    with StateStore(settings.state_path) as state:
        tables = {t.qualified: t.status for t in state.tables()}
    return all(tables.get(t) == "ready" for t in TABLES)


@pytest.fixture(scope="module")
def deployment(
    pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    name = "verify_" + uuid.uuid4().hex[:10]
    pg_server.create_database(name)
    root = tmp_path_factory.mktemp("verify")
    url = pg_server.url(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = {
        "STREAMBED_SOURCE_URL": url,
        "STREAMBED_DATA_DIR": str(root / "data"),
        "STREAMBED_QUERY_LISTEN": "",
        "STREAMBED_SLOT": SLOT,
        "STREAMBED_FLUSH_INTERVAL": "0.3",
        "STREAMBED_HEARTBEAT_INTERVAL": "1",
        "STREAMBED_SPARK_MASTER": "local[1]",
        "STREAMBED_LOG_LEVEL": "info",
    }
    proc = StreambedProcess(env, root / "run.log")
    settings = Settings.from_env(env)
    try:
        proc.start()
        wait_until(lambda: slot_exists(url, SLOT), 180, "the replication slot", proc)
        wait_until(lambda: _ready(settings), 300, "the initial copies", proc)
        yield Deployment(url, env, proc)
    finally:
        if proc.running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.stop(60)
        proc.kill()
        if not pg_server.removed and pg_server.running:
            with contextlib.suppress(psycopg.Error):
                pg_server.drop_database(name)


class WriteLoad(threading.Thread):
    """Inserts, updates (of values and keys) and deletes on public.load, public.typed and
    the keyless public.bag until stopped, a few rows per transaction."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stopping = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(7)
        next_id = 100_000
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.stopping.is_set():
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO public.load VALUES (%s, %s, 'new')", (next_id, next_id)
                        )
                        conn.execute(
                            "UPDATE public.load SET n = n + 1, note = 'upd' WHERE id = %s",
                            (rng.randint(1, 2000),),
                        )
                        conn.execute(
                            "DELETE FROM public.load WHERE id = %s", (rng.randint(1, 2000),)
                        )
                        # a row updated by every transaction: always in flight at the cut
                        conn.execute("UPDATE public.typed SET f4 = f4 + 1 WHERE id = 3")
                        if next_id % 10 == 0:  # the keyless table: duplicates come and go
                            conn.execute("INSERT INTO public.bag VALUES (3, 'z'), (3, 'z')")
                            conn.execute(
                                "DELETE FROM public.bag WHERE ctid = "
                                "(SELECT min(ctid) FROM public.bag WHERE a = 3)"
                            )
                        if next_id % 25 == 0:  # a key changes
                            conn.execute(
                                "UPDATE public.load SET id = id + 1000000 WHERE id = %s",
                                (rng.randint(1, 2000),),
                            )
                    next_id += 1
                    self.transactions += 1
        except BaseException as e:  # reported by the test
            self.error = e


def test_equal_under_concurrent_writes(deployment: Deployment) -> None:
    load = WriteLoad(deployment.url)
    load.start()
    try:
        wait_until(lambda: load.transactions > 20, 30, "the write load")
        result = deployment.verify()
        during = load.transactions
    finally:
        load.stopping.set()
        load.join(30)
    assert load.error is None, load.error
    assert during > 20
    assert result.returncode == 0, result.stdout + result.stderr
    for table in TABLES:
        assert f"{table}: " in result.stdout and "equal" in result.stdout
    assert "verified 3 tables" in result.stdout and "3 equal, 0 differ" in result.stdout


def test_bad_names_and_timeout(deployment: Deployment) -> None:
    result = deployment.verify("public.nope")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "public.nope is not a table streambed replicates" in result.stderr
    result = deployment.verify("nope")
    assert result.returncode == 2
    assert "schema-qualified" in result.stderr


def test_table_being_copied_is_waited_for(deployment: Deployment) -> None:
    """A resync requested just before: verify waits for the copy, then compares."""
    requested = subprocess.run(
        [sys.executable, "-m", "streambed.cli", "resync", "public.load"],
        env={**os.environ, **deployment.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert requested.returncode == 0, requested.stdout + requested.stderr
    deployment.execute("INSERT INTO public.load VALUES (-1, -1, 'during the copy')")
    result = deployment.verify("public.load")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "public.load: " in result.stdout and "1 equal, 0 differ" in result.stdout


def _live_row(table: object) -> tuple[Path, int]:
    """A data file of the table's current snapshot and the position of a row in it that no
    position-delete file removes (the lake may be merge-on-read)."""
    for task in table.scan().plan_files():  # type: ignore[attr-defined]
        path = Path(task.file.file_path.removeprefix("file://"))
        deleted: set[int] = set()
        for delete in task.delete_files:
            assert delete.content == DataFileContent.POSITION_DELETES, delete.content
            positions = pq.read_table(delete.file_path.removeprefix("file://")).to_pylist()
            deleted |= {int(r["pos"]) for r in positions if r["file_path"] == task.file.file_path}
        live = [i for i in range(task.file.record_count) if i not in deleted]
        if live:
            return path, live[len(live) // 2]
    raise AssertionError("the table has no live row in the lake")


def test_damaged_lake_file_is_named(deployment: Deployment) -> None:
    """A data file of public.load rewritten with one value changed, its Iceberg metadata
    left as it was: verify names the key, what each side holds and the resync to run."""
    table = open_catalog(Settings.from_env(deployment.env)).load_table(("public", "load"))
    path, position = _live_row(table)
    original = path.read_bytes()
    data = pq.read_table(path)
    key = data.column("id")[position].as_py()
    notes = data.column("note").to_pylist()
    notes[position] = "damaged in the lake"
    column = data.schema.get_field_index("note")
    damaged = data.set_column(
        column, data.schema.field(column), pa.array(notes, data.schema.field(column).type)
    )
    with psycopg.connect(deployment.url, autocommit=True) as conn:
        row = conn.execute("SELECT n, note FROM public.load WHERE id = %s", (key,)).fetchone()
    assert row is not None
    written = path.with_name(path.name + ".damaged")
    pq.write_table(damaged, written)
    os.replace(written, path)
    try:
        result = deployment.verify("public.load", "public.typed")
    finally:
        written.write_bytes(original)
        os.replace(written, path)
    out = result.stdout
    assert result.returncode == 3, out + result.stderr
    assert "public.load: DIFFERS" in out and "public.typed: " in out, out
    assert f"key ('{key}'):" in out, out
    assert f"source: ('{key}', '{row[0]}', {row[1]!r})" in out, out
    assert f"lake:   ('{key}', '{row[0]}', 'damaged in the lake')" in out, out
    assert "streambed resync public.load" in out
    assert "streambed resync public.typed" not in out
    assert "1 equal, 1 differ" in out


def test_diverged_lake_is_named(deployment: Deployment) -> None:
    """Changes the slot was advanced past never reach the lake: verify finds each one."""
    assert deployment.proc.stop(60) == 0
    with psycopg.connect(deployment.url, autocommit=True) as conn:
        row = conn.execute("SELECT min(id) FROM public.load").fetchone()
    assert row is not None
    gone = int(row[0])
    deployment.execute(
        "UPDATE public.typed SET note = 'changed behind its back' WHERE id = 2",
        f"DELETE FROM public.load WHERE id = {gone}",
        "DELETE FROM public.bag WHERE ctid = (SELECT min(ctid) FROM public.bag WHERE a = 1)",
        f"SELECT pg_replication_slot_advance('{SLOT}', pg_current_wal_lsn())",
    )
    deployment.proc.start()
    wait_until(lambda: _active(deployment.url), 120, "streaming again", deployment.proc)
    result = deployment.verify()
    assert result.returncode == 3, result.stdout + result.stderr
    out = result.stdout
    assert "public.typed: DIFFERS" in out, out + result.stderr
    assert "key ('2'):" in out
    assert "'changed behind its back'" in out
    assert "public.load: DIFFERS" in out and f"key ('{gone}'):" in out
    assert "source: no such row" in out
    # the keyless table: one of the two copies of (1, 'x') is missing from the source
    assert "public.bag: DIFFERS" in out and "lake:   ('1', 'x') (2 times)" in out
    for table in TABLES:
        assert f"streambed resync {table}" in out
    assert "0 equal, 3 differ" in out
    # one named table is compared alone
    alone = deployment.verify("public.load")
    assert alone.returncode == 3 and "verified 1 tables" in alone.stdout


def _active(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
        ).fetchone()
    return row is not None and bool(row[0])


def test_lake_not_reaching_the_lsn(deployment: Deployment, tmp_path: Path) -> None:
    """With replication stopped, the lake never reaches the snapshot's LSN: a clear error."""
    assert deployment.proc.stop(60) == 0
    try:
        result = subprocess.run(
            [sys.executable, "-m", "streambed.cli", "verify", "--timeout", "2"],
            env={**os.environ, **deployment.env},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        deployment.proc.start()
    assert result.returncode == 3, result.stdout + result.stderr
    assert "did not reach the source's LSN" in result.stderr
