"""`streambed run` serves queries from a child process: a crash there (DuckDB segfaulting on a
query) ends that process's sessions only; the parent logs and counts it, starts a new one on
the same port, and replicates throughout. The child ends with its parent, however the
parent ends."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from streambed.core.config import Settings
from streambed.core.listen import listen
from streambed.server.supervisor import QuerySupervisor, RestartBackoff, start_query_process
from tests.fixtures.postgres import ThrowawayPostgres, free_port
from tests.integration.gateway.conftest import lake_has
from tests.integration.pipeline.harness import StreambedProcess, wait_until

pytestmark = pytest.mark.integration

ROWS = 3
COUNT = "SELECT count(*) FROM public.notes"


@dataclass
class Isolated:
    source_url: str
    port: int
    run: StreambedProcess

    @property
    def conninfo(self) -> str:
        return (
            f"host=127.0.0.1 port={self.port} user=streambed dbname=streambed "
            "sslmode=disable connect_timeout=20"
        )

    def execute(self, statement: str) -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            conn.execute(statement)

    def source_count(self) -> int:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            row = conn.execute(COUNT).fetchone()
        assert row is not None
        return int(row[0])

    def running(self) -> Isolated:
        """Started (again, after a test ended it) and serving every source row."""
        if not self.run.running:
            self.run.start()
        expected = self.source_count()
        wait_until(lambda: lake_has(self.conninfo, COUNT, expected), 240, "the rows", self.run)
        return self


@pytest.fixture(scope="module")
def isolated(
    pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Isolated]:
    name = "iso_" + uuid.uuid4().hex[:10]
    pg_server.create_database(name)
    root = tmp_path_factory.mktemp("isolation")
    url = pg_server.url(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.notes (id int PRIMARY KEY, note text)")
        conn.execute(
            f"INSERT INTO public.notes SELECT g, 'n' || g FROM generate_series(1, {ROWS}) g"
        )
    port = free_port()
    env = {
        "STREAMBED_SOURCE_URL": url,
        "STREAMBED_SLOT": name,  # slots are the cluster's: the package's `streambed run` has one
        "STREAMBED_DATA_DIR": str(root / "data"),
        "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{port}",
        "STREAMBED_FLUSH_INTERVAL": "0.3",
        "STREAMBED_HEARTBEAT_INTERVAL": "2",
        "STREAMBED_SPARK_MASTER": "local[1]",
        "STREAMBED_LOG_LEVEL": "info",
    }
    run = StreambedProcess(env, root / "run.log")
    try:
        yield Isolated(url, port, run)
    finally:
        if run.running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.stop(60)
        run.kill()
        if not pg_server.removed and pg_server.running:
            pg_server.drop_database(name)


def query_processes(parent: int) -> list[int]:
    """The query processes `parent` started (its other children: Spark's JVM)."""
    pids = []
    for children in Path(f"/proc/{parent}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids += [int(pid) for pid in children.read_text().split()]
    return [pid for pid in pids if "streambed.server.process" in _cmdline(pid)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _environment(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie nobody reaped yet has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def only_query_process(iso: Isolated) -> int:
    assert iso.run.proc is not None
    pids: list[int] = []

    def found() -> bool:
        pids[:] = query_processes(iso.run.proc.pid)  # type: ignore[union-attr]
        return len(pids) == 1

    wait_until(found, 30, "a single query process", iso.run)
    return pids[0]


def logged_since(iso: Isolated, offset: int) -> str:
    return iso.run.logs()[offset:]


def test_a_crashed_query_process_is_restarted_while_replication_goes_on(
    isolated: Isolated,
) -> None:
    iso = isolated.running()
    assert iso.run.proc is not None
    parent = iso.run.proc.pid
    child = only_query_process(iso)
    scratch = _environment(child)["TMPDIR"]  # DuckDB's scratch and spill files go there
    assert Path(scratch).is_dir()
    before = iso.source_count()
    offset = len(iso.run.logs())
    with psycopg.connect(iso.conninfo, autocommit=True) as session:
        assert session.execute(COUNT).fetchone() == (before,)
        os.kill(child, signal.SIGSEGV)  # what a DuckDB crash does to the process
        wait_until(lambda: gone(child), 10, "the query process to die")
        with pytest.raises(psycopg.OperationalError):
            session.execute("SELECT 1").fetchone()
    # a client connecting while no query process runs waits in the port's backlog, and the
    # next process serves it
    with psycopg.connect(iso.conninfo, autocommit=True) as waiting:
        assert waiting.execute(COUNT).fetchone() == (before,)
    # replication goes on: rows inserted after the crash reach the lake and the new
    # process serves them, on the same port
    iso.execute(f"INSERT INTO public.notes VALUES ({before + 1}, 'after the crash')")
    wait_until(lambda: lake_has(iso.conninfo, COUNT, before + 1), 120, "the new row", iso.run)
    with psycopg.connect(iso.conninfo, autocommit=True) as session:
        row = session.execute("SELECT note FROM public.notes WHERE id = %s", [before + 1])
        assert row.fetchone() == ("after the crash",)
    logs = logged_since(iso, offset)
    exited = re.search(r"query process exited.*", logs)
    assert exited is not None, logs
    assert f"pid={child} signal=sigsegv" in exited[0]
    assert "restarts=1 " in exited[0]
    started = re.search(r"query process started pid=(\d+) restarts=1\b", logs)
    assert started is not None, logs
    assert iso.run.running and iso.run.proc.pid == parent
    assert only_query_process(iso) == int(started[1]) != child
    assert not Path(scratch).exists()  # the crashed process's files are removed for it
    # the commits of the running pipeline reach the new process: each shows at once
    iso.execute(f"INSERT INTO public.notes VALUES ({before + 2}, 'next')")
    wait_until(lambda: lake_has(iso.conninfo, COUNT, before + 2), 30, "the next row", iso.run)


# What a hostile or careless client sends (issue 39's list), each refused with an error
HOSTILE = [
    ("SELECT * FROM pandas_scan(NULL)", "42501"),  # segfaults a plain DuckDB
    ("SELECT * FROM arrow_scan(NULL, NULL, NULL)", "42501"),
    ("SELECT * FROM enable_logging(storage := 'memory')", "42501"),
    ("SELECT message FROM duckdb_logs()", "42501"),
    ("SELECT * FROM enable_profiling(save_location := '/tmp/x')", "42501"),
    ("SELECT * FROM duckdb_settings()", "42501"),
    ("SELECT * FROM duckdb_views()", "42501"),
    ("FROM \"query\"('select 42')", "42601"),
    ("SELECT * FROM \"query\"('select 42')", "42501"),
    ("SELECT json_execute_serialized_sql('{}')", "42501"),
    ("SELEC 1", "42601"),
    ("DESCRIBE public.notes", "42601"),
    ("install httpfs", "42601"),
    ("pragma threads = 1", "42601"),
    ("SELECT * FROM read_csv('/etc/passwd')", "42501"),
    ("COPY public.notes TO '/tmp/notes.csv'", "25006"),
    ("DELETE FROM public.notes", "25006"),
]


def test_hostile_queries_are_refused_and_replication_goes_on(isolated: Isolated) -> None:
    iso = isolated.running()
    assert iso.run.proc is not None
    child = only_query_process(iso)
    before = iso.source_count()
    with psycopg.connect(iso.conninfo, autocommit=True) as session:
        for sql, sqlstate in HOSTILE:
            with pytest.raises(psycopg.Error) as refused:
                session.execute(sql.encode())
            assert refused.value.sqlstate == sqlstate, sql
            assert session.execute("SELECT 1").fetchone() == (1,), sql
    # protocol garbage before the startup packet closes that connection only
    with socket.create_connection(("127.0.0.1", iso.port), timeout=10) as raw:
        raw.sendall(b"\x00\x00\x00\x08garbage!" * 4)
        raw.settimeout(10)
        with contextlib.suppress(OSError):
            while raw.recv(4096):
                pass
    # the same query process still serves, and the stream still reaches it
    assert only_query_process(iso) == child
    iso.execute(f"INSERT INTO public.notes VALUES ({before + 1}, 'after the hostile ones')")
    wait_until(lambda: lake_has(iso.conninfo, COUNT, before + 1), 60, "the new row", iso.run)


def test_sigterm_stops_the_query_process_without_restarting_it(isolated: Isolated) -> None:
    iso = isolated.running()
    child = only_query_process(iso)
    offset = len(iso.run.logs())
    assert iso.run.stop(60) == 0
    assert gone(child)
    logs = logged_since(iso, offset)
    assert f"query process stopped pid={child} exit_code=0" in logs, logs
    assert "query process exited" not in logs and "query process started" not in logs, logs


def test_the_query_process_ends_with_its_killed_parent(isolated: Isolated) -> None:
    iso = isolated.running()
    child = only_query_process(iso)
    scratch = _environment(child)["TMPDIR"]
    iso.run.kill()  # SIGKILL: the parent cleans nothing up
    wait_until(lambda: gone(child), 30, "the query process to end")
    assert not Path(scratch).exists()  # the child removed its own files
    # no process holds the port any more: the next `streambed run` can have it
    with socket.create_server(("127.0.0.1", iso.port)):
        pass


# ---- the supervisor alone: a query process over an empty lake, no source needed ----------


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "STREAMBED_DATA_DIR": str(tmp_path / "data"),
            "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{free_port()}",
        }
    )


def _answers(conninfo: str) -> bool:
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.Error:
        return False


def test_commits_never_wait_for_a_stalled_query_process(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    supervisor = start_query_process(settings)
    assert supervisor is not None and settings.query_host_port is not None
    conninfo = (
        f"host=127.0.0.1 port={settings.query_host_port[1]} user=streambed "
        "dbname=streambed connect_timeout=20"
    )
    try:
        wait_until(lambda: _answers(conninfo), 60, "the query process")
        child = supervisor.pid
        assert child is not None
        os.kill(child, signal.SIGSTOP)  # reads nothing: its pipe fills up
        try:

            def notify() -> None:
                for lsn in range(200_000):  # far more than a pipe holds
                    supervisor.notify(lsn)

            notifying = threading.Thread(target=notify)
            notifying.start()
            notifying.join(30)
            assert not notifying.is_alive(), "notify blocked on a full pipe"
        finally:
            os.kill(child, signal.SIGCONT)
        assert _answers(conninfo)
        assert supervisor.pid == child and supervisor.restarts == 0
    finally:
        supervisor.stop()


def test_a_query_process_that_cannot_start_is_retried_at_the_capped_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # what the parent checks before it starts the first process, gone since
    settings = dataclasses.replace(
        _settings(tmp_path), query_users_file=str(tmp_path / "removed-users")
    )
    assert settings.query_host_port is not None
    caplog.set_level(logging.INFO, "streambed.server")
    supervisor = QuerySupervisor(
        settings, listen(*settings.query_host_port), RestartBackoff(first=0.01, cap=0.01)
    ).start()
    try:
        wait_until(lambda: supervisor.restarts >= 2, 120, "two restarts")
    finally:
        supervisor.stop()
    exits = [r for r in caplog.records if r.getMessage().startswith("query process exited")]
    assert [vars(r)["fields"]["exit_code"] for r in exits[:2]] == [2, 2]
    assert [vars(r)["fields"]["restarts"] for r in exits[:2]] == [1, 2]
    keeps = [r for r in caplog.records if "keeps exiting" in r.getMessage()]
    assert keeps and vars(keeps[0])["fields"]["interval"] == "0.01s"
    # the process's own log line, on the stderr it inherits, says why
    assert "query process cannot start" in capfd.readouterr().err
    assert supervisor.listener.fileno() == -1  # closed by stop()
