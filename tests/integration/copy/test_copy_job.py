"""`copy_table` on Spark: each task copies its ctid range into Parquet (local and S3), the
table commits once at the frontier, and a worker's failure names the table."""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streambed.copy.catalog import TableInfo, table_info
from streambed.copy.duck import WIDE_ROW_BYTES, OutOfMemory, stream_range
from streambed.copy.job import CopyResult, copy_table, lake_table, output_dir
from streambed.core.config import Settings
from streambed.core.errors import SchemaError, SourceError
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import frontier
from streambed.lake.evolve import PROP_ATTNUMS
from streambed.source.snapshot import SnapshotAnchor
from streambed.spark.data_source import filesystem, fs_options
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]

ROWS = 20_000


@dataclass
class _Copying:
    """One source table under a fresh snapshot (a temporary slot's), and its lake table."""

    anchor: SnapshotAnchor
    info: TableInfo
    table: Table

    def copy(self, spark: SparkSession, url: str, **kwargs: Any) -> CopyResult:
        """`copy_table` under the snapshot; a new run id and no fs options unless given."""
        kwargs.setdefault("run_id", uuid.uuid4().hex[:12])
        kwargs.setdefault("fs_options", {})
        return copy_table(
            spark,
            self.table,
            self.info,
            url=url,
            snapshot=self.anchor.snapshot_name,
            frontier=self.anchor.frontier,
            **kwargs,
        )


@contextlib.contextmanager
def _snapshot(url: str, catalog: Catalog, name: str) -> Iterator[_Copying]:
    anchor = SnapshotAnchor.from_temporary_slot(url)
    try:
        info = table_info(anchor.conn, "public", name)
        yield _Copying(anchor, info, lake_table(catalog, info))
    finally:
        anchor.close()


def _only_committed_files_left(table: Table) -> None:
    """Every Parquet file under the table's copy directories is one the table references:
    the files of discarded attempts are gone."""
    out = Path(output_dir(table, uuid.uuid4().hex).removeprefix("file://")).parent
    live = {Path(f.file.file_path.removeprefix("file://")) for f in table.scan().plan_files()}
    assert set(out.rglob("*.parquet")) == live


def _source(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text, amount numeric(12,2), "
            "at timestamptz, tags int[], data bytea)"
        )
        conn.execute(
            "INSERT INTO items SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE E'a\\n\"b\",' || g "
            "END, g * 1.25, '2024-01-01'::timestamptz + g * interval '1 second', "
            f"ARRAY[g, NULL], '\\x00ff'::bytea FROM generate_series(1, {ROWS}) g"
        )
        conn.execute("ANALYZE items")


def test_tasks_write_parquet_and_the_table_commits_once(
    spark: SparkSession, settings: Settings
) -> None:
    url = settings.source_url
    _source(url)
    catalog = open_catalog(settings)
    options = fs_options(settings)
    run_id = uuid.uuid4().hex[:12]
    with _snapshot(url, catalog, "items") as c:
        result = c.copy(spark, url, run_id=run_id, fs_options=options)
    anchor, info, table = c.anchor, c.info, c.table
    assert info.blocks >= 4
    assert result.rows == ROWS and result.files >= 2  # a range per core of local[2], at least
    # The tasks' own time (the progress's final rate): within the job's, not Spark's planning.
    assert result.copying_seconds is not None
    assert 0 < result.copying_seconds < result.seconds
    table.refresh()
    assert frontier(table) == anchor.frontier
    assert len(table.history()) == 1  # one commit
    # The columns' source attnums at the snapshot, so a rename in the stream stays a rename.
    attnums = json.loads(table.properties[PROP_ATTNUMS])
    assert attnums == {c.name: i + 1 for i, c in enumerate(info.relation.columns)}
    files = [t.file for t in table.scan().plan_files()]
    prefix = output_dir(table, run_id) + "/"
    assert len(files) == result.files and all(f.file_path.startswith(prefix) for f in files)
    assert sum(f.file_size_in_bytes for f in files) == result.bytes
    fs, path = filesystem(files[0].file_path, options)
    schema = pq.read_schema(path, filesystem=fs)
    assert schema.field("id").metadata[b"PARQUET:field_id"] == b"1"
    assert not schema.field("id").nullable
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(1, ROWS + 1))
    assert rows[6]["name"] is None and rows[0]["name"] == 'a\n"b",1'
    assert rows[3]["amount"] == Decimal("5.00")
    assert rows[0]["tags"] == "{1,NULL}" and rows[0]["data"] == b"\x00\xff"  # docs/types.md


def test_a_table_dropped_before_its_copy_fails_with_the_source_message(
    spark: SparkSession, pg_db: PgDatabase, tmp_path: Path
) -> None:
    settings = Settings(source_url=pg_db.url, data_dir=tmp_path)
    _source(pg_db.url)
    catalog = open_catalog(settings)
    run_id = uuid.uuid4().hex[:12]
    with _snapshot(pg_db.url, catalog, "items") as c:
        with psycopg.connect(pg_db.url, autocommit=True) as conn:
            conn.execute("DROP TABLE items")
        with pytest.raises(SourceError, match="dropped during its copy") as raised:
            c.copy(spark, pg_db.url, run_id=run_id)
    table = c.table
    assert "public.items" in str(raised.value) and "does not exist" in str(raised.value)
    out = Path(output_dir(table, run_id).removeprefix("file://"))
    assert not list(out.glob("*.parquet")) if out.exists() else True
    assert table.current_snapshot() is None


@pytest.mark.parametrize("reader", ["csv", "duckdb"])
def test_a_table_whose_policies_filter_the_role_fails_its_copy_rather_than_copy_some_rows(
    spark: SparkSession, pg_db: PgDatabase, tmp_path: Path, reader: str
) -> None:
    """Row-level security turned on after the catalog's check: the copy's sessions run with
    row security off, so the copy fails, naming the fix, instead of committing the rows
    the policy lets the role see."""
    _source(pg_db.url)
    role = "copier_" + uuid.uuid4().hex[:8]
    pg_db.server.create_role(role, "pw-copier", replication=True)
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON items TO {role}")
        conn.execute(f"CREATE POLICY evens ON items TO {role} USING (id % 2 = 0)")
    url = pg_db.url_as(role, "pw-copier")
    catalog = open_catalog(Settings(source_url=pg_db.url, data_dir=tmp_path))
    with _snapshot(pg_db.url, catalog, "items") as c:
        assert c.copy(spark, url, reader=reader).rows == ROWS  # no policy applies yet
        with psycopg.connect(pg_db.url, autocommit=True) as conn:
            conn.execute("ALTER TABLE items ENABLE ROW LEVEL SECURITY")
        with psycopg.connect(url) as conn:  # what the role's queries now see
            assert conn.execute("SELECT count(*) FROM items").fetchone() == (ROWS // 2,)
        with pytest.raises(SourceError, match="row-level security") as raised:
            c.copy(spark, url, reader=reader)
    assert "BYPASSRLS" in str(raised.value) and "public.items" in str(raised.value)
    assert len(c.table.scan().to_arrow()) == ROWS  # the first copy's rows, nothing more


@pytest.mark.parametrize("reader", ["csv", "duckdb"])
def test_a_row_larger_than_the_csv_block_is_read_again_with_larger_blocks(
    spark: SparkSession, pg_db: PgDatabase, tmp_path: Path, reader: str
) -> None:
    """The CSV reader reads a range again with larger blocks; the DuckDB reader reads the
    large row in a batch sized from the table's size with its TOAST table."""
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, body text)")  # 300 kB, incompressible
        conn.execute(
            "INSERT INTO docs SELECT g, CASE WHEN g = 500 THEN (SELECT string_agg(md5(i::text), "
            "'') FROM generate_series(1, 9375) i) ELSE 'small' END FROM generate_series(1, 1000) g"
        )
    catalog = open_catalog(Settings(source_url=pg_db.url, data_dir=tmp_path))
    with _snapshot(pg_db.url, catalog, "docs") as c:
        # The large value is out of line.
        assert c.info.toast_bytes > 0 and c.info.row_bytes() > 300
        # The 300 kB row needs a 512 kB block.
        result = c.copy(spark, pg_db.url, batch_bytes=64 * 1024, reader=reader)
    assert result.rows == 1000
    rows = {r["id"]: r["body"] for r in c.table.scan().to_arrow().to_pylist()}
    assert len(rows[500]) == 300_000 and rows[1] == "small"
    _only_committed_files_left(c.table)


def test_the_duckdb_reader_connects_with_any_password_and_never_shows_it(
    spark: SparkSession, pg_db: PgDatabase, tmp_path: Path
) -> None:
    """The password goes to a 0600 libpq password file, not the connection string DuckDB
    quotes in its errors; `:` and `\\` in it are escaped there."""
    password = "p:a\\ss' w=rd"
    _source(pg_db.url)
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE copier LOGIN REPLICATION PASSWORD {}").format(
                psycopg.sql.Literal(password)
            )
        )
        conn.execute("GRANT SELECT ON items TO copier")
    parts = psycopg.conninfo.conninfo_to_dict(pg_db.url)
    url = psycopg.conninfo.make_conninfo(
        **{**{k: str(v) for k, v in parts.items()}, "user": "copier", "password": password}
    )
    catalog = open_catalog(Settings(source_url=pg_db.url, data_dir=tmp_path))
    with _snapshot(pg_db.url, catalog, "items") as c:
        assert c.copy(spark, url, reader="duckdb").rows == ROWS
        with pytest.raises(SourceError) as raised:
            c.copy(spark, psycopg.conninfo.make_conninfo(url, port="1"), reader="duckdb")
    assert "Connection refused" in str(raised.value)
    assert "p:a" not in str(raised.value) and "w=rd" not in str(raised.value)


@pytest.mark.parametrize("analyzed", [True, False])
def test_wide_rows_are_read_with_the_csv_reader(
    spark: SparkSession,
    pg_db: PgDatabase,
    tmp_path: Path,
    analyzed: bool,
) -> None:
    """DuckDB holds 2048 rows at a time. A table whose rows average more than
    `WIDE_ROW_BYTES` is read with the csv reader from the start; one whose statistics look
    narrow (analyzed before its large rows arrived) runs DuckDB out of its memory limit,
    and the range is read again with the csv reader."""
    rows = 200 if analyzed else 5000
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE wide (id int PRIMARY KEY, body text)")
        conn.execute(f"INSERT INTO wide SELECT g, 'small' FROM generate_series(1, {rows}) g")
        conn.execute("ANALYZE wide")  # small rows: narrow
        # Incompressible values of 256 kB: 80 of them (20 MB) overfill 16 MB of DuckDB.
        conn.execute(
            "UPDATE wide SET body = (SELECT string_agg(md5((i * id)::text), '') "
            f"FROM generate_series(1, 8192) i) WHERE id <= {rows if analyzed else 80}"
        )
        if analyzed:
            conn.execute("ANALYZE wide")
    catalog = open_catalog(Settings(source_url=pg_db.url, data_dir=tmp_path))
    with _snapshot(pg_db.url, catalog, "wide") as c:
        assert (c.info.row_bytes() > WIDE_ROW_BYTES) == analyzed
        limit = None if analyzed else "16MB"
        result = c.copy(spark, pg_db.url, reader="duckdb", duckdb_memory_limit=limit)
        if not analyzed:  # DuckDB alone cannot hold these rows: the copy fell back
            with pytest.raises(OutOfMemory):
                for _ in stream_range(
                    pg_db.url,
                    c.anchor.snapshot_name,
                    "SELECT id, body FROM public.wide",
                    application_name="test",
                    memory_limit="16MB",
                ):
                    pass
    assert result.rows == rows
    lake = {r["id"]: r["body"] for r in c.table.scan().to_arrow().to_pylist()}
    assert len(lake[1]) == 8192 * 32 and len(lake) == rows
    with psycopg.connect(pg_db.url) as conn:
        expected = conn.execute("SELECT md5(string_agg(body, ',' ORDER BY id)) FROM wide")
        digest = hashlib.md5(",".join(lake[i] for i in sorted(lake)).encode()).hexdigest()
        assert expected.fetchone() == (digest,)
    _only_committed_files_left(c.table)  # no file of the DuckDB attempt is left


@pytest.mark.parametrize("reader", ["duckdb", "csv"])
def test_a_timestamp_beyond_294247_ad_stops_the_copy_as_it_stops_the_stream(
    spark: SparkSession, pg_db: PgDatabase, tmp_path: Path, reader: str
) -> None:
    """The last microsecond Iceberg can hold copies exactly; the next one (DuckDB would
    decode it wrapped around, about 290,000 years BC) stops the copy with the stream's
    message, and nothing is committed."""
    last = "294247-01-10 04:00:54.775806"
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE far (id int PRIMARY KEY, at timestamp, atz timestamptz)")
        conn.execute(
            f"INSERT INTO far VALUES (1, '{last}', '{last}+00'), (2, 'infinity', '-infinity')"
        )
    catalog = open_catalog(Settings(source_url=pg_db.url, data_dir=tmp_path))

    def copy() -> tuple[Table, int]:
        with _snapshot(pg_db.url, catalog, "far") as c:
            return c.table, c.copy(spark, pg_db.url, reader=reader).rows

    table, rows = copy()
    assert rows == 2
    stored = table.scan().to_arrow().sort_by("id")
    micros = stored.column("at").cast(pa.int64()).to_pylist()
    assert micros == [2**63 - 2, 2**63 - 1]  # the last microsecond, and infinity
    assert stored.column("atz").cast(pa.int64()).to_pylist() == [2**63 - 2, -(2**63 - 1)]
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute("UPDATE far SET atz = '294276-12-31 23:59:59.999999+00' WHERE id = 2")
    with pytest.raises(SchemaError, match=r"public\.far\.atz: value .* cannot be stored exactly"):
        copy()
    assert len(table.refresh().scan().to_arrow()) == 2  # the first copy stands


def test_columns_duckdb_does_not_decode_are_read_as_their_output_functions_text(
    spark: SparkSession, pg_db: PgDatabase, tmp_path: Path
) -> None:
    """A column DuckDB does not decode arrives as its type's output function's text, the
    function called by its schema and name (here an extension's, in a schema whose name
    needs quoting), not through `format`; uuid and jsonb are decoded by DuckDB."""
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Ext ns"')
        conn.execute('CREATE EXTENSION hstore SCHEMA "Ext ns"')
        conn.execute(
            'CREATE TABLE kv_outputs (id int PRIMARY KEY, h "Ext ns".hstore, u uuid, '
            "j jsonb, iv interval)"
        )
        conn.execute(
            "INSERT INTO kv_outputs SELECT g, CASE WHEN g % 5 <> 0 THEN "
            "('k=>' || g || ', \"a b\"=>NULL')::\"Ext ns\".hstore END, md5(g::text)::uuid, "
            "jsonb_build_object('g', g, 'x', 1.50), g * interval '1 minute' "
            "FROM generate_series(1, 1000) g"
        )
        conn.execute(f"ALTER DATABASE {pg_db.name} SET log_statement = 'all'")
        expected = conn.execute(
            "SELECT id, h::text, u::text, j::text, iv::text FROM kv_outputs ORDER BY id"
        ).fetchall()
    settings = Settings(source_url=pg_db.url, data_dir=tmp_path)
    with _snapshot(pg_db.url, open_catalog(settings), "kv_outputs") as copying:
        names = [c.name for c in copying.info.relation.columns]
        outputs = dict(zip(names, copying.info.outputs, strict=True))
        assert outputs["h"] == ("Ext ns", "hstore_out")
        assert outputs["iv"] == ("pg_catalog", "interval_out")
        result = copying.copy(spark, pg_db.url)
    assert result.rows == 1000
    got = copying.table.refresh().scan().to_arrow().sort_by("id").to_pylist()
    assert [tuple(r.values()) for r in got] == expected
    log = pg_db.server.log_path.read_text()
    copies = [line for line in log.splitlines() if "COPY" in line and "kv_outputs" in line]
    assert copies, "the copy's statements are in the server's log"
    for line in copies:
        assert 'pg_catalog.textin("Ext ns"."hstore_out"("h"))' in line
        assert 'pg_catalog.textin("pg_catalog"."interval_out"("iv"))' in line
        assert "format(" not in line
        assert '"u" AS "c2", "j" AS "c3"' in line  # decoded by DuckDB
