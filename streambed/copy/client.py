"""Streaming one COPY's CSV out of the source, as Arrow batches of raw field bytes.

Two clients, same bytes:

- `psql` (preferred): libpq's C loop receives the COPY rows and writes them to a pipe;
  Arrow's streaming CSV reader parses the pipe in blocks. Python never touches a row,
  which makes this several times faster than reading rows through psycopg (one Python
  call per row). The connection parameters go in a private (0600) service file, never on the
  command line, so the password is not visible in the process list.
- `psycopg` (fallback, when no psql binary is found): rows are read one by one and joined
  into chunks of `batch_bytes`.

Both run `BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT ...`
first, with the replication session's output settings (`streambed.source.copy_session`).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pcsv
from psycopg import sql

from streambed.source.copy_session import copy_connect, copy_params, secret_file

PSQL_ENV = "STREAMBED_PSQL"

PIPE_BYTES = 1024 * 1024  # /proc/sys/fs/pipe-max-size's default
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

NATIVE = {"int": pa.int32(), "long": pa.int64(), "string": pa.string()}
"""Column kinds (`streambed.lake.types.ColumnType.kind`) whose text form Arrow's CSV reader
parses exactly as `streambed.lake.convert` does (the same Arrow integer parser; UTF-8
validated), so the copy skips a pass over them."""


class CopyClientError(Exception):
    """The source refused or broke the COPY; the message is the server's."""


class RowTooLarge(CopyClientError):
    """A row is larger than the CSV reader's block (`batch_bytes`); read again with a
    larger one."""


def find_psql() -> str | None:
    """`$STREAMBED_PSQL` ("" disables psql), else psql on PATH, else the newest
    /usr/lib/postgresql/*/bin/psql.

    Debian's /usr/bin/psql is a Perl wrapper (pg_wrapper) that takes a noticeable time to
    start before it runs the real binary; every copy task starts one psql, so the newest real
    binary is used instead when there is one."""
    configured = os.environ.get(PSQL_ENV)
    if configured is not None:
        return configured or None
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/psql"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    found = shutil.which("psql")
    if found and not (candidates and _is_script(found)):
        return found
    return candidates[-1] if candidates else None


def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def csv_options(
    columns: Sequence[pa.DataType], block_size: int
) -> tuple[pcsv.ReadOptions, pcsv.ParseOptions, pcsv.ConvertOptions]:
    """Postgres CSV: no header; an unquoted empty field is NULL, a quoted "" is ''; values
    may contain newlines; an empty line is a row (one NULL column).

    `columns` gives each field's Arrow type: `binary` keeps the field's bytes for
    `streambed.lake.convert`; the types of `NATIVE` are parsed by the reader itself."""
    names = [f"c{i}" for i in range(len(columns))]
    return (
        pcsv.ReadOptions(column_names=names, use_threads=False, block_size=block_size),
        pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
        pcsv.ConvertOptions(
            column_types=dict(zip(names, columns, strict=True)),
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )


def stream_copy(
    url: str,
    snapshot: str,
    statement: sql.Composed,
    columns: Sequence[pa.DataType],
    *,
    application_name: str,
    batch_bytes: int,
    psql: str | None,
) -> Iterator[pa.RecordBatch]:
    """Raw CSV fields of `statement` run under `snapshot`, in batches of about `batch_bytes`."""
    if psql:
        yield from _via_psql(url, snapshot, statement, columns, application_name, batch_bytes, psql)
    else:
        yield from _via_psycopg(url, snapshot, statement, columns, application_name, batch_bytes)


def _via_psql(
    url: str,
    snapshot: str,
    statement: sql.Composed,
    columns: Sequence[pa.DataType],
    application_name: str,
    batch_bytes: int,
    psql: str,
) -> Iterator[pa.RecordBatch]:
    params = copy_params(url, application_name)
    service = "[copy]\n" + "".join(f"{k}={v}\n" for k, v in params.items())
    with secret_file(service) as (fd, service_file):
        # libpq finds the service in PGSERVICEFILE and reads no other service file.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(PGSERVICEFILE=service_file, PGSERVICE="copy")
        script = (
            "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            f"SET TRANSACTION SNAPSHOT '{snapshot.replace(chr(39), '')}'",
            statement.as_string(None),
        )
        argv = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        for command in script:
            argv += ["-c", command]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            pass_fds=() if fd is None else (fd,),  # the service file, read at connect
        )
        assert proc.stdout is not None and proc.stderr is not None
        with contextlib.suppress(OSError):  # fewer, larger reads; Linux only, else as is
            fcntl.fcntl(proc.stdout.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
        try:
            read, parse, convert = csv_options(columns, batch_bytes)
            try:
                reader = pcsv.open_csv(
                    pa.PythonFile(proc.stdout, mode="r"),
                    read_options=read,
                    parse_options=parse,
                    convert_options=convert,
                )
            except pa.ArrowInvalid as e:
                if "Empty CSV file" in str(e):
                    reader = None
                else:
                    raise
            if reader is not None:
                yield from reader
            code = proc.wait()
            if code != 0:
                message = proc.stderr.read().decode(errors="replace").strip()
                raise CopyClientError(message.removeprefix("psql:").strip() or f"psql exit {code}")
        except pa.ArrowInvalid as e:
            proc.kill()
            proc.wait()
            if "straddling object" in str(e):  # Arrow's reader needs a row within a block
                raise RowTooLarge(f"a row is larger than {batch_bytes} bytes") from None
            message = proc.stderr.read().decode(errors="replace").strip()
            raise CopyClientError(message or str(e)) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()


def _via_psycopg(
    url: str,
    snapshot: str,
    statement: sql.Composed,
    columns: Sequence[pa.DataType],
    application_name: str,
    batch_bytes: int,
) -> Iterator[pa.RecordBatch]:
    try:
        conn = copy_connect(url, application_name)
    except Exception as e:
        raise CopyClientError(str(e)) from None
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        with conn.cursor().copy(statement) as copy:
            parts: list[Any] = []
            size = 0
            while data := copy.read():
                parts.append(data)
                size += len(data)
                if size >= batch_bytes:
                    yield from _parse(b"".join(parts), columns)
                    parts, size = [], 0
            if parts:
                yield from _parse(b"".join(parts), columns)
    except psycopg.Error as e:
        raise CopyClientError(" ".join(str(e).split())) from None
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.close()


def _parse(text: bytes, columns: Sequence[pa.DataType]) -> Iterator[pa.RecordBatch]:
    read, parse, convert = csv_options(columns, max(1 << 20, len(text) + 1))
    table = pcsv.read_csv(
        pa.BufferReader(text), read_options=read, parse_options=parse, convert_options=convert
    )
    yield from table.to_batches()
