"""Which failures of the lake's storage are waited out (`Kind.STORAGE`) and which stop the
process (`Kind.STORAGE_AUTH`: the store refuses the credentials or the access), as the
sink, the copy job and the Spark merge see them. The messages are pyarrow's, as SeaweedFS
answered a wrong secret, an unknown key and a read-only key."""

from __future__ import annotations

from pathlib import Path

import pytest

from streambed.copy.job import _failure
from streambed.core.config import Settings
from streambed.core.errors import Kind, Policy, StorageError, StreambedError
from streambed.lake.storage import check_writable, refusal, storage_error
from streambed.spark.merger import _classify

DENIED = (
    "When reading information for key 'x.parquet' in bucket 't-1': AWS Error ACCESS_DENIED "
    "during HeadObject operation: No response body."
)
REFUSALS = [
    DENIED,
    "When initiating multiple part upload for key 'y.parquet' in bucket 't-1': AWS Error "
    "SIGNATURE_DOES_NOT_MATCH during CreateMultipartUpload operation: The request signature "
    "we calculated does not match the signature you provided.",
    "When initiating multiple part upload for key 'y.parquet' in bucket 't-1': AWS Error "
    "INVALID_ACCESS_KEY_ID during CreateMultipartUpload operation: The access key ID you "
    "provided does not exist in our records.",
    "When listing objects under key 'd' in bucket 'b': AWS Error UNKNOWN (HTTP status 403) "
    "during ListObjectsV2 operation: Forbidden",
]
OUTAGES = [
    "When reading information for key 'x' in bucket 'b': AWS Error NETWORK_CONNECTION during "
    "HeadObject operation: curlCode: 7, Couldn't connect to server",
    "AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate.",
    "When uploading part for key 'k' in bucket 'b': AWS Error UNKNOWN (HTTP status 503) "
    "during UploadPart operation",
]


def spark_text(worker_error: str) -> Exception:
    """A Python worker's exception as Spark re-raises it in the driver."""
    return RuntimeError(
        "An error occurred while calling o123.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in "
        "stage 4.0 failed 1 times, most recent failure: Lost task 0.0 (TID 9): "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/w/streambed/lake/output.py", line 80, in write\n'
        f"OSError: {worker_error}\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
    )


@pytest.mark.parametrize("text", REFUSALS)
def test_a_refusal_stops_with_the_fix(text: str) -> None:
    error = storage_error(OSError(text), "flushing public.t")
    assert error is not None
    assert error.kind is Kind.STORAGE_AUTH
    assert error.policy is Policy.MANUAL
    assert str(error).startswith(f"flushing public.t: {text}")
    assert "STREAMBED_S3_ACCESS_KEY_ID" in str(error)
    assert "the slot sends it again" in str(error)


@pytest.mark.parametrize("text", OUTAGES)
def test_an_outage_is_retried(text: str) -> None:
    error = storage_error(OSError(text), "flushing public.t")
    assert error is not None
    assert error.kind is Kind.STORAGE
    assert error.policy is Policy.RETRY
    assert "STREAMBED_S3" not in str(error)


def test_a_local_warehouse_that_is_not_writable_stops() -> None:
    error = storage_error(PermissionError(13, "Permission denied", "/lake/t"), "flushing")
    assert error is not None and error.kind is Kind.STORAGE_AUTH
    assert "/lake/t" in str(error)


@pytest.mark.parametrize(
    "error", [FileNotFoundError(2, "No such file"), ValueError(DENIED), KeyError("x")]
)
def test_not_a_storage_failure(error: Exception) -> None:
    """A missing data file is not an outage, and only OSErrors are the storage's."""
    assert storage_error(error, "flushing") is None


def test_typed_errors_pass_through() -> None:
    typed = StorageError("already typed", kind=Kind.STORAGE_AUTH)
    assert storage_error(typed, "flushing") is typed


@pytest.mark.parametrize("text", REFUSALS)
def test_refusal_finds_the_line_in_sparks_text(text: str) -> None:
    assert refusal(str(spark_text(text))) == f"OSError: {text}"


@pytest.mark.parametrize("text", OUTAGES)
def test_no_refusal_in_an_outage(text: str) -> None:
    assert refusal(str(spark_text(text))) is None


def test_a_copy_task_refused_stops_and_an_outage_is_retried() -> None:
    refused = _failure("public.t", spark_text(DENIED))
    assert refused.kind is Kind.STORAGE_AUTH
    assert "copy of public.t failed: OSError: " in str(refused)
    assert "ACCESS_DENIED" in str(refused) and "STREAMBED_S3_ACCESS_KEY_ID" in str(refused)
    down = _failure("public.t", spark_text(OUTAGES[0]))
    assert down.kind is Kind.STORAGE


def test_a_merge_refused_stops_and_an_outage_is_retried() -> None:
    refused: StreambedError = _classify(spark_text(DENIED), "s3://b/t/data")
    assert refused.kind is Kind.STORAGE_AUTH
    assert "ACCESS_DENIED" in str(refused) and "s3://b/t/data" in str(refused)
    down = _classify(spark_text(OUTAGES[0]), "s3://b/t/data")
    assert down.kind is Kind.STORAGE


def test_a_writable_warehouse_directory_passes_and_keeps_nothing(tmp_path: Path) -> None:
    check_writable(_local(tmp_path, tmp_path / "lake"))
    assert list((tmp_path / "lake").iterdir()) == []


def test_a_warehouse_directory_that_refuses_writes_stops_the_start(tmp_path: Path) -> None:
    """/sys refuses new files to everyone, root included: a real `PermissionError`."""
    with pytest.raises(StorageError) as raised:
        check_writable(_local(tmp_path, Path("/sys")))
    assert raised.value.kind is Kind.STORAGE_AUTH
    assert "cannot write to the warehouse directory /sys" in str(raised.value)
    assert "STREAMBED_WAREHOUSE" in str(raised.value)


def _local(data_dir: Path, warehouse: Path) -> Settings:
    warehouse.mkdir(exist_ok=True)
    return Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://localhost/db",
            "STREAMBED_DATA_DIR": str(data_dir),
            "STREAMBED_WAREHOUSE": str(warehouse),
        }
    )
