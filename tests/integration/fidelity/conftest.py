"""`streambed run` with its query port on, and helpers that read raw text from both ends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from streambed.core.config import Settings
from tests.fixtures.postgres import PgDatabase, free_port
from tests.integration.pipeline.conftest import STREAMING_OPTIONS
from tests.integration.pipeline.harness import StreambedProcess, slot_exists, wait_until

TextRow = tuple[bytes | None, ...]


@dataclass
class Served:
    url: str  # the source database
    query_port: int
    env: dict[str, str]
    settings: Settings
    proc: StreambedProcess

    def start(self, **extra_env: str) -> None:
        self.proc.start(extra_env)
        wait_until(lambda: slot_exists(self.url), 120, "the replication slot", self.proc)

    def execute(self, *statements: str) -> None:
        execute(self.url, *statements)

    def source_text(self, sql: str) -> list[TextRow]:
        """Rows of `sql` on the source, every value exactly as Postgres renders it (text)."""
        return raw_text(self.url, sql, "SET TimeZone = 'UTC'")

    def lake_text(self, sql: str) -> list[TextRow]:
        """Rows of `sql` through streambed's query port, as sent on the wire (text)."""
        return raw_text(f"postgresql://streambed@127.0.0.1:{self.query_port}/streambed", sql)

    def wait_equal(self, sql: str, timeout: float = 90) -> None:
        """Wait until `sql` gives the same text through the query port as on the source."""
        last: list[str] = []

        def same() -> bool:
            try:
                lake = self.lake_text(sql)
            except psycopg.Error as e:
                last[:] = [f"query port: {e}"]
                return False
            source = self.source_text(sql)
            if lake == source:
                return True
            last[:] = differences(source, lake)[:10] or [f"{len(source)} vs {len(lake)} rows"]
            return False

        try:
            wait_until(same, timeout, f"{sql!r} to read the same", self.proc)
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast differences:\n" + "\n".join(last)) from None


def execute(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def raw_text(url: str, sql: str, setup: str | None = None) -> list[TextRow]:
    with psycopg.connect(url, autocommit=True) as conn:
        pgconn = conn.pgconn
        if setup is not None:
            pgconn.exec_(setup.encode())
        result = pgconn.exec_(sql.encode())
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            message = (result.error_message or b"").decode(errors="replace")
            raise psycopg.Error(f"{sql!r} failed: {message}")
        return [
            tuple(result.get_value(r, c) for c in range(result.nfields))
            for r in range(result.ntuples)
        ]


def differences(source: list[TextRow], lake: list[TextRow]) -> list[str]:
    out = []
    for i, (s, k) in enumerate(zip(source, lake, strict=False)):
        for c, (a, b) in enumerate(zip(s, k, strict=False)):
            if a != b:
                out.append(f"row {i} column {c}: source {a!r:.120} lake {b!r:.120}")
    if len(source) != len(lake):
        out.append(f"source has {len(source)} rows, lake {len(lake)}")
    return out


@pytest.fixture
def served(pg_db: PgDatabase, tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    env = {
        "STREAMBED_SOURCE_URL": pg_db.url + STREAMING_OPTIONS,
        "STREAMBED_DATA_DIR": str(tmp_path / "data"),
        "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{port}",
        "STREAMBED_FLUSH_INTERVAL": "0.5",
        "STREAMBED_HEARTBEAT_INTERVAL": "2",
        "STREAMBED_SPARK_MASTER": "local[2]",
        "STREAMBED_LOG_LEVEL": "info",
    }
    served = Served(
        pg_db.url,
        port,
        env,
        Settings.from_env(env),
        StreambedProcess(env, tmp_path / "streambed.log"),
    )
    try:
        yield served
    finally:
        served.proc.kill()
