"""Tables with any name Postgres allows (mixed case, blanks, `/`, `#`, `?`, `%`, `~`, dots,
non-ASCII) copy, stream and read through the query port as the source reads them, each in
a lake directory of its own (`streambed.lake.locations`), on the local warehouse (copied
and merged on Spark, under a data directory whose path has a blank) and on S3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.lake.locations import segment
from streambed.storage.uris import split_uri
from tests.fixtures.postgres import PgDatabase, free_port
from tests.fixtures.s3 import ThrowawayS3
from tests.integration.fidelity.conftest import Served, raw_text
from tests.integration.pipeline.conftest import STREAMING_OPTIONS
from tests.integration.pipeline.harness import StreambedProcess

pytestmark = pytest.mark.integration

NAMES = [
    ("public", "User"),
    ("Sales Dept", "Order Items"),
    ("a/b", "c"),  # with the next: one directory `a/b/c` for both, before
    ("a", "b/c"),
    ("a.b", "c"),  # with the next: one name `a.b.c` for both in the watermark, before
    ("a", "b.c"),
    ("a", "b.x"),  # kept while `"a.b".x` is left out: `a.b.x` would name both
    ("public", "hash#tag"),
    ("public", "q?x"),
    ("public", "pct%41x"),
    ("public", "dot.ted"),
    ("public", ".."),
    ("public", "tilde~7E"),
    ("Ünïcode", "naïve"),
]
LEFT_OUT = [("a", "b,c"), ("a.b", "x")]  # STREAMBED_EXCLUDE_TABLES names them in quotes


def _quoted(schema: str, name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


@pytest.fixture(params=["local", "s3"])
def named(request: pytest.FixtureRequest, pg_db: PgDatabase, tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    env = {
        "STREAMBED_SOURCE_URL": pg_db.url + STREAMING_OPTIONS,
        "STREAMBED_DATA_DIR": str(tmp_path / "lake data"),  # a blank in the lake's path too
        "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{port}",
        "STREAMBED_FLUSH_INTERVAL": "0.5",
        "STREAMBED_HEARTBEAT_INTERVAL": "2",
        "STREAMBED_SPARK_MASTER": "local[2]",
        "STREAMBED_LOG_LEVEL": "info",
        "STREAMBED_EXCLUDE_TABLES": ", ".join(_quoted(*t) for t in LEFT_OUT),
    }
    if request.param == "s3":
        server: ThrowawayS3 = request.getfixturevalue("s3_server")
        env.update(server.env(server.new_bucket()))
    else:
        env["STREAMBED_COPY_LOCAL_BYTES"] = "0"  # copied on Spark too
        env["STREAMBED_MERGE_LOCAL_BYTES"] = "0"  # and merged on Spark
        env["STREAMBED_WRITE_MODE"] = "copy-on-write"  # rewrites, not delete files
    served = Served(
        pg_db.url, port, env, Settings.from_env(env), StreambedProcess(env, tmp_path / "run.log")
    )
    try:
        yield served
    finally:
        served.proc.kill()


def test_tables_of_any_name_copy_stream_and_read_back(named: Served) -> None:
    s = named
    s.execute(*{f'CREATE SCHEMA IF NOT EXISTS "{schema}"' for schema, _ in NAMES + LEFT_OUT})
    for i, (schema, name) in enumerate(NAMES + LEFT_OUT):
        table = _quoted(schema, name)
        s.execute(
            f'CREATE TABLE {table} ("Id" int PRIMARY KEY, "a b" text, "Ü" numeric(8,2))',
            f"INSERT INTO {table} SELECT g, '{i}-' || g, g / 4.0 FROM generate_series(1, 300) g",
        )
    s.start()
    for schema, name in NAMES:
        s.wait_equal(f'SELECT * FROM {_quoted(schema, name)} ORDER BY "Id"', timeout=180)
    for schema, name in NAMES:
        table = _quoted(schema, name)
        s.execute(
            f'UPDATE {table} SET "a b" = \'changed\' WHERE "Id" <= 20',
            f'DELETE FROM {table} WHERE "Id" > 290',
            f"INSERT INTO {table} VALUES (1000, 'new', 1.5)",
        )
    for schema, name in NAMES:
        s.wait_equal(f'SELECT * FROM {_quoted(schema, name)} ORDER BY "Id"')
    # A name with `/` or `.` reads the replicated table, never a file of that name: in
    # the named schema or the search path, else it is refused.
    with pytest.raises(psycopg.Error, match='reading files is not allowed: "b/c"'):
        s.lake_text('SELECT * FROM "b/c"')
    with pytest.raises(psycopg.Error, match=r'reading files is not allowed: "x\.parquet"'):
        s.lake_text('SELECT * FROM public."x.parquet"')
    port = f"postgresql://streambed@127.0.0.1:{s.query_port}/streambed"
    assert raw_text(port, 'SELECT count(*) FROM "b/c"', "SET search_path = a") == [(b"291",)]
    assert s.lake_text('SELECT count(*) FROM "dot.ted"') == [(b"291",)]
    for schema, name in NAMES:  # time travel takes the name as SQL writes it
        travel = f"SELECT count(*) FROM streambed.at_time('{_quoted(schema, name)}', '2999-01-01')"
        assert s.lake_text(travel) == [(b"291",)], (schema, name)
    catalog = open_catalog(s.settings)
    for schema, name in LEFT_OUT:
        assert not catalog.table_exists((schema, name))
        with pytest.raises(psycopg.Error, match="does not exist"):
            s.lake_text(f"SELECT count(*) FROM {_quoted(schema, name)}")
    locations = {n: catalog.load_table(n).location() for n in NAMES}
    assert len(set(locations.values())) == len(NAMES), locations
    warehouse = split_uri(s.settings.warehouse_uri)[1]
    for (schema, name), location in locations.items():
        assert split_uri(location)[1] == f"{warehouse}/{segment(schema)}/{segment(name)}"
    assert "error" not in s.proc.logs().lower()
    assert s.proc.stop() == 0
