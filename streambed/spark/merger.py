"""Carry out a merge plan on Spark: rewrite the files that can hold removed keys.

When Spark runs, and when it does not: a plan with nothing to rewrite (`MergePlan.append_only`:
no removed key falls inside any file's key bounds, or a truncate that drops every file) is a
pure append, and `streambed.lake`'s Arrow-only `write_parquet` writes the new rows; starting a
Spark job would only add latency. A rewrite of at most STREAMBED_MERGE_LOCAL_BYTES is carried
out in process by `streambed.lake.merge.arrow_merger.ArrowMerger`, which keeps the contract below
(its pure parts are shared in `streambed.lake.merge.contract`). `SparkMerger.execute` is called
when a larger rewrite must read, filter and replace existing files. Both still accept a plan
with nothing to rewrite (they then write `rows` alone, sorted by key) so that callers need no
special case.

What one merge does, as one Spark job:

1. read `plan.rewrite` (Iceberg field ids select the columns, so renamed columns are found and
   columns added later read as NULL);
2. remove the old rows whose key is in `removed_keys`: a broadcast left anti-join on key
   equality; for full-row identity tables (REPLICA IDENTITY FULL, no key) the whole row is the
   key, compared with null-safe equality (`<=>`), and each removed occurrence removes exactly
   ONE identical old row (the removed rows are counted per identity and the old rows numbered
   within each identity), so deleting one of two duplicate rows keeps the other;
3. add `rows`; where a row's `unchanged` mask is set for a column (an unchanged TOAST value
   Postgres did not send), take the value from the old row with the same key. That old row
   must be among the removed ones; if it is not, the job fails with a STATE error instead of
   writing a NULL;
4. write Parquet sorted by key, range-partitioned so every output file covers a disjoint key
   range (tight bounds keep later plans small), about `target_file_bytes` per file and at most
   `max_rows_per_file` rows, with Iceberg field ids, required columns non-nullable and
   timestamps in microseconds.

The result is exactly the list of data files written (no `_SUCCESS`, `.crc` or staging files).

I/O: on a local warehouse Spark reads Parquet paths itself, and writes them itself when its
writer can produce the table's exact Parquet schema (flat columns, no fixed-size binary);
otherwise, and always on S3 (the pyspark wheel has no S3 connector), it goes through the
`streambed_parquet` Python data source (`streambed.spark.data_source`), which uses
pyarrow's filesystems in the Spark Python workers and so runs the same way on a cluster.
Local output goes to a unique staging directory and is then moved into `output_dir` under
unique names, so a failed job leaves nothing behind in `output_dir`.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streambed.core.errors import Kind, StreambedError, raised_by_spark
from streambed.lake.merge.contract import (
    FIELD_ID,
    MAX_ROWS_PER_FILE,
    MISSING_OLD_ROW,
    REQUIRED_NULL,
    TARGET_FILE_BYTES,
    check_inputs,
    fill_mask,
    local_path,
    merge_failed,
    output_files,
    rows_per_file,
)
from streambed.lake.merge.plan import MergePlan
from streambed.spark.data_source import (
    NAME as PYARROW_SOURCE,
)
from streambed.spark.data_source import (
    StreambedParquet,
    encode_schema,
    read_manifest,
    spark_arrow_type,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

SPARK_FIELD_ID = "parquet.field.id"

IoMode = Literal["auto", "spark", "pyarrow"]


class SparkMerger:
    """Executes `MergePlan`s on a SparkSession.

    `fs_options` configures S3 access for the pyarrow data source: `s3.endpoint`,
    `s3.region`, `s3.access.key`, `s3.secret.key` (never logged). `io` forces the Spark
    Parquet reader/writer (`spark`, local paths only) or the pyarrow data source (`pyarrow`);
    `auto` picks as described in the module docstring.
    """

    def __init__(
        self,
        spark: SparkSession,
        fs_options: Mapping[str, str] | None = None,
        *,
        target_file_bytes: int = TARGET_FILE_BYTES,
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
        io: IoMode = "auto",
    ) -> None:
        self.spark = spark
        self.fs_options = dict(fs_options or {})
        self.target_file_bytes = target_file_bytes
        self.max_rows_per_file = max_rows_per_file
        self.io = io
        self._registered = False

    def execute(
        self,
        plan: MergePlan,
        *,
        rows: pa.Table,
        removed_keys: pa.Table,
        unchanged: Mapping[str, pa.BooleanArray],
        key_columns: Sequence[str],
        full_row: bool,
        arrow_schema: pa.Schema,
        output_dir: str,
        lookup_keys: pa.Table | None = None,
        deleted_positions: Mapping[str, pa.Array] | None = None,
    ) -> list[str]:
        """Rewrite `plan.rewrite` without `removed_keys`, plus `rows`; return the files written.

        `rows`: the new rows, columns as in `arrow_schema`. `removed_keys`: one row per
        removed key, columns `key_columns` (every column when `full_row`). `unchanged`:
        column name -> mask over `rows`, True where the value must come from the old row.
        `arrow_schema`: the table's schema with `PARQUET:field_id` on every field.
        `output_dir`: local path, file:// or s3:// URI of the table's data directory.
        `lookup_keys`: one row per row of `rows`, columns `key_columns`: the key of the old
        row whose values fill that row's unchanged cells (differs from the row's own key
        after a key-changing UPDATE); None means each row's own key. `deleted_positions`:
        data path -> row positions that pending position-delete files hide: those rows are
        not read (such files are read through the `streambed_parquet` source, which counts
        positions).
        """
        from pyspark.errors import PySparkException

        names = list(arrow_schema.names)
        identity = names if full_row else list(key_columns)
        check_inputs(plan, rows, removed_keys, unchanged, identity, full_row, arrow_schema)
        hidden = {
            f.path: deleted_positions[f.path]
            for f in plan.rewrite
            if deleted_positions and len(deleted_positions.get(f.path, ()))
        }
        mode = "pyarrow" if hidden else self._io_mode(plan, arrow_schema, output_dir)
        run_id = uuid.uuid4().hex
        log.info(
            "merge start rewrite_files=%d rewrite_rows=%d removed_keys=%d new_rows=%d io=%s",
            len(plan.rewrite),
            plan.rewrite_record_count,
            removed_keys.num_rows,
            rows.num_rows,
            mode,
        )
        try:
            merged = self._merged(
                plan,
                rows,
                removed_keys,
                unchanged,
                identity,
                full_row,
                arrow_schema,
                mode,
                lookup_keys,
                hidden,
            )
            if merged is None:
                return []
            ordered = self._ordered(merged, plan, rows, list(key_columns))
            if mode == "spark":
                files = self._write_native(ordered, output_dir, run_id, self._rows_per_file(plan))
            else:
                files = self._write_pyarrow(
                    ordered, arrow_schema, output_dir, run_id, self._rows_per_file(plan)
                )
        except PySparkException as e:
            raise _classify(e, output_dir) from e
        except Exception as e:  # py4j errors are not PySparkExceptions in every version
            if raised_by_spark(e):
                raise _classify(e, output_dir) from e
            raise
        log.info("merge done files_written=%d", len(files))
        return files

    # ---- building the result ----------------------------------------------------------

    def _merged(
        self,
        plan: MergePlan,
        rows: pa.Table,
        removed_keys: pa.Table,
        unchanged: Mapping[str, pa.BooleanArray],
        identity: list[str],
        full_row: bool,
        arrow_schema: pa.Schema,
        mode: str,
        lookup_keys: pa.Table | None = None,
        hidden: Mapping[str, pa.Array] | None = None,
    ) -> DataFrame | None:
        from pyspark.sql import functions as F

        names = list(arrow_schema.names)
        work = spark_schema(arrow_schema, nullable=True)
        parts: list[DataFrame] = []
        old = self._read(plan, work, arrow_schema, mode, hidden or {}) if plan.rewrite else None
        removed = None
        if old is not None and removed_keys.num_rows:
            removed = self._frame(removed_keys.select(identity), _sub(work, identity))
            removed = removed.toDF(*[f"_rk{i}" for i in range(len(identity))])
            parts.append(_without_removed(old, removed, identity, full_row))
        elif old is not None:
            parts.append(old)

        needs_fill = fill_mask(rows, unchanged)
        if needs_fill is not None and needs_fill.true_count:
            if old is None or removed is None:
                raise StreambedError(
                    f"{needs_fill.true_count} rows have unchanged values but the plan rewrites no "
                    "file holding their old rows",
                    kind=Kind.STATE,
                )
            plain = rows.filter(pc.invert(needs_fill))
            lookup = None if lookup_keys is None else lookup_keys.filter(needs_fill)
            parts.append(
                self._filled(
                    rows.filter(needs_fill),
                    unchanged,
                    needs_fill,
                    old,
                    removed,
                    identity,
                    work,
                    lookup,
                )
            )
        else:
            plain = rows
        if plain.num_rows:
            parts.append(self._frame(plain.select(names), work))
        if not parts:
            return None
        merged = functools.reduce(lambda a, b: a.unionByName(b), parts)
        return merged.select(*[_final_column(F.col(f.name), f) for f in arrow_schema])

    def _filled(
        self,
        fill_rows: pa.Table,
        unchanged: Mapping[str, pa.BooleanArray],
        needs_fill: pa.BooleanArray,
        old: DataFrame,
        removed: DataFrame,
        identity: list[str],
        work: StructType,
        lookup: pa.Table | None = None,
    ) -> DataFrame:
        """The new rows with unchanged values, completed from the old rows with their keys
        (or with the keys in `lookup`, row for row)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BooleanType, StructField, StructType

        names = fill_rows.schema.names
        masked = [c for c in names if c in unchanged]
        table = fill_rows.select(names)
        mask_fields = [StructField(f"_u{i}", BooleanType(), True) for i in range(len(masked))]
        for i, c in enumerate(masked):
            table = table.append_column(f"_u{i}", unchanged[c].filter(needs_fill))
        key_index = [names.index(c) for c in identity]
        lookup_fields = []
        for i, c in enumerate(identity):
            values = table.column(c) if lookup is None else lookup.column(c)
            table = table.append_column(f"_lk{i}", values.cast(table.schema.field(c).type))
            lookup_fields.append(StructField(f"_lk{i}", work[c].dataType, True))
        new = self._frame(table, StructType([*work.fields, *mask_fields, *lookup_fields]))
        cond = functools.reduce(
            lambda a, b: a & b,
            [old[c] == removed[f"_rk{i}"] for i, c in enumerate(identity)],
        )
        hits = old.join(F.broadcast(removed), cond, "left_semi")
        hits = hits.select(
            *[F.col(c).alias(f"_o{i}") for i, c in enumerate(names)], F.lit(True).alias("_found")
        )
        on = functools.reduce(
            lambda a, b: a & b,
            [new[f"_lk{n}"] == hits[f"_o{i}"] for n, i in enumerate(key_index)],
        )
        joined = new.join(hits, on, "left")
        columns: list[Column] = []
        for i, c in enumerate(names):
            value = F.col(c)
            if c in masked:
                value = F.when(F.col(f"_u{masked.index(c)}"), F.col(f"_o{i}")).otherwise(value)
            if i == key_index[0]:
                value = F.when(
                    F.col("_found").isNull(), F.raise_error(F.lit(MISSING_OLD_ROW))
                ).otherwise(value)
            columns.append(value.alias(c))
        return joined.select(*columns)

    def _frame(self, table: pa.Table, schema: StructType) -> DataFrame:
        """A DataFrame of a driver-side Arrow table (sent as Arrow, not through pandas)."""
        arrow = pa.schema([pa.field(f.name, spark_arrow_type(f.type), True) for f in table.schema])
        return self.spark.createDataFrame(table.cast(arrow), schema=schema)

    def _read(
        self,
        plan: MergePlan,
        work: StructType,
        arrow_schema: pa.Schema,
        mode: str,
        hidden: Mapping[str, pa.Array],
    ) -> DataFrame:
        paths = [f.path for f in plan.rewrite]
        if mode == "spark":
            return self.spark.read.schema(work).parquet(*[local_path(p) for p in paths])
        import json

        self._register()
        return (
            self.spark.read.format(PYARROW_SOURCE)
            .schema(work)
            .option("paths", json.dumps(paths))
            .option("deleted", json.dumps({p: v.to_pylist() for p, v in hidden.items()}))
            .option("arrow_schema", encode_schema(arrow_schema))
            .options(**self.fs_options)
            .load()
        )

    def _ordered(
        self, merged: DataFrame, plan: MergePlan, rows: pa.Table, key_columns: list[str]
    ) -> DataFrame:
        """Range-partitioned by key, sorted within partitions: disjoint, sorted output files."""
        partitions = self._output_partitions(plan, rows)
        if partitions == 1 or not key_columns:
            merged = merged.coalesce(1) if partitions == 1 else merged.repartition(partitions)
        else:
            merged = merged.repartitionByRange(partitions, *key_columns)
        return merged.sortWithinPartitions(*key_columns) if key_columns else merged

    def _output_partitions(self, plan: MergePlan, rows: pa.Table) -> int:
        return output_files(plan, rows, self.target_file_bytes)

    def _rows_per_file(self, plan: MergePlan) -> int:
        # 1.5x: a range partition slightly above the target must not leave a tiny last file.
        return rows_per_file(plan, self.target_file_bytes, self.max_rows_per_file, slack=1.5)

    # ---- writing ------------------------------------------------------------------------

    def _write_native(
        self, frame: DataFrame, output_dir: str, run_id: str, rows_per_file: int
    ) -> list[str]:
        out = Path(local_path(output_dir))
        staging = out / f"_staging-{run_id}"
        try:
            (
                frame.write.option("maxRecordsPerFile", rows_per_file)
                .option("compression", "zstd")
                .parquet(str(staging))
            )
            written: list[str] = []
            for part in sorted(staging.glob("part-*.parquet")):
                if pq.read_metadata(part).num_rows == 0:
                    continue
                target = out / f"{run_id}-{len(written):05d}.parquet"
                os.replace(part, target)
                written.append(str(target))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if output_dir.startswith("file://"):
            # Not `Path.as_uri()`: a lake's file URIs are not percent-encoded (a table's
            # location is `file://` and its path as it is, as pyiceberg reads it).
            return [f"file://{p}" for p in written]
        return written

    def _write_pyarrow(
        self,
        frame: DataFrame,
        arrow_schema: pa.Schema,
        output_dir: str,
        run_id: str,
        rows_per_file: int,
    ) -> list[str]:
        self._register()
        (
            frame.write.format(PYARROW_SOURCE)
            .mode("append")
            .option("output_dir", output_dir)
            .option("run_id", run_id)
            .option("arrow_schema", encode_schema(arrow_schema))
            .option("max_rows_per_file", str(rows_per_file))
            .options(**self.fs_options)
            .save()
        )
        return read_manifest(output_dir, run_id, self.fs_options)

    def _register(self) -> None:
        if not self._registered:
            self.spark.dataSource.register(StreambedParquet)
            self._registered = True

    def _io_mode(self, plan: MergePlan, arrow_schema: pa.Schema, output_dir: str) -> str:
        remote = output_dir.startswith("s3://") or any(
            f.path.startswith("s3://") for f in plan.rewrite
        )
        if self.io == "spark":
            if remote:
                raise ValueError(
                    "io='spark' cannot reach s3:// paths: the pyspark wheel has no S3 connector"
                )
            return "spark"
        if self.io == "pyarrow" or remote or not _spark_writes_exactly(arrow_schema):
            return "pyarrow"
        return "spark"


# ---- helpers (pure) -------------------------------------------------------------------


def spark_schema(arrow_schema: pa.Schema, *, nullable: bool) -> StructType:
    """The Spark schema of a table: field ids as `parquet.field.id` metadata."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = []
    for f in arrow_schema:
        meta: dict[str, Any] = {}
        if f.metadata and FIELD_ID in f.metadata:
            meta[SPARK_FIELD_ID] = int(f.metadata[FIELD_ID])
        fields.append(StructField(f.name, from_arrow_type(f.type), nullable or f.nullable, meta))
    return StructType(fields)


def _spark_writes_exactly(schema: pa.Schema) -> bool:
    """Whether Spark's own Parquet writer produces this Arrow schema (ids included)."""
    for f in schema:
        t = f.type
        if pa.types.is_nested(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_time(t):
            return False
        if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            return False
    return True


def _sub(schema: StructType, names: list[str]) -> StructType:
    from pyspark.sql.types import StructType

    return StructType([schema[n] for n in names])


def _without_removed(
    old: DataFrame, removed: DataFrame, identity: list[str], full_row: bool
) -> DataFrame:
    """`old` minus the removed rows (broadcast join; removed keys are few)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not full_row:
        cond = functools.reduce(
            lambda a, b: a & b, [old[c] == removed[f"_rk{i}"] for i, c in enumerate(identity)]
        )
        return old.join(F.broadcast(removed), cond, "left_anti")
    # One old row per removed occurrence: count removals per identity, number the matching
    # old rows within their identity, keep those numbered past the count.
    rk = [f"_rk{i}" for i in range(len(identity))]
    counts = removed.groupBy(*rk).agg(F.count(F.lit(1)).alias("_n"))
    cond = functools.reduce(
        lambda a, b: a & b,
        [old[c].eqNullSafe(counts[f"_rk{i}"]) for i, c in enumerate(identity)],
    )
    joined = old.join(F.broadcast(counts), cond, "left")
    untouched = joined.filter(F.col("_n").isNull()).select(*identity)
    numbered = joined.filter(F.col("_n").isNotNull()).withColumn(
        "_rn", F.row_number().over(Window.partitionBy(*identity).orderBy(F.lit(1)))
    )
    survivors = numbered.filter(F.col("_rn") > F.col("_n")).select(*identity)
    return untouched.unionByName(survivors)


def _final_column(col: Column, field: pa.Field) -> Column:
    """The column with its field id, and non-nullable when the table requires it."""
    from pyspark.sql import functions as F

    meta = {}
    if field.metadata and FIELD_ID in field.metadata:
        meta[SPARK_FIELD_ID] = int(field.metadata[FIELD_ID])
    if not field.nullable:
        default = _non_null_literal(field.type)
        if default is not None:
            # coalesce(x, non-null literal) is non-nullable for Spark; the raise_error makes
            # sure the literal is never used.
            checked = F.when(
                col.isNull(),
                F.raise_error(F.lit(f"streambed: {REQUIRED_NULL} {field.name}")),
            ).otherwise(col)
            col = F.coalesce(checked, default)
    return col.alias(field.name, metadata=meta)


def _non_null_literal(t: pa.DataType) -> Column | None:
    import datetime
    import decimal

    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    spark_type: DataType = from_arrow_type(t)
    value: Any
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        value = 0
    elif pa.types.is_decimal(t):
        value = decimal.Decimal(0)
    elif pa.types.is_boolean(t):
        value = False
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        value = ""
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        value = bytearray()
    elif pa.types.is_date(t):
        value = datetime.date(1970, 1, 1)
    elif pa.types.is_timestamp(t):
        if t.tz is None:
            return F.lit(datetime.datetime(1970, 1, 1)).cast(spark_type)
        value = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    else:
        return None  # nested and other types: written nullable by Spark, exact by pyarrow
    return F.lit(value).cast(spark_type)


def _classify(error: Exception, output_dir: str) -> StreambedError:
    return merge_failed(f"spark merge writing to {output_dir} failed", str(error))
