"""Create a lake table from a Relation, write Parquet, commit, read back; local and S3."""

from __future__ import annotations

import datetime as dt
import sqlite3
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from streambed.buffer.changes import TableKey
from streambed.core.config import Settings
from streambed.core.errors import Kind, SchemaError, StateError, StorageError, StreambedError
from streambed.lake import types as t
from streambed.lake.catalog import catalog_properties, open_catalog, write_ahead_log
from streambed.lake.commit import commit, data_file, frontier, truncate_commit
from streambed.lake.convert import rows_to_arrow
from streambed.lake.files import FileInfo, Footer, data_files, write_parquet
from streambed.lake.output import TaskOutput
from streambed.lake.storage import ensure_bucket, resolve
from streambed.lake.tables import arrow_schema, ensure_table, key_columns
from streambed.pgoutput.messages import Relation, RelationColumn
from streambed.spark.data_source import filesystem, fs_options
from tests.fixtures.s3 import ThrowawayS3

pytestmark = pytest.mark.integration

UTC = dt.UTC


def _relation(name: str = "orders", extra: tuple[RelationColumn, ...] = ()) -> Relation:
    return Relation(
        relation_id=16384,
        namespace="public",
        name=name,
        replica_identity="d",
        columns=(
            RelationColumn(1, "id", t.INT8, -1),
            RelationColumn(0, "note", t.TEXT, -1),
            RelationColumn(0, "amount", t.NUMERIC, ((12 << 16) | 2) + 4),
            RelationColumn(0, "at", t.TIMESTAMPTZ, -1),
            RelationColumn(0, "day", t.DATE, -1),
            RelationColumn(0, "ok", t.BOOL, -1),
            RelationColumn(0, "blob", t.BYTEA, -1),
            RelationColumn(0, "uid", t.UUID, -1),
            RelationColumn(0, "ratio", t.FLOAT8, -1),
            *extra,
        ),
    )


RELATION = _relation()
KEY = TableKey(columns=(0,))


def _row(i: int) -> tuple[bytes | None, ...]:
    return (
        str(i).encode(),
        f"note {i}".encode(),
        f"{i}.{i % 100:02d}".encode(),
        f"2024-01-02 03:04:05.{i % 1000:06d}+05:30".encode(),
        b"2024-02-29",
        b"t" if i % 2 else b"f",
        b"\\x00ff",
        b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        b"NaN" if i == 3 else b"0.5",
    )


@pytest.fixture
def catalog(settings: Settings) -> Catalog:
    return open_catalog(settings)


@pytest.fixture
def table(catalog: Catalog) -> Table:
    return ensure_table(catalog, RELATION, KEY)


def _write(table: Table, ids: range | list[int]) -> list[str]:
    rows = rows_to_arrow(RELATION, [_row(i) for i in ids], arrow_schema(table)).table
    return write_parquet(table, rows)


def _duck_rows(duck: duckdb.DuckDBPyConnection, settings: Settings, location: str) -> list[Any]:
    if settings.on_s3:
        endpoint = settings.s3_endpoint.removeprefix("http://")
        duck.execute(
            "CREATE OR REPLACE SECRET s3 (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, REGION ?, "
            "URL_STYLE 'path', USE_SSL false)",
            [
                settings.s3_access_key_id,
                settings.s3_secret_access_key,
                endpoint,
                settings.s3_region,
            ],
        )
    return duck.execute(
        'SELECT id, note, amount, epoch_us("at"), "day", ok, blob, uid '
        f"FROM iceberg_scan('{location}') ORDER BY id"
    ).fetchall()


def test_create_write_commit_read(
    table: Table, settings: Settings, duck: duckdb.DuckDBPyConnection
) -> None:
    assert key_columns(table) == ("id",)
    assert table.schema().identifier_field_ids == [1]
    assert table.properties["streambed.source-relation-id"] == "16384"
    assert frontier(table) is None and data_files(table) == []

    written = _write(table, [5, 3, 9, 1])
    assert len(written) == 1 and written[0].startswith(table.location())
    fs, path = resolve(written[0], table.io.properties)
    footer = pq.read_schema(fs.open_input_file(path))
    assert footer.field("id").metadata[b"PARQUET:field_id"] == b"1"
    assert pq.read_table(fs.open_input_file(path)).column("id").to_pylist() == [1, 3, 5, 9]

    location = commit(table, removed=[], added=written, lsn=0x1000)
    assert location == table.metadata_location
    assert frontier(table) == 0x1000

    [info] = data_files(table)
    assert info == FileInfo(written[0], 4, info.size_bytes, ((1, 9),))
    assert info.size_bytes > 0

    scanned = table.scan().to_arrow().sort_by("id")
    assert scanned.column("id").to_pylist() == [1, 3, 5, 9]
    assert scanned.column("amount").to_pylist()[0] == Decimal("1.01")

    got = _duck_rows(duck, settings, location)
    assert [r[0] for r in got] == [1, 3, 5, 9]
    first = got[0]
    assert first[1] == "note 1"
    assert first[2] == Decimal("1.01")
    # epoch_us: fetching timestamptz into Python needs pytz, which is not installed
    assert first[3] == int(dt.datetime(2024, 1, 1, 21, 34, 5, 1, tzinfo=UTC).timestamp() * 10**6)
    assert first[4] == dt.date(2024, 2, 29)
    assert first[5] is True
    assert first[6] == b"\x00\xff"
    assert first[7] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"


def test_swap_files_and_frontier(
    table: Table, duck: duckdb.DuckDBPyConnection, settings: Settings
) -> None:
    first = _write(table, range(0, 10))
    second = _write(table, range(10, 20))
    commit(table, removed=[], added=first, lsn=100)
    commit(table, removed=[], added=second, lsn=200)
    assert {f.key_bounds for f in data_files(table)} == {((0, 9),), ((10, 19),)}

    replacement = _write(table, range(0, 5))  # rows 5..9 deleted
    location = commit(table, removed=first, added=replacement, lsn=300)
    assert frontier(table) == 300
    assert sorted(f.path for f in data_files(table)) == sorted(second + replacement)
    ids = [r[0] for r in _duck_rows(duck, settings, location)]
    assert ids == [*range(0, 5), *range(10, 20)]
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    summary = snapshot.summary
    assert summary["streambed.lsn"] == "300"
    assert summary["deleted-data-files"] == "1"

    # removing a file that is gone (another writer replaced it) is a conflict, not a no-op
    with pytest.raises(StreambedError) as info:
        commit(table, removed=first, added=_write(table, [1]), lsn=400)
    assert info.value.kind is Kind.COMMIT_CONFLICT
    assert frontier(table) == 300

    # the frontier only moves forward
    with pytest.raises(StateError):
        commit(table, removed=[], added=_write(table, [50]), lsn=299)

    # replaying a commit that landed is a no-op returning the same location
    assert commit(table, removed=first, added=replacement, lsn=300) == location

    # truncate: every file goes, the new rows come in
    after = _write(table, [77])
    truncate_commit(table, added=after, lsn=500)
    assert [f.path for f in data_files(table)] == after
    assert table.scan().to_arrow().column("id").to_pylist() == [77]
    truncate_commit(table, added=[], lsn=600)
    assert data_files(table) == [] and frontier(table) == 600
    assert table.scan().to_arrow().num_rows == 0


def test_stale_table_object_conflict(catalog: Catalog, table: Table) -> None:
    files = _write(table, range(0, 3))
    commit(table, removed=[], added=files, lsn=10)
    other = catalog.load_table(("public", "orders"))
    commit(other, removed=files, added=_write(other, [1]), lsn=20)
    # `table` still has the old metadata: commit refreshes, sees the file is gone
    with pytest.raises(StreambedError) as info:
        commit(table, removed=files, added=_write(table, [2]), lsn=30)
    assert info.value.kind is Kind.COMMIT_CONFLICT
    # an append-only commit from the stale object re-plans on the fresh metadata
    commit(table, removed=[], added=_write(table, [3]), lsn=40)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3]
    assert frontier(table) == 40


def test_a_copy_commit_from_a_stale_table_object_loads_it_again(
    catalog: Catalog, table: Table
) -> None:
    """`loaded=True` (a copy's commit) skips the first load: a table changed meanwhile is
    refused by the catalog, loaded, and checked against its newer frontier."""
    other = catalog.load_table(("public", "orders"))
    commit(other, removed=[], added=_write(other, [1, 2]), lsn=20)  # `table` is stale now
    copied = _write(table, [5, 6])
    truncate_commit(table, added=copied, lsn=30, loaded=True)
    assert [f.path for f in data_files(table)] == copied and frontier(table) == 30
    stale = catalog.load_table(("public", "orders"))
    commit(other, removed=[], added=_write(other, [7]), lsn=50)
    with pytest.raises(StateError, match="below the table's frontier"):
        truncate_commit(stale, added=_write(stale, [8]), lsn=40, loaded=True)
    assert frontier(catalog.load_table(("public", "orders"))) == 50


def test_ensure_table_is_idempotent_and_checks_columns(catalog: Catalog, table: Table) -> None:
    again = ensure_table(catalog, RELATION, KEY)
    assert again.metadata_location == table.metadata_location
    changed = _relation(extra=(RelationColumn(0, "added", t.TEXT, -1),))
    with pytest.raises(SchemaError, match="'added' is new"):
        ensure_table(catalog, changed, KEY)
    retyped = Relation(
        relation_id=RELATION.relation_id,
        namespace="public",
        name="orders",
        replica_identity="d",
        columns=(RelationColumn(1, "id", t.INT4, -1), *RELATION.columns[1:]),
    )
    with pytest.raises(SchemaError, match="'id' is long in the lake but int now"):
        ensure_table(catalog, retyped, KEY)


def test_keyless_and_float_key_tables(catalog: Catalog) -> None:
    keyless = ensure_table(catalog, _relation("events"), TableKey(columns=(), full_row=True))
    assert key_columns(keyless) == () and keyless.schema().identifier_field_ids == []
    rows = rows_to_arrow(RELATION, [_row(2), _row(1)], arrow_schema(keyless)).table
    files = write_parquet(keyless, rows)
    commit(keyless, removed=[], added=files, lsn=1)
    assert [f.key_bounds for f in data_files(keyless)] == [()]

    by_ratio = ensure_table(catalog, _relation("ratios"), TableKey(columns=(8,)))
    assert key_columns(by_ratio) == ("ratio",)
    assert by_ratio.schema().identifier_field_ids == []  # Iceberg forbids float identifiers


def test_large_write_rolls_files(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    import streambed.lake.files as files_module

    monkeypatch.setattr(files_module, "TARGET_FILE_BYTES", 1)
    monkeypatch.setattr(files_module, "MIN_ROW_GROUP_ROWS", 1)
    monkeypatch.setattr(files_module, "ROW_GROUP_MEMORY_BYTES", 400 * 100)
    written = _write(table, list(range(1000, 0, -1)))
    assert len(written) > 1
    commit(table, removed=[], added=written, lsn=1)
    infos = sorted(data_files(table), key=lambda f: f.key_bounds)
    assert sum(f.record_count for f in infos) == 1000
    uppers = [b[0][1] for b in (f.key_bounds for f in infos) if b[0] is not None]
    lowers = [b[0][0] for b in (f.key_bounds for f in infos) if b[0] is not None]
    assert all(u < lo for u, lo in zip(uppers, lowers[1:], strict=False))  # disjoint ranges


def test_key_bounds_decode_to_python_values(catalog: Catalog) -> None:
    relation = Relation(
        relation_id=7,
        namespace="public",
        name="composite",
        replica_identity="d",
        columns=(
            RelationColumn(1, "day", t.DATE, -1),
            RelationColumn(1, "at", t.TIMESTAMPTZ, -1),
            RelationColumn(1, "name", t.TEXT, -1),
            RelationColumn(1, "amount", t.NUMERIC, ((12 << 16) | 2) + 4),
        ),
    )
    table = ensure_table(catalog, relation, TableKey(columns=(0, 1, 2, 3)))
    long_name = "x" * 40
    rows = rows_to_arrow(
        relation,
        [
            (b"2024-01-01", b"2024-01-01 00:00:00+00", long_name.encode(), b"-5.25"),
            (b"2024-03-01", b"2024-06-01 12:00:00.5+00", b"a", b"7.00"),
        ],
        arrow_schema(table),
    ).table
    commit(table, removed=[], added=write_parquet(table, rows), lsn=1)
    [info] = data_files(table)
    assert info.key_bounds == (
        (dt.date(2024, 1, 1), dt.date(2024, 3, 1)),
        (
            dt.datetime(2024, 1, 1, tzinfo=UTC),
            dt.datetime(2024, 6, 1, 12, 0, 0, 500000, tzinfo=UTC),
        ),
        ("a", long_name),  # full metrics on key columns: not truncated to 16 characters
        (Decimal("-5.25"), Decimal("7.00")),
    )
    assert info.key_bounds[1] == tuple(rows.column("at").to_pylist()[::1])


def test_ensure_bucket_errors(s3_server: ThrowawayS3, tmp_path: Path) -> None:
    base = {**s3_server.settings_kwargs("streambed-new-bucket")}
    ensure_bucket(Settings(source_url="postgresql://x", data_dir=tmp_path, **base))
    ensure_bucket(Settings(source_url="postgresql://x", data_dir=tmp_path, **base))  # exists: fine
    s3_server.client().head_bucket(Bucket="streambed-new-bucket")

    wrong = {**base, "s3_secret_access_key": "wrong"}
    with pytest.raises(StorageError, match="STREAMBED_S3_SECRET_ACCESS_KEY"):
        ensure_bucket(Settings(source_url="postgresql://x", data_dir=tmp_path, **wrong))

    unreachable = {**base, "s3_endpoint": "http://127.0.0.1:9"}
    with pytest.raises(StorageError, match="STREAMBED_S3_ENDPOINT"):
        ensure_bucket(Settings(source_url="postgresql://x", data_dir=tmp_path, **unreachable))


def test_bulk_append_from_many_commits(table: Table) -> None:
    for lsn, start in enumerate(range(0, 50, 10), start=1):
        commit(table, removed=[], added=_write(table, range(start, start + 10)), lsn=lsn)
    assert frontier(table) == 5
    assert table.scan().to_arrow().num_rows == 50
    assert pa.compute.max(table.scan().to_arrow().column("id")).as_py() == 49


def _task_file(table: Table, settings: Settings, arrow: pa.Table) -> tuple[str, Footer]:
    """`arrow` written as a copy task writes it: the file's URI and its returned footer."""
    directory = f"{table.location()}/data/copy-test"
    fs, base = filesystem(directory, fs_options(settings))
    output = TaskOutput(fs, base, directory, "t", arrow_schema(table))
    output.write(arrow)
    (written,) = output.close()
    assert written.footer is not None
    return written.uri, Footer(written.footer, written.bytes)


def _metrics(f: DataFile) -> tuple[Any, ...]:
    return (
        f.file_path,
        f.file_format,
        f.file_size_in_bytes,
        f.record_count,
        f.column_sizes,
        f.value_counts,
        f.null_value_counts,
        f.nan_value_counts,
        f.lower_bounds,
        f.upper_bounds,
        f.split_offsets,
    )


def test_a_returned_footer_gives_the_metrics_reading_the_file_gives(
    table: Table, settings: Settings
) -> None:
    """A copy's commit builds each file's metrics from the footer its task returned,
    instead of reading the file back (on S3, requests per file): the same DataFile."""
    rows = rows_to_arrow(RELATION, [_row(i) for i in range(1, 2001)], arrow_schema(table)).table
    uri, footer = _task_file(table, settings, rows)
    read = parquet_file_to_data_file(table.io, table.metadata, uri)
    given = data_file(table.io, table.metadata, uri, footer)
    assert _metrics(given) == _metrics(read)
    assert given.lower_bounds and given.upper_bounds  # metrics, not an empty file's
    # A date beyond 9999 (pyiceberg cannot bound it): no date/time bounds, either way.
    far = rows.set_column(
        rows.schema.get_field_index("day"),
        rows.schema.field("day"),
        pa.array([3_000_000] * rows.num_rows, pa.date32()),
    )
    uri, footer = _task_file(table, settings, far)
    read, given = (
        data_file(table.io, table.metadata, uri),
        data_file(table.io, table.metadata, uri, footer),
    )
    assert _metrics(given) == _metrics(read)
    day = table.schema().find_field("day").field_id
    assert day not in (given.lower_bounds or {})


def test_a_copy_commit_uses_the_returned_footers(table: Table, settings: Settings) -> None:
    rows = rows_to_arrow(RELATION, [_row(i) for i in range(1, 101)], arrow_schema(table)).table
    uri, footer = _task_file(table, settings, rows)
    truncate_commit(table, added=[uri], lsn=700, footers={uri: footer})
    (committed,) = data_files(table)
    assert committed.path == uri and committed.record_count == 100
    assert frontier(table) == 700


def test_the_embedded_catalog_commits_through_a_write_ahead_log(tmp_path: Path) -> None:
    """One sync a commit instead of a journal's three (`catalog.write_ahead_log`); a
    catalog made by an earlier version is switched at its next open, its tables kept."""
    database = tmp_path / "catalog.db"
    settings = Settings(source_url="postgresql://x/y", data_dir=tmp_path)
    older = SqlCatalog("streambed", **catalog_properties(settings))  # rollback journal
    made = ensure_table(older, RELATION, KEY)
    with closing(sqlite3.connect(database)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    catalog = open_catalog(settings)
    with closing(sqlite3.connect(database)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    table = catalog.load_table(("public", "orders"))
    assert table.metadata_location == made.metadata_location
    commit(table, removed=[], added=_write(table, [1]), lsn=10)
    again = open_catalog(settings)  # a second process (`streambed serve`) opens it too
    assert again.load_table(("public", "orders")).scan().to_arrow().num_rows == 1


def test_a_catalog_that_cannot_be_switched_is_left_as_it_is(tmp_path: Path) -> None:
    """The journal mode is an optimisation: a database SQLite cannot open or write here is
    left to the catalog's own open, which reports it."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    write_ahead_log(str(blocker / "catalog.db"))  # no error of its own
    assert not (blocker.parent / "catalog.db").exists()
