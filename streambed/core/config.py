"""Configuration from STREAMBED_* environment variables.

Every setting is a field of `Settings` with its variable name, default and help text in
the field metadata; `docs/configuration.md` and the example `config/streambed.env` are
generated from it (`make docs`). `Settings.from_env` validates
everything at start and raises one ConfigError that names each bad variable and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from streambed.core.errors import ConfigError
from streambed.core.failpoints import unknown_names
from streambed.core.names import pattern_problem, split_list

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
PREFIX = "STREAMBED_"
CUT = ("#", "?")  # where pyiceberg's urlparse ends a location's path
OTHER_VARIABLES = frozenset(
    {"STREAMBED_FAILPOINTS", "STREAMBED_PSQL", "STREAMBED_PASSWORD", "STREAMBED_WORKER_GC_FULL"}
)
"""`STREAMBED_*` variables that are not settings, read where they are used: failpoints
(tests), the copy's psql (docs/initial-copy.md), the password of the SCRAM verifier helper,
Spark workers' full collections (for measuring, `streambed.spark.worker_heap`)."""


def _setting(env: str, help: str, default: Any = dataclasses.MISSING, secret: bool = False) -> Any:
    meta = {"env": env, "help": help, "secret": secret}
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    source_url: str = _setting(
        "STREAMBED_SOURCE_URL",
        "libpq URL of the source database, e.g. postgresql://user:pass@host:5432/db. The role "
        "needs REPLICATION (or superuser) and SELECT on the published tables.",
        secret=True,
    )
    publication: str = _setting(
        "STREAMBED_PUBLICATION",
        "Publication to replicate. Created FOR ALL TABLES when missing; never dropped.",
        "streambed",
    )
    slot: str = _setting(
        "STREAMBED_SLOT",
        "Logical replication slot (pgoutput). Created when missing; dropped only when the "
        "source has invalidated it (then created again, and every table copied again).",
        "streambed",
    )
    include_tables: tuple[str, ...] = _setting(
        "STREAMBED_INCLUDE_TABLES",
        "Comma-separated schema.table names or shell patterns (public.*) to replicate, "
        "matched case-sensitively. A part holding a dot, a comma or one of *?[ goes in "
        'double quotes as in SQL, and is then taken literally: public."a,b", "x.y".*. '
        "Empty: every table in the publication.",
        (),
    )
    exclude_tables: tuple[str, ...] = _setting(
        "STREAMBED_EXCLUDE_TABLES",
        "Comma-separated schema.table names or patterns to leave out, written as for "
        "STREAMBED_INCLUDE_TABLES; applied after the include list. A table left out "
        "later is forgotten at the next start (no longer served; its Iceberg table is "
        "kept); included again, it is copied again.",
        (),
    )
    data_dir: Path = _setting(
        "STREAMBED_DATA_DIR",
        "Local directory for state, the embedded catalog, the local warehouse and spill files.",
        Path("streambed-data"),
    )
    warehouse: str = _setting(
        "STREAMBED_WAREHOUSE",
        "Where table files live: a local directory (default <data_dir>/warehouse), or "
        "s3://bucket/prefix. Setting STREAMBED_S3_BUCKET also selects S3. Its path may not "
        "hold `#` or `?` (Iceberg's Python library reads a location only up to either).",
        "",
    )
    s3_bucket: str = _setting("STREAMBED_S3_BUCKET", "S3 bucket for the warehouse.", "")
    s3_prefix: str = _setting("STREAMBED_S3_PREFIX", "Key prefix inside the bucket.", "streambed")
    s3_endpoint: str = _setting(
        "STREAMBED_S3_ENDPOINT",
        "S3 endpoint URL for S3-compatible stores (MinIO, SeaweedFS); empty for AWS.",
        "",
    )
    s3_region: str = _setting("STREAMBED_S3_REGION", "S3 region.", "us-east-1")
    s3_access_key_id: str = _setting(
        "STREAMBED_S3_ACCESS_KEY_ID",
        "S3 access key; empty uses the AWS default chain.",
        "",
        secret=True,
    )
    s3_secret_access_key: str = _setting(
        "STREAMBED_S3_SECRET_ACCESS_KEY", "S3 secret key.", "", secret=True
    )
    catalog_uri: str = _setting(
        "STREAMBED_CATALOG_URI",
        "Iceberg catalog: empty for the embedded SQLite catalog in data_dir, a sqlite:/// URL, "
        "or the http(s):// URI of an Iceberg REST catalog.",
        "",
    )
    catalog_name: str = _setting(
        "STREAMBED_CATALOG_NAME", "Name of the Iceberg catalog.", "streambed"
    )
    catalog_token: str = _setting(
        "STREAMBED_CATALOG_TOKEN", "Bearer token for a REST catalog.", "", secret=True
    )
    flush_rows: int = _setting(
        "STREAMBED_FLUSH_ROWS", "Flush when this many changes are buffered.", 100_000
    )
    flush_bytes: int = _setting(
        "STREAMBED_FLUSH_BYTES",
        "Flush when buffered changes take this many bytes (a global memory bound).",
        256 * 1024 * 1024,
    )
    flush_interval: float = _setting(
        "STREAMBED_FLUSH_INTERVAL",
        "Flush at least this often, in seconds, when anything is buffered. When flushes take "
        "longer than this (merges that rewrite large tables), buffered changes wait as long as "
        "the last few flushes took (their median), so the loop keeps half its time for "
        "reading; while the stream catches up on a backlog (commits more than 30 s old and "
        "older than four such cycles of waiting and flushing), 30 times this.",
        2.0,
    )
    txn_memory_bytes: int = _setting(
        "STREAMBED_TXN_MEMORY_BYTES",
        "Memory for staged streamed transactions before they spill to disk; a large committed "
        "transaction is read back in segments of 1/8 and written in parts of 1/2 of it, so "
        "peak memory stays near this plus a constant (see docs/benchmarks.md).",
        64 * 1024 * 1024,
    )
    on_incompatible_schema: str = _setting(
        "STREAMBED_ON_INCOMPATIBLE_SCHEMA",
        "What to do when a source column changes type in a way Iceberg cannot follow in place "
        "(anything but int→bigint, real→double, a wider numeric precision): stop (exit with a "
        "message naming the column) or rewrite (rewrite the lake table, converting each "
        "stored value through its Postgres text form).",
        "stop",
    )
    copy_reader: str = _setting(
        "STREAMBED_COPY_READER",
        "How copy tasks read the source: duckdb (binary COPY decoded by DuckDB's postgres "
        "extension, the fastest) or csv (psql and Arrow's CSV reader; for a Postgres-compatible "
        "source whose binary COPY DuckDB cannot read).",
        "duckdb",
    )
    copy_local_bytes: int = _setting(
        "STREAMBED_COPY_LOCAL_BYTES",
        "Tables of at most this many bytes (heap and TOAST, when their copy starts) are copied "
        "by streambed's own process, their ranges read side by side by up to four threads "
        "(one a core, and no more than a local[N] STREAMBED_SPARK_MASTER's N), without "
        "Spark: on one machine that is as fast or faster, and a first "
        "start of only such tables need not wait for Spark. Larger tables are copied on "
        "Spark, which spreads them over every core of the machine or cluster. 0 copies every "
        "table on Spark.",
        256 * 1024 * 1024,
    )
    merge_local_bytes: int = _setting(
        "STREAMBED_MERGE_LOCAL_BYTES",
        "A flush whose rewrite is at most this many bytes (the data files it must rewrite, as "
        "stored, plus its new rows in memory) is merged by streambed's own process with "
        "pyarrow, in milliseconds, without a Spark job; larger rewrites run on Spark. The "
        "in-process merge holds the rewrite in memory: a rewrite whose rows would take more "
        "than four times this in memory (well-compressed files) runs on Spark too. 0 merges "
        "every rewrite on Spark.",
        64 * 1024 * 1024,
    )
    write_mode: str = _setting(
        "STREAMBED_WRITE_MODE",
        "How a flush removes updated and deleted rows from existing data files. "
        "merge-on-read: a file loses a few rows through an Iceberg v2 position-delete file "
        "written next to it (bytes per changed row, not per file), and is rewritten only "
        "once STREAMBED_REWRITE_SHARE of its rows are gone; readers must apply delete files "
        "(DuckDB, pyiceberg, Spark, Trino do). copy-on-write: every file holding a changed "
        "row is rewritten without it (no delete files, for readers that cannot apply them).",
        "merge-on-read",
    )
    rewrite_share: float = _setting(
        "STREAMBED_REWRITE_SHARE",
        "With STREAMBED_WRITE_MODE=merge-on-read, a data file is rewritten instead of "
        "getting a delete file once this share of its rows (0..1, counting the rows its "
        "pending delete files already hide) is removed: 0.2 writes at most 5 bytes per "
        "changed byte and keeps readers from skipping more than a fifth of a file. 0 "
        "rewrites every file that loses a row.",
        0.2,
    )
    spark_master: str = _setting(
        "STREAMBED_SPARK_MASTER",
        "Spark master: local[*], spark://host:7077, or sc://host:15002 (Spark Connect). A "
        "cluster's executors need streambed installed: its tasks and Python daemon are "
        "streambed's.",
        "local[*]",
    )
    spark_class_archive: str = _setting(
        "STREAMBED_SPARK_CLASS_ARCHIVE",
        "on or off. on: a local Spark's JVM starts from a class-data-sharing archive of the "
        "classes an earlier run loaded (data_dir/spark; about 200 MB, built once in the "
        "background at the lowest priority two minutes into the first run, and again after a "
        "Java or Spark upgrade); Spark then starts several seconds sooner. Linux only.",
        "on",
    )
    sweep_interval: float = _setting(
        "STREAMBED_SWEEP_INTERVAL",
        "Hours between the sweeps `streambed run` makes of unreferenced data and metadata "
        "files (files no snapshot references, left by crashes and expired snapshots; as "
        "`streambed sweep` does); the first sweep "
        "runs 10 minutes after start, or sooner when the interval is shorter. 0 turns the "
        "sweeps off.",
        24.0,
    )
    sweep_min_age: float = _setting(
        "STREAMBED_SWEEP_MIN_AGE",
        "Hours: a sweep keeps an unreferenced data or metadata file younger than this (the "
        "files a running streambed is about to commit are young). The default of `streambed "
        "sweep --older-than` too.",
        72.0,
    )
    snapshot_retention: float = _setting(
        "STREAMBED_SNAPSHOT_RETENTION",
        "Hours a lake table keeps its older snapshots for time travel (streambed.at_time, "
        "at_lsn) before `streambed run` expires them; the current snapshot is always kept. "
        "Expired snapshots' replaced data files and manifests are then removed by the sweep.",
        1.0,
    )
    snapshot_max: int = _setting(
        "STREAMBED_SNAPSHOT_MAX",
        "At most this many snapshots per lake table (the newest), however young: every "
        "snapshot kept makes each commit of the table slower (2-3 ms each with pyiceberg; "
        "see docs/benchmarks.md).",
        50,
    )
    heartbeat_interval: float = _setting(
        "STREAMBED_HEARTBEAT_INTERVAL",
        "Seconds between heartbeat messages written to the source WAL so an idle slot advances; "
        "0 turns heartbeats off. Also how often the slot's margin before "
        "max_slot_wal_keep_size is read (every 60 s when heartbeats are off).",
        10.0,
    )
    status_interval: float = _setting(
        "STREAMBED_STATUS_INTERVAL", "Seconds between standby status updates to the source.", 5.0
    )
    query_listen: str = _setting(
        "STREAMBED_QUERY_LISTEN",
        "host:port of the Postgres-wire query server; empty turns it off.",
        "127.0.0.1:5433",
    )
    query_users: str = _setting(
        "STREAMBED_QUERY_USERS",
        "Query server users as user:password,user2:password2 (SCRAM-SHA-256 verifiers are "
        "derived at start). With neither this nor STREAMBED_QUERY_USERS_FILE, no password is "
        "asked (trust, with a warning), which is allowed only on a loopback listen address.",
        "",
        secret=True,
    )
    query_users_file: str = _setting(
        "STREAMBED_QUERY_USERS_FILE",
        "File of user:SCRAM-SHA-256$... lines (pg_authid format; "
        "`python -m streambed.server.wire.auth USER` prints one), merged with "
        "STREAMBED_QUERY_USERS.",
        "",
    )
    query_tls_cert: str = _setting(
        "STREAMBED_QUERY_TLS_CERT", "PEM certificate chain for the query server's TLS.", ""
    )
    query_tls_key: str = _setting(
        "STREAMBED_QUERY_TLS_KEY", "PEM private key for the query server's TLS.", ""
    )
    query_tls: str = _setting(
        "STREAMBED_QUERY_TLS",
        "off, on or require. Empty: on when a certificate is set, else off. require refuses "
        "plaintext connections (28000).",
        "",
    )
    query_max_connections: int = _setting(
        "STREAMBED_QUERY_MAX_CONNECTIONS",
        "Concurrent authenticated query sessions; more are refused with 53300 "
        "too_many_connections. Connections still authenticating do not count here "
        "(STREAMBED_QUERY_MAX_PENDING_CONNECTIONS).",
        100,
    )
    query_max_pending_connections: int = _setting(
        "STREAMBED_QUERY_MAX_PENDING_CONNECTIONS",
        "Query connections accepted and not yet authenticated; more are refused at once with "
        "53300, without a thread or a read. Each is closed when "
        "STREAMBED_QUERY_AUTH_TIMEOUT runs out.",
        64,
    )
    query_auth_timeout: float = _setting(
        "STREAMBED_QUERY_AUTH_TIMEOUT",
        "Seconds a query client has from connecting until it is authenticated (TLS handshake, "
        "startup packet and password exchange together, as Postgres' "
        "authentication_timeout); then the connection is closed. 1 to 600.",
        60.0,
    )
    query_statement_timeout: float = _setting(
        "STREAMBED_QUERY_STATEMENT_TIMEOUT",
        "Default statement_timeout of every query session, in seconds (0: none). A session "
        "may SET its own; exceeding it cancels the statement with 57014.",
        0.0,
    )
    query_max_message_bytes: int = _setting(
        "STREAMBED_QUERY_MAX_MESSAGE_BYTES",
        "Largest message a query client may send; a larger one closes that connection (08P01).",
        64 * 1024 * 1024,
    )
    metrics_listen: str = _setting(
        "STREAMBED_METRICS_LISTEN",
        "host:port of `streambed run`'s HTTP endpoint for Prometheus (/metrics) and for "
        "health checks (/healthz, /readyz); empty turns it off. It has no authentication: "
        "listen on a loopback or private address (docs/metrics.md).",
        "127.0.0.1:9188",
    )
    log_level: str = _setting("STREAMBED_LOG_LEVEL", "debug, info, warning or error.", "info")
    log_format: str = _setting("STREAMBED_LOG_FORMAT", "text or json.", "text")

    # ---- derived values -------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.data_dir / "state.db"

    @property
    def spill_dir(self) -> Path:
        return self.data_dir / "spill"

    @property
    def on_s3(self) -> bool:
        return bool(self.s3_bucket) or self.warehouse.startswith("s3://")

    @property
    def warehouse_uri(self) -> str:
        """file:///abs/path or s3://bucket/prefix."""
        if self.s3_bucket:
            prefix = self.s3_prefix.strip("/")
            return f"s3://{self.s3_bucket}/{prefix}" if prefix else f"s3://{self.s3_bucket}"
        if self.warehouse.startswith("s3://"):
            return self.warehouse.rstrip("/")
        path = Path(self.warehouse) if self.warehouse else self.data_dir / "warehouse"
        return f"file://{path.resolve()}"  # not percent-encoded (streambed.lake.locations)

    @property
    def catalog_url(self) -> str:
        return self.catalog_uri or f"sqlite:///{(self.data_dir / 'catalog.db').resolve()}"

    @property
    def query_host_port(self) -> tuple[str, int] | None:
        return _host_port(self.query_listen)

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        return _host_port(self.metrics_listen)

    def redacted_source_url(self) -> str:
        return redact_url(self.source_url)

    # ---- loading --------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in dataclasses.fields(cls):
            name = f.metadata["env"]
            raw = env.get(name)
            if raw is None or raw == "":
                if f.default is dataclasses.MISSING:
                    problems.append(f"{name} is not set: {f.metadata['help']}")
                elif raw == "" and f.type == "str":
                    values[f.name] = ""  # set but empty: e.g. STREAMBED_QUERY_LISTEN= turns it off
                continue
            try:
                values[f.name] = _parse(f, raw)
            except ValueError as e:
                problems.append(f"{name}={_show(f, raw)} is invalid: {e}")
        if not problems:
            settings = cls(**values)
            problems = settings._problems()
        problems += unknown_variables(env)
        bad_failpoints = unknown_names()
        if bad_failpoints:
            problems.append(
                f"STREAMBED_FAILPOINTS names unknown failpoints {', '.join(bad_failpoints)}"
            )
        if problems:
            raise ConfigError("configuration is invalid:\n  " + "\n  ".join(problems))
        return settings

    def _problems(self) -> list[str]:
        out: list[str] = []
        url = urlsplit(self.source_url)
        if url.scheme not in ("postgres", "postgresql"):
            out.append(
                "STREAMBED_SOURCE_URL must start with postgresql:// "
                f"(got {redact_url(self.source_url)!r})"
            )
        for env, name in (
            ("STREAMBED_PUBLICATION", self.publication),
            ("STREAMBED_SLOT", self.slot),
        ):
            if not _NAME.match(name):
                out.append(
                    f"{env}={name!r} must be a lowercase identifier (letters, digits, _; "
                    "at most 63 characters)"
                )
        for env, value in (
            ("STREAMBED_FLUSH_ROWS", self.flush_rows),
            ("STREAMBED_FLUSH_BYTES", self.flush_bytes),
            ("STREAMBED_TXN_MEMORY_BYTES", self.txn_memory_bytes),
        ):
            if value <= 0:
                out.append(f"{env}={value} must be a positive number")
        if self.flush_interval <= 0:
            out.append(f"STREAMBED_FLUSH_INTERVAL={self.flush_interval} must be above 0 seconds")
        if self.status_interval <= 0:
            out.append(f"STREAMBED_STATUS_INTERVAL={self.status_interval} must be above 0 seconds")
        if self.heartbeat_interval < 0:
            out.append("STREAMBED_HEARTBEAT_INTERVAL must be 0 (off) or a positive number")
        if self.copy_local_bytes < 0:
            out.append(
                f"STREAMBED_COPY_LOCAL_BYTES={self.copy_local_bytes} must be 0 (copy every table "
                "on Spark) or a positive number of bytes"
            )
        if self.merge_local_bytes < 0:
            out.append(
                f"STREAMBED_MERGE_LOCAL_BYTES={self.merge_local_bytes} must be 0 (merge every "
                "rewrite on Spark) or a positive number of bytes"
            )
        if self.write_mode not in ("merge-on-read", "copy-on-write"):
            out.append(
                f"STREAMBED_WRITE_MODE={self.write_mode!r} must be merge-on-read or copy-on-write"
            )
        if not 0 <= self.rewrite_share <= 1:
            out.append(f"STREAMBED_REWRITE_SHARE={self.rewrite_share!r} must be between 0 and 1")
        if self.copy_reader not in ("duckdb", "csv"):
            out.append(f"STREAMBED_COPY_READER={self.copy_reader!r} must be duckdb or csv")
        for name, hours in (
            ("STREAMBED_SWEEP_INTERVAL", self.sweep_interval),
            ("STREAMBED_SWEEP_MIN_AGE", self.sweep_min_age),
            ("STREAMBED_SNAPSHOT_RETENTION", self.snapshot_retention),
        ):
            if not 0 <= hours < float("inf"):
                out.append(f"{name}={hours!r} must be a number of hours, 0 or more")
        if self.snapshot_max < 1:
            out.append(f"STREAMBED_SNAPSHOT_MAX={self.snapshot_max} must be 1 or more")
        if self.spark_class_archive not in ("on", "off"):
            out.append(
                f"STREAMBED_SPARK_CLASS_ARCHIVE={self.spark_class_archive!r} must be on or off"
            )
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            out.append(f"STREAMBED_LOG_LEVEL={self.log_level!r}: use debug, info, warning or error")
        if self.on_incompatible_schema not in ("stop", "rewrite"):
            out.append(
                f"STREAMBED_ON_INCOMPATIBLE_SCHEMA={self.on_incompatible_schema!r}: "
                "use stop or rewrite"
            )
        if self.log_format not in ("text", "json"):
            out.append(f"STREAMBED_LOG_FORMAT={self.log_format!r}: use text or json")
        if self.catalog_uri and urlsplit(self.catalog_uri).scheme not in (
            "sqlite",
            "http",
            "https",
        ):
            out.append(
                "STREAMBED_CATALOG_URI must be a sqlite:/// URL or an http(s):// REST catalog URI"
            )
        if self.s3_bucket and self.warehouse and not self.warehouse.startswith("s3://"):
            out.append(
                "STREAMBED_WAREHOUSE is a local path but STREAMBED_S3_BUCKET is set; "
                "set one of them"
            )
        cut = [c for c in CUT if c in self.warehouse_uri]
        if cut:  # pyiceberg reads a location only up to either (streambed.lake.locations)
            where = (
                "STREAMBED_S3_BUCKET / STREAMBED_S3_PREFIX"
                if self.s3_bucket
                else "STREAMBED_WAREHOUSE"
                if self.warehouse
                else "STREAMBED_DATA_DIR"
            )
            out.append(
                f"the lake's location {self.warehouse_uri} has {' and '.join(map(repr, cut))}, "
                f"which Iceberg's Python library reads as the end of a path: set {where} to "
                "a path without them"
            )
        if self.on_s3 and bool(self.s3_access_key_id) != bool(self.s3_secret_access_key):
            out.append(
                "set both STREAMBED_S3_ACCESS_KEY_ID and STREAMBED_S3_SECRET_ACCESS_KEY, or neither"
            )
        for env, address, example in (
            ("STREAMBED_QUERY_LISTEN", self.query_listen, "127.0.0.1:5433"),
            ("STREAMBED_METRICS_LISTEN", self.metrics_listen, "127.0.0.1:9188"),
        ):
            _host, sep, number = address.rpartition(":")
            if address and (not sep or not number.isdigit() or not 0 < int(number) < 65536):
                out.append(f"{env}={address!r} must be host:port, e.g. {example}")
        out.extend(self._query_problems())
        return out

    def _query_problems(self) -> list[str]:
        out: list[str] = []
        mode = self.query_tls.strip().lower()
        if mode not in ("", "off", "on", "require"):
            out.append(f"STREAMBED_QUERY_TLS={self.query_tls!r}: use off, on or require")
        if mode in ("on", "require") and not (self.query_tls_cert and self.query_tls_key):
            out.append(
                f"STREAMBED_QUERY_TLS={mode} needs STREAMBED_QUERY_TLS_CERT and "
                "STREAMBED_QUERY_TLS_KEY"
            )
        if bool(self.query_tls_cert) != bool(self.query_tls_key):
            out.append("set both STREAMBED_QUERY_TLS_CERT and STREAMBED_QUERY_TLS_KEY, or neither")
        for env, path in (
            ("STREAMBED_QUERY_TLS_CERT", self.query_tls_cert),
            ("STREAMBED_QUERY_TLS_KEY", self.query_tls_key),
            ("STREAMBED_QUERY_USERS_FILE", self.query_users_file),
        ):
            if path and not Path(path).is_file():
                out.append(f"{env}={path!r}: no such file")
        listen_host = self.query_listen.rpartition(":")[0] or "127.0.0.1"
        if (
            self.query_listen
            and listen_host not in _LOOPBACK
            and not (self.query_users or self.query_users_file)
        ):
            out.append(
                f"STREAMBED_QUERY_LISTEN={self.query_listen!r} accepts connections from other "
                "machines, and no passwords are set: set STREAMBED_QUERY_USERS or "
                "STREAMBED_QUERY_USERS_FILE, or listen on 127.0.0.1"
            )
        if self.query_max_connections < 1:
            out.append(
                f"STREAMBED_QUERY_MAX_CONNECTIONS={self.query_max_connections} must be at least 1"
            )
        if self.query_max_pending_connections < 1:
            out.append(
                "STREAMBED_QUERY_MAX_PENDING_CONNECTIONS="
                f"{self.query_max_pending_connections} must be at least 1"
            )
        if not 1 <= self.query_auth_timeout <= 600:
            out.append(
                f"STREAMBED_QUERY_AUTH_TIMEOUT={self.query_auth_timeout} must be between 1 and "
                "600 seconds"
            )
        if self.query_statement_timeout < 0:
            out.append(
                f"STREAMBED_QUERY_STATEMENT_TIMEOUT={self.query_statement_timeout} must be 0 "
                "(none) or a number of seconds"
            )
        if self.query_max_message_bytes < 1024:
            out.append(
                f"STREAMBED_QUERY_MAX_MESSAGE_BYTES={self.query_max_message_bytes} must be at "
                "least 1024"
            )
        for env_name, patterns in (
            ("STREAMBED_INCLUDE_TABLES", self.include_tables),
            ("STREAMBED_EXCLUDE_TABLES", self.exclude_tables),
        ):
            out += [f"{env_name}: {p}" for p in map(pattern_problem, patterns) if p]
        for item in self.query_users.split(","):
            user, sep, password = item.strip().partition(":")
            if item.strip() and not (sep and user and password):
                out.append("STREAMBED_QUERY_USERS must be user:password pairs separated by commas")
                break
        return out


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    kind = f.type
    if kind == "int":
        return int(raw.replace("_", ""))
    if kind == "float":
        return float(raw)
    if kind == "Path":
        return Path(raw)
    if kind == "tuple[str, ...]":
        return tuple(split_list(raw))
    return raw


def _show(f: dataclasses.Field[Any], raw: str) -> str:
    if f.metadata["secret"]:
        return redact_url(raw) if "://" in raw else "<hidden>"
    return repr(raw)


def redact_url(url: str) -> str:
    """The URL (or key=value conninfo) with any password replaced by ***."""
    if "://" not in url:
        return _CONNINFO_PASSWORD.sub(r"\1***", url)
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        parts = parts._replace(netloc=f"{user}:***@{netloc[1]}")
    if "password" in parts.query.lower():
        parts = parts._replace(query=_QUERY_PASSWORD.sub(r"\1***", parts.query))
    return urlunsplit(parts)


def variable_names() -> list[str]:
    """Every `STREAMBED_*` variable streambed reads."""
    return sorted({f.metadata["env"] for f in dataclasses.fields(Settings)} | OTHER_VARIABLES)


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """A problem for each `STREAMBED_*` variable in `env` that streambed does not read: a
    misspelt name would otherwise be ignored, and its setting silently left at the default
    (a bucket name, and the lake written to the local disk instead)."""
    known = variable_names()
    problems = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in known):
        short = name[len(PREFIX) :]  # compared without the prefix all share
        close = difflib.get_close_matches(short, [k[len(PREFIX) :] for k in known], 1, 0.8)
        group = short.split("_", 1)[0]
        siblings = [k for k in known if k[len(PREFIX) :].split("_", 1)[0] == group]
        if close:
            hint = f"; did you mean {PREFIX}{close[0]}?"
        elif siblings:
            hint = f"; the {PREFIX}{group}_* variables are {', '.join(siblings)}"
        else:
            hint = ""
        problems.append(
            f"{name} is not a streambed variable{hint} (docs/configuration.md lists them); "
            "correct its name or unset it"
        )
    return problems


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a validated host:port setting (no host: 127.0.0.1); None if empty."""
    if not address:
        return None
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


_CONNINFO_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)


def reference_markdown() -> str:
    """docs/configuration.md, generated from the Settings fields."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `streambed/core/config.py` by `python -m streambed.core.config`"
        " (`make docs`).",
        "",
        "| Variable | Default | Meaning |",
        "| --- | --- | --- |",
    ]
    for f in dataclasses.fields(Settings):
        if f.default is dataclasses.MISSING:
            default = "(required)"
        elif isinstance(f.default, tuple):
            default = ",".join(f.default) or "(empty)"
        else:
            default = str(f.default) if str(f.default) != "" else "(empty)"
        secret = " Secret: never logged." if f.metadata["secret"] else ""
        lines.append(f"| `{f.metadata['env']}` | `{default}` | {f.metadata['help']}{secret} |")
    lines += [
        "| `STREAMBED_FAILPOINTS` | (empty) | Testing only: comma-separated failpoint names "
        "at which the process kills itself (see docs/operations.md). |",
        "| `STREAMBED_PSQL` | (unset) | The psql the copy's csv reader runs; empty: none, "
        "psycopg reads instead (see docs/initial-copy.md). |",
        "",
        "Any other `STREAMBED_*` variable in the environment stops the start with exit 2 and "
        "its name: a misspelt variable would otherwise leave its setting at the default.",
        "",
    ]
    return "\n".join(lines)


def example_env() -> str:
    """config/streambed.env: every variable with its help text and default, commented out."""
    lines = [
        "# streambed configuration example: every STREAMBED_* variable, its meaning and default.",
        "# Generated from streambed/core/config.py by `make docs`; see docs/configuration.md.",
        "# Use it as `docker run --env-file`, or in a shell: set -a; . ./streambed.env; set +a",
        "# Only STREAMBED_SOURCE_URL is required; uncomment a line to change a default.",
    ]
    for f in dataclasses.fields(Settings):
        lines.append("")
        lines += ["# " + line for line in textwrap.wrap(f.metadata["help"], 96)]
        if f.default is dataclasses.MISSING:
            lines.append(f"{f.metadata['env']}=postgresql://streambed:change-me@localhost:5432/app")
        elif isinstance(f.default, tuple):
            lines.append(f"#{f.metadata['env']}={','.join(f.default)}")
        else:
            lines.append(f"#{f.metadata['env']}={f.default}")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--env"]:
        sys.stdout.write(example_env())
    else:
        sys.stdout.write(reference_markdown())
