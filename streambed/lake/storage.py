"""Where table files live: the local warehouse directory or an S3 bucket.

Creating and checking the warehouse, and what a storage failure means. The S3 settings
become each client's options, pyarrow filesystems and boto3 clients in one place,
`streambed.storage.s3`; file reads and writes go through pyarrow filesystems, which work
the same on Spark executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pyarrow.fs as pafs

from streambed.core.config import Settings
from streambed.core.errors import Kind, StorageError
from streambed.storage import s3
from streambed.storage.uris import split_uri

REFUSALS: Final = (
    "ACCESS_DENIED",  # pyarrow's S3 errors: "AWS Error ACCESS_DENIED during PutObject ..."
    "SIGNATURE_DOES_NOT_MATCH",
    "INVALID_ACCESS_KEY_ID",
    "REQUEST_TIME_TOO_SKEWED",
    "EXPIRED_TOKEN",
    "HTTP status 403",
    "AccessDenied",  # S3 error codes, as boto3 and Spark's S3A report them
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "RequestTimeTooSkewed",
    "ExpiredToken",
    "Status Code: 403",
)
"""How an object store says no to the credentials or to what they may do (an HTTP 403)."""


def refused(text: str) -> bool:
    """Whether an error's text is the object store refusing the credentials or the access."""
    return any(mark in text for mark in REFUSALS)


def refusal(text: str) -> str | None:
    """The line of an error's text (Spark's, many lines long) in which the object store
    refuses the credentials or the access; None when it does not."""
    for line in text.splitlines():
        if refused(line):
            return line.strip()[:500]
    return None


def refused_error(what: str, text: str) -> StorageError | None:
    """`Kind.STORAGE_AUTH` naming the line of `text` (Spark's error text, say) in which the
    store refuses, and the fix; None when it refuses nothing."""
    line = refusal(text)
    if line is None:
        return None
    return StorageError(f"{what}: {line}; {REFUSED_FIX}", kind=Kind.STORAGE_AUTH)


def storage_error(error: BaseException, what: str) -> StorageError | None:
    """`error` as a storage failure, when it is one: an OSError of the lake's files
    (pyiceberg's FileIO and pyarrow's filesystems raise them when the object store or the
    warehouse fails), retried; or, when the store refused the credentials or the access
    (`refused`, a local `PermissionError`), `Kind.STORAGE_AUTH`, which stops the process:
    retrying cannot fix it, and the slot keeps what was not committed. A missing file is not
    an outage (a file the table references is gone): None, as for anything else."""
    if isinstance(error, StorageError):
        return error
    if isinstance(error, OSError) and not isinstance(error, FileNotFoundError):
        text = " ".join(str(error).split())
        if isinstance(error, PermissionError) or refused(text):
            return StorageError(f"{what}: {text}; {REFUSED_FIX}", kind=Kind.STORAGE_AUTH)
        return StorageError(f"{what}: {text}")
    return None


REFUSED_FIX: Final = (
    "the lake's storage refused streambed's credentials or access: check "
    "STREAMBED_S3_ACCESS_KEY_ID and STREAMBED_S3_SECRET_ACCESS_KEY, that they may read, "
    "write, list and delete in the bucket (for a local warehouse, that the directory is "
    "writable) and this machine's clock, then start streambed again (nothing after the last "
    "commit was acknowledged: the slot sends it again)"
)


def fileio_properties(settings: Settings) -> dict[str, str]:
    """pyiceberg FileIO properties for the warehouse: empty for a local warehouse."""
    if not settings.on_s3:
        return {}
    return s3.S3Access.from_settings(settings).fileio_properties()


def resolve(uri: str, properties: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a file or directory URI, using FileIO properties for S3."""
    return s3.filesystem(uri, s3.S3Access.from_fileio_properties(properties))


def ensure_warehouse(settings: Settings) -> None:
    """Create the local warehouse directory, or the S3 bucket, when missing."""
    if settings.on_s3:
        ensure_bucket(settings)
        return
    _, path = split_uri(settings.warehouse_uri)
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(
            f"cannot create the warehouse directory {path}: {e}; set STREAMBED_WAREHOUSE or "
            "STREAMBED_DATA_DIR to a writable directory"
        ) from e


WRITE_CHECK: Final = ".streambed-write-check"
"""The empty object (or file) `check_writable` writes and deletes at the warehouse's root."""
REFUSED_CODES: Final = frozenset(
    {"403", "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "RequestTimeTooSkewed"}
)


def check_writable(settings: Settings) -> None:
    """Write and delete `WRITE_CHECK` at the warehouse's root: a key (or a directory) that
    may read but not write or delete stops `streambed run` at start with the fix, not at
    the first flush or copy, which on a quiet source may come hours later. Raises
    StorageError, `Kind.STORAGE_AUTH` when the store refuses."""
    scheme, path = split_uri(settings.warehouse_uri)
    if scheme == "s3":
        _check_bucket_writable(settings, path)
        return
    check = Path(path) / WRITE_CHECK
    try:
        check.write_bytes(b"")
        check.unlink()
    except OSError as e:
        raise StorageError(
            f"cannot write to the warehouse directory {path}: {e}; make it writable for "
            "streambed, or set STREAMBED_WAREHOUSE or STREAMBED_DATA_DIR to a writable "
            "directory",
            kind=Kind.STORAGE_AUTH if isinstance(e, PermissionError) else Kind.STORAGE,
        ) from e


def _check_bucket_writable(settings: Settings, path: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, prefix = path.partition("/")
    key = f"{prefix}/{WRITE_CHECK}" if prefix else WRITE_CHECK
    where = settings.s3_endpoint or "AWS S3"
    client = s3.S3Access.from_settings(settings).client()
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"")
        client.delete_object(Bucket=bucket, Key=key)
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        refused = code in REFUSED_CODES
        raise StorageError(
            f"S3 at {where} did not let streambed write and delete s3://{bucket}/{key} "
            f"({code or e}): "
            + (
                "give the key of STREAMBED_S3_ACCESS_KEY_ID the right to read, write, list "
                "and delete in the bucket (and check this machine's clock)"
                if refused
                else "check STREAMBED_S3_ENDPOINT and the bucket"
            ),
            kind=Kind.STORAGE_AUTH if refused else Kind.STORAGE,
        ) from e
    except BotoCoreError as e:
        raise StorageError(
            f"cannot write to S3 at {where}: {e}; check STREAMBED_S3_ENDPOINT"
        ) from e


def bucket_of(settings: Settings) -> str:
    scheme, path = split_uri(settings.warehouse_uri)
    if scheme != "s3":
        raise StorageError("the warehouse is not on S3; set STREAMBED_S3_BUCKET")
    return path.split("/", 1)[0]


def ensure_bucket(settings: Settings) -> None:
    """Create the warehouse bucket when it does not exist.

    Raises StorageError naming the setting to fix when the endpoint cannot be reached or
    the credentials are refused.
    """
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    bucket = bucket_of(settings)
    where = settings.s3_endpoint or "AWS S3"
    client = s3.S3Access.from_settings(settings).client()
    try:
        client.head_bucket(Bucket=bucket)
        return
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in REFUSED_CODES:
            raise StorageError(
                f"S3 at {where} refused the credentials for bucket {bucket!r} ({code}); check "
                "STREAMBED_S3_ACCESS_KEY_ID and STREAMBED_S3_SECRET_ACCESS_KEY",
                kind=Kind.STORAGE_AUTH,
            ) from e
        if code not in ("404", "NoSuchBucket", "NotFound"):
            raise StorageError(f"S3 at {where}: cannot check bucket {bucket!r}: {e}") from e
    except EndpointConnectionError as e:
        raise StorageError(f"cannot reach S3 at {where}: {e}; check STREAMBED_S3_ENDPOINT") from e
    except BotoCoreError as e:
        raise StorageError(
            f"S3 at {where}: {e}; check STREAMBED_S3_ENDPOINT, STREAMBED_S3_REGION and the "
            "STREAMBED_S3_ACCESS_KEY_ID/STREAMBED_S3_SECRET_ACCESS_KEY credentials"
        ) from e
    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            return
        raise StorageError(
            f"S3 at {where}: cannot create bucket {bucket!r} ({code}): {e}; create it or set "
            "STREAMBED_S3_BUCKET to an existing bucket"
        ) from e
    except BotoCoreError as e:
        raise StorageError(f"S3 at {where}: cannot create bucket {bucket!r}: {e}") from e
