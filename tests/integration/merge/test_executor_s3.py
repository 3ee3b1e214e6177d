"""The mergers with an S3 warehouse (SeaweedFS): SparkMerger's reads and writes go through
pyarrow's S3 in Spark's Python workers, ArrowMerger's through the lake's pyarrow S3 here."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streambed.lake.merge import plan_merge
from streambed.lake.merge.arrow_merger import ArrowMerger
from streambed.lake.merge.contract import Merger
from streambed.spark.data_source import filesystem
from streambed.spark.merger import SparkMerger
from streambed.storage import s3
from tests.fixtures.s3 import ThrowawayS3
from tests.fixtures.spark import PANDAS_WARNING
from tests.integration.merge.test_executor import FIELD_ID, SCHEMA, File, simple_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]


@pytest.mark.parametrize("where", ["spark", "in-process"])
def test_merge_on_s3(
    request: pytest.FixtureRequest, s3_server: ThrowawayS3, s3_bucket: str, where: str
) -> None:
    options = {
        "s3.endpoint": s3_server.endpoint,
        "s3.region": s3_server.region,
        "s3.access.key": s3_server.access_key,
        "s3.secret.key": s3_server.secret_key,
    }
    client = s3_server.client()
    files = []
    for n, ids in enumerate((range(0, 10), range(10, 20))):
        buffer = io.BytesIO()
        pq.write_table(simple_table(ids), buffer)
        key = f"t/data/old-{n}.parquet"
        client.put_object(Bucket=s3_bucket, Key=key, Body=buffer.getvalue())
        uri = f"s3://{s3_bucket}/{key}"
        files.append(File(uri, 10, len(buffer.getvalue()), ((ids[0], ids[-1]),)))
    plan = plan_merge(files, [(12,), (13,)], truncated=False)
    assert [f.path for f in plan.rewrite] == [files[1].path]
    merger: Merger
    if where == "spark":
        spark: SparkSession = request.getfixturevalue("spark")
        merger = SparkMerger(spark, options)
    else:
        merger = ArrowMerger(
            {
                s3.S3_ENDPOINT: s3_server.endpoint,
                s3.S3_REGION: s3_server.region,
                s3.S3_ACCESS_KEY_ID: s3_server.access_key,
                s3.S3_SECRET_ACCESS_KEY: s3_server.secret_key,
            }
        )
    out = merger.execute(
        plan,
        rows=pa.table({"id": [12, 30], "name": ["twelve", "thirty"], "n": [0, 1]}, schema=SCHEMA),
        removed_keys=pa.table({"id": pa.array([12, 13], pa.int64())}),
        unchanged={"name": pa.array([False, False]), "n": pa.array([True, False])},
        key_columns=["id"],
        full_row=False,
        arrow_schema=SCHEMA,
        output_dir=f"s3://{s3_bucket}/t/data",
    )
    assert out and all(p.startswith(f"s3://{s3_bucket}/t/data/") for p in out)
    fs, _ = filesystem(out[0], options)
    tables = [pq.read_table(p.removeprefix("s3://"), filesystem=fs) for p in out]
    got = pa.concat_tables(tables).to_pylist()
    expected_ids = [*range(10, 12), *range(14, 20), 30]
    assert sorted(r["id"] for r in got) == sorted([*expected_ids, 12])
    row12 = next(r for r in got if r["id"] == 12)
    assert row12 == {"id": 12, "name": "twelve", "n": 12 % 7}
    assert [f.metadata[FIELD_ID] for f in tables[0].schema] == [b"1", b"2", b"3"]
    # Only the old files and the written ones: no manifest or staging objects left.
    listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="t/")["Contents"]
    keys = sorted(o["Key"] for o in listed if not o["Key"].endswith("/"))  # dir markers
    assert keys == sorted(
        ["t/data/old-0.parquet", "t/data/old-1.parquet"]
        + [p.removeprefix(f"s3://{s3_bucket}/") for p in out]
    )
