"""Reading one copy range with DuckDB's postgres extension: binary COPY, decoded in C++.

The extension (pinned wheel `duckdb-extension-postgres`) runs `COPY (SELECT ...) TO STDOUT
(FORMAT binary)` over libpq and decodes the rows into DuckDB vectors, which reach Python as
Arrow batches. Against the CSV path (`streambed.copy.client`: psql, a pipe, Arrow's CSV
reader) the source's backend spends less CPU (binary send functions instead of text output
functions and CSV quoting) and no psql process or pipe is needed.

Only columns whose binary form DuckDB decodes to exactly the value the stream's converter
makes of the text form are read natively (`native`): integers, floats, bool, text, varchar,
bytea, numeric(p,s) stored as decimal(p,s), date, time, timestamp and timestamptz (DuckDB
keeps infinity as the stream does; a timestamp beyond 294247 AD, which DuckDB would decode
wrongly, also arrives as text in a guard column and is refused with the stream's error),
and uuid, json and jsonb, which the lake stores as text and DuckDB decodes to exactly
Postgres's text (binary is also cheaper for the source: uuid_send against uuid_out).
Every other column is read as its output function's text, `textin(<typoutput>(column))`
run by the source under the replication session's settings, and converted by
`streambed.lake.convert` as a streamed value is. `char(n)` is
native: DuckDB drops its trailing blanks, and `restore` pads the values to n characters
again, as Postgres stores them. (Bare `bpchar` is not: its trailing blanks are data.
Unconstrained numeric is not: DuckDB reads it as a double.)

The transaction: DuckDB begins the source transaction (REPEATABLE READ, READ ONLY, the
attached database is read-only) at its first statement, `SET TRANSACTION SNAPSHOT`, so the
range's query runs on the same connection under the copy's snapshot.

One DuckDB per process (a Spark Python worker runs its tasks one after another) loads the
extension once, by path, through a symlink named `postgres_scanner` (the wheel names the
file `postgres`, but its entry point is `postgres_scanner_duckdb_cpp_init`). DuckDB runs
one thread and at most `MEMORY_LIMIT` of buffers: a range streams through it. Each thread
(a Spark worker's one, or a copy thread in streambed's process) keeps its attachment of the
source, and so its connection, from one range to the next (`_attach`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg.conninfo import make_conninfo

from streambed.copy.client import CopyClientError
from streambed.lake.types import (
    BOOL,
    BPCHAR,
    BYTEA,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    JSON,
    JSONB,
    NUMERIC,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    VARCHAR,
    column_type,
)
from streambed.pgoutput.messages import RelationColumn
from streambed.source.copy_session import CONNECT_FAILED, copy_params, secret_file

if TYPE_CHECKING:
    import duckdb

NATIVE_OIDS: Final = frozenset(
    {
        BOOL,
        INT2,
        INT4,
        INT8,
        FLOAT4,
        FLOAT8,
        TEXT,
        VARCHAR,
        BYTEA,
        DATE,
        TIME,
        TIMESTAMP,
        TIMESTAMPTZ,
        UUID,  # the lake stores the text; DuckDB's is Postgres's canonical form
        JSON,  # sent as the stored text
        JSONB,  # sent as a version byte and jsonb's output text
    }
)
TIMESTAMP_END: Final = {
    TIMESTAMP: "294247-01-10 04:00:54.775807",
    TIMESTAMPTZ: "294247-01-10 04:00:54.775807+00",
}
"""2^63 - 1 microseconds after 1970: from here on (Postgres goes to 294276 AD) DuckDB's
decoding overflows and wraps around, and the stream's converter refuses the value."""
BATCH_ROWS: Final = 65536
BATCH_BYTES: Final = 64 * 1024 * 1024
MIN_BATCH_ROWS: Final = 16
WIDE_ROW_BYTES: Final = 16 * 1024
"""Rows wider than this on average (`TableInfo.row_bytes`, stored size) are read with the
csv reader: DuckDB fills a vector of 2048 rows before it hands any on, and 2048 such rows,
decompressed and copied to Arrow, would not fit in `MEMORY_LIMIT`."""
MEMORY_LIMIT: Final = "512MB"
"""DuckDB's buffer limit in a copy task; the range streams through in batches."""

_db: duckdb.DuckDBPyConnection | None = None
_db_lock = threading.Lock()


def batch_rows(row_bytes: float) -> int:
    """Rows per Arrow batch: `BATCH_ROWS`, fewer for wide rows so that a batch holds about
    `BATCH_BYTES` (`row_bytes`: the table's estimated bytes a row, out-of-line values
    included, `TableInfo.row_bytes`; 0 unknown). Out-of-line values may be stored
    compressed, so a row is counted as 4 times its stored size."""
    if row_bytes <= 0:
        return BATCH_ROWS
    return max(MIN_BATCH_ROWS, min(BATCH_ROWS, int(BATCH_BYTES / (4 * row_bytes))))


class OutOfMemory(CopyClientError):
    """DuckDB ran out of its memory limit: read the range with the csv reader."""


def native(column: RelationColumn) -> bool:
    """Whether DuckDB's decoding of the column's binary form is the stream's value (after
    `restore`)."""
    if column.type_oid == NUMERIC:
        return column_type(column).kind == "decimal"
    if column.type_oid == BPCHAR:
        return char_length(column) is not None
    return column.type_oid in NATIVE_OIDS


def char_length(column: RelationColumn) -> int | None:
    """n of a `char(n)` column; None for any other column, bare `bpchar` (typmod -1) too."""
    if column.type_oid != BPCHAR:
        return None
    return column.type_modifier - 4 if column.type_modifier > 4 else None


def few_distinct(array: pa.Array) -> bool:
    """Whether at most a quarter of the values are distinct: then `pad_distinct` pays."""
    return len(array) > 0 and 4 * len(pc.unique(array)) <= len(array)


def restore(
    batch: pa.RecordBatch,
    columns: Sequence[RelationColumn],
    where: str = "",
    distinct: Container[int] = (),
) -> pa.RecordBatch:
    """The batch of `columns` as the stream would store it: `char(n)` values padded with
    blanks to n characters again (DuckDB trims them; the columns at the positions in
    `distinct` as dictionary arrays, `pad_distinct`), and a timestamp beyond
    `TIMESTAMP_END` (which DuckDB decodes wrongly; its text is in a guard column,
    `select_query`) refused with the stream's error."""
    arrays = list(batch.columns[: len(columns)])
    guard = len(columns)
    for i, c in enumerate(columns):
        length = char_length(c)
        if length is not None and pa.types.is_string(arrays[i].type):
            arrays[i] = pad_distinct(arrays[i], length) if i in distinct else pad(arrays[i], length)
        if c.type_oid in TIMESTAMP_END:
            beyond = batch.column(guard)
            guard += 1
            if beyond.null_count < len(beyond):
                _refuse(beyond.drop_null(), c, f"{where}.{c.name}")
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names[: len(columns)])


def _refuse(texts: pa.Array, column: RelationColumn, where: str) -> None:
    """Raise the stream's error for values its converter cannot store."""
    from streambed.core.errors import SchemaError
    from streambed.lake.convert import convert_column

    convert_column(texts.cast(pa.binary()).to_pylist(), column_type(column), where=where)
    raise SchemaError(f"{where}: {texts[0]} is beyond 294247 AD; cast the column to text")


def pad(array: pa.Array, width: int) -> pa.Array:
    """Each string followed by blanks up to `width` characters (`utf8_rpad`, which is
    several times slower: it works a character at a time)."""
    if array.offset:
        array = pa.concat_arrays([array])  # a copy starting at offset 0
    count = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=count + 1).astype(np.int64)
    lengths = np.diff(offsets)
    chars = pc.utf8_length(array).fill_null(width).to_numpy(zero_copy_only=False)
    total = np.concatenate(([0], np.cumsum(lengths + np.maximum(width - chars, 0))))
    if total[-1] > np.iinfo(np.int32).max:
        return pc.utf8_rpad(array, width=width, padding=" ")
    out = np.full(int(total[-1]), ord(" "), dtype=np.uint8)
    used = int(offsets[-1] - offsets[0])
    if used:
        data = np.frombuffer(array.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        row = np.repeat(np.arange(count), lengths)
        out[total[:-1][row] + np.arange(used) - (offsets[:-1] - offsets[0])[row]] = data
    return pa.Array.from_buffers(
        pa.string(),
        count,
        [array.buffers()[0], pa.py_buffer(total.astype(np.int32)), pa.py_buffer(out)],
        null_count=array.null_count,
    )


def pad_distinct(array: pa.Array, width: int) -> pa.DictionaryArray:
    """`pad` as a dictionary array: each distinct value is padded once, and the Parquet
    writer takes the dictionary as it is instead of hashing every padded value. For columns
    of `few_distinct` values: codes, blank fillers. A batch whose values are all blank
    (DuckDB hands them on empty) is not hashed at all."""
    if _all_empty(array):
        mask = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
        indices = pa.array(np.zeros(len(array), dtype=np.int32), mask=mask)
        return pa.DictionaryArray.from_arrays(indices, pa.array([" " * width]))
    encoded = array.dictionary_encode()
    return pa.DictionaryArray.from_arrays(encoded.indices, pad(encoded.dictionary, width))


def _all_empty(array: pa.Array) -> bool:
    """Whether every value of a string array is empty or NULL, and one at least is not: its
    offsets neither start nor end apart (no need to look at each value)."""
    if array.null_count == len(array):
        return False
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=array.offset + len(array) + 1)
    return bool(offsets[array.offset] == offsets[-1])


def select_query(
    schema: str,
    table: str,
    columns: Sequence[RelationColumn],
    where: str,
    *,
    outputs: Sequence[Sequence[str]] = (),
    only: bool = True,
) -> str:
    """The range's SELECT: native columns as they are, the others as their output text;
    after them, for each timestamp column, its text where it is beyond `TIMESTAMP_END`.
    From the table alone (`FROM ONLY`) unless `only` is false (a partitioned table).

    A column's text is its type's output function (`outputs[i]`: schema and name, from
    `pg_type.typoutput`) made `text` by `textin`: what pgoutput sends, and what
    `format('%s', column)` makes (the form used when `outputs` is not given), at a quarter
    to a half less of the source's CPU a column."""
    items: list[sql.Composable] = []
    guards: list[sql.Composable] = []
    for i, c in enumerate(columns):
        # Positional names: DuckDB compares names without case ("A" and "a" would clash).
        alias = sql.Identifier(f"c{i}")
        name = sql.Identifier(c.name)
        if native(c):
            items.append(sql.SQL("{} AS {}").format(name, alias))
        elif i < len(outputs):
            text = "CASE WHEN {0} IS NULL THEN NULL ELSE pg_catalog.textin({1}.{2}({0})) END AS {3}"
            function = [sql.Identifier(part) for part in outputs[i]]
            items.append(sql.SQL(text).format(name, *function, alias))
        else:
            text = "CASE WHEN {0} IS NULL THEN NULL ELSE pg_catalog.format('%s', {0}) END AS {1}"
            items.append(sql.SQL(text).format(name, alias))
        end = TIMESTAMP_END.get(c.type_oid)
        if end is not None:
            guard = "CASE WHEN {0} >= {1} AND pg_catalog.isfinite({0}) THEN {0}::text END AS {2}"
            guards.append(sql.SQL(guard).format(name, sql.Literal(end), sql.Identifier(f"g{i}")))
    return (
        sql.SQL("SELECT {} FROM {}{}.{} WHERE {}")
        .format(
            sql.SQL(", ").join(items + guards),
            sql.SQL("ONLY " if only else ""),
            sql.Identifier(schema),
            sql.Identifier(table),
            sql.SQL(where),
        )
        .as_string(None)
    )


def conninfo(url: str, application_name: str, passfile: str) -> tuple[str, str | None]:
    """libpq keywords for the copy's connection, with the replication session's settings,
    and the password to write to `passfile`. The password is not among the keywords:
    DuckDB quotes the whole connection string in some errors ("Unable to connect to
    Postgres at ...")."""
    params = copy_params(url, application_name)
    password = params.pop("password", None)
    if password is not None:
        params["passfile"] = passfile
    return make_conninfo(**params), password


def passfile_text(password: str) -> str:
    """A libpq password file's one line, which matches any server, database and user."""
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    return f"*:*:*:*:{escaped}\n"


def _database() -> duckdb.DuckDBPyConnection:
    """This process's DuckDB with the postgres extension loaded (once: a LOAD checks the
    extension's signature, which costs CPU). Each range gets its own cursor; the source's
    attachment is kept between ranges (`_attach`)."""
    global _db
    import duckdb

    from streambed.server.extensions import extension_path, offline_config

    with _db_lock:
        if _db is None:
            # Nothing is installed: the extension directory is needed only while loading.
            with tempfile.TemporaryDirectory(prefix="streambed-copy-ext-") as tmp:
                config = offline_config(tmp)
                db = duckdb.connect(config={**config, "threads": 1, "memory_limit": MEMORY_LIMIT})
                db.execute("SET enable_progress_bar = false")
                link = os.path.join(tmp, "postgres_scanner.duckdb_extension")
                os.symlink(extension_path("postgres"), link)
                db.execute(f"LOAD {_quote(link)}")
            _db = db
        return _db


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def stream_range(
    url: str,
    snapshot: str,
    query: str,
    *,
    application_name: str,
    batch_rows: int = BATCH_ROWS,
    memory_limit: str = MEMORY_LIMIT,
) -> Iterator[pa.RecordBatch]:
    """The rows of `query` run under `snapshot`, as Arrow batches of DuckDB's types.

    Read through this thread's kept attachment of the source (`_attach`). A kept
    connection that fails before the range's query (the server ended it while it was idle)
    is replaced by a new one, once; any other failure detaches it and is raised: once the
    query runs, a failure is the range's (a backend terminated while it reads is the copy
    manager's to handle, `streambed.source.snapshot.CopyInterrupted`)."""
    import duckdb

    for _ in range(2):
        alias, fresh = _attach(url)
        db = _database().cursor()
        querying = failed = False
        try:
            try:
                db.execute(f"SET memory_limit = {_quote(memory_limit)}")  # one per process
                db.execute("BEGIN")
                # The snapshot first in the transaction, then the connection named for the
                # range while it reads (DuckDB's pool resets the name to `KEPT_NAME` when the
                # transaction ends, DISCARD ALL): one round trip.
                _on_source(
                    db,
                    alias,
                    f"SET TRANSACTION SNAPSHOT {_quote(snapshot)}; "
                    f"SET application_name = {_quote(application_name[:63])}",
                )
                querying = True
                result = db.execute(f"SELECT * FROM postgres_query('{alias}', ?)", [query])
                reader = result.to_arrow_reader(batch_rows)
                while True:
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        break
                    except (pa.ArrowException, OSError) as e:  # DuckDB's error, through Arrow
                        raise _stream_error(e) from None
                    yield batch
                db.execute("COMMIT")
            except duckdb.OutOfMemoryException as e:
                raise OutOfMemory(_message(e)) from None
            except duckdb.Error as e:
                raise CopyClientError(_message(e)) from None
        except CopyClientError:
            failed = True
            if fresh or querying:
                raise
            continue  # a kept connection that ended while idle: once more on a new one
        except BaseException:
            failed = True
            raise
        finally:
            with contextlib.suppress(duckdb.Error):
                db.execute("ROLLBACK")
            with contextlib.suppress(duckdb.Error):
                db.close()
            if failed:
                _detach(alias)
        return


KEPT_NAME: Final = "streambed-copy"
"""The `application_name` of a copy worker's connection, which each range sets to
`streambed-copy <run id>/<range>` while it reads: progress counts only those names
(`streambed.copy.progress`)."""


@dataclass(frozen=True)
class _Attachment:
    alias: str
    key: bytes  # the source's connection keywords, hashed (they hold the password)


_kept: dict[int, _Attachment] = {}
"""Each thread's kept attachment, by `threading.get_ident()`."""


def _source_key(url: str) -> bytes:
    params = copy_params(url, "")
    del params["application_name"]
    return hashlib.sha256(make_conninfo(**params).encode()).digest()


def _attach(url: str) -> tuple[str, bool]:
    """The alias of this thread's attachment of the source at `url`, and whether it was
    attached now or kept from an earlier range. Its connection is named `KEPT_NAME`.

    A Spark Python worker runs its tasks one after another, and a copy thread in
    streambed's own process its tables, so each keeps its attachment between them: the
    next range of a table, or of the next table, reuses the connection (its transaction
    ended with the previous range), and saves a connection's start (TCP, authentication, a
    backend, DuckDB's ATTACH and its catalog queries). One attachment per thread, never
    shared: DuckDB's pool would open a second connection for a second thread, and the
    password file it connected with is gone by then. A range of another source detaches the
    thread's kept one first. The connection ends with the worker (Spark stops Python
    workers idle for a minute), when a range fails on it (`_detach`), when the copy
    manager's copy threads are done (`detach_all`), or after a minute unused (the
    extension's pool closes idle connections)."""
    key = _source_key(url)
    thread = threading.get_ident()
    with _db_lock:
        kept = _kept.get(thread)
        if kept is not None and kept.key == key:
            return kept.alias, False
    if kept is not None:
        _detach(kept.alias)
    alias = _attach_new(url)
    with _db_lock:
        _kept[thread] = _Attachment(alias, key)
    return alias, True


def _attach_new(url: str) -> str:
    """Attach the source at `url` under a new alias; the alias. (On a cursor of its own:
    the process's connection is shared by threads, and a DuckDB connection is not.)"""
    import duckdb

    alias = f"src_{uuid.uuid4().hex}"
    with contextlib.ExitStack() as secrets:
        password = copy_params(url, KEPT_NAME).get("password")
        passfile = ""
        if password is not None:  # needed only while connecting
            _, passfile = secrets.enter_context(secret_file(passfile_text(password)))
        keywords, _ = conninfo(url, KEPT_NAME, passfile)
        db = _database().cursor()
        try:
            db.execute(f"ATTACH {_quote(keywords)} AS {alias} (TYPE postgres, READ_ONLY)")
        except duckdb.Error as e:
            raise CopyClientError(_message(e)) from None
        finally:
            db.close()
    return alias


def _detach(alias: str) -> None:
    """Detach the kept attachment `alias`, closing its connection (best effort). By alias,
    not by thread: a range's generator may be finalized by the garbage collector in another
    thread."""
    with _db_lock:
        for thread, kept in list(_kept.items()):
            if kept.alias == alias:
                del _kept[thread]
    _detach_alias(alias)


def detach_all() -> None:
    """Detach every thread's kept attachment, closing their connections (best effort): for
    the copy manager once its copy threads have ended (no range may be reading)."""
    with _db_lock:
        kept = list(_kept.values())
        _kept.clear()
    for attachment in kept:
        _detach_alias(attachment.alias)


def _detach_alias(alias: str) -> None:
    import duckdb

    db = _database().cursor()
    try:
        with contextlib.suppress(duckdb.Error):
            db.execute(f"DETACH {alias}")
    finally:
        db.close()


def _on_source(db: duckdb.DuckDBPyConnection, alias: str, statement: str) -> None:
    db.execute(f"CALL postgres_execute('{alias}', ?)", [statement])


def _stream_error(error: BaseException) -> CopyClientError:
    """An error DuckDB raised while the rows streamed: Arrow's reader re-raises it as its
    own (`OSError: IO Error: Unable to read binary COPY data from Postgres: ...`)."""
    text = str(error)
    if "Out of Memory" in text:
        return OutOfMemory(_message(error))
    return CopyClientError(_message(error))


def _message(error: BaseException) -> str:
    """The source's message out of DuckDB's wrapping ("IO Error: Unable to query
    PostgreSQL: ERROR:  ...")."""
    text = re.sub(r"password=('(\\.|[^'])*'|\S+)", "password=***", " ".join(str(error).split()))
    text = text.split(" Possible solutions:")[0]  # DuckDB's tuning hints after an OOM
    connect = CONNECT_FAILED.search(text)
    if connect is not None:
        # libpq's words on a connection it could not open are kept whole: they say that the
        # source could not be reached (and the server's FATAL after them why), which
        # `streambed.source.snapshot.connect_failed` looks for.
        return text[connect.start() :].strip()
    for mark in ("ERROR: ", "FATAL: "):
        if mark in text:
            return text[text.index(mark) + len(mark) :].strip()
    return text
