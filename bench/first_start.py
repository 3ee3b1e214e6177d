"""First start: how long a new `streambed run` takes to copy a table, beside a cold DuckDB.

    .venv/bin/python bench/first_start.py [--scale 10] [--repeat 2] [--tree DIR]
                                          [--class-archive] [--tables N [--rows R]]

A throwaway Postgres 15 gets `pgbench -i -s <scale>` (10 → 1M accounts) and a publication
of all tables. Each round starts `streambed run` as a user would, in a new process with a
new data directory (`STREAMBED_SPARK_MASTER=local[2]`), reads its log, and notes when it
starts Spark, when the copy of `pgbench_accounts` starts and when it commits; then it
sends SIGINT and waits for the process to end. Just before that it reads the CPU time of
Spark's Python worker daemons (`streambed.spark.daemon` processes, `pyspark.daemon` in
an older tree, started by the JVM, one per kind of worker) from /proc.

The reference is what a user would otherwise run once: a new Python process that loads
DuckDB 1.5.5's postgres extension and writes the same table to one Parquet file.

Rounds run without Spark's class archive (`STREAMBED_SPARK_CLASS_ARCHIVE=off`: a first start
has none). `--class-archive` first lets one start build the archive (and waits for its
builder), then runs each round twice, without and with that archive placed in the new data
directory, as a later start of the same installation would have it.

`--tables N` copies instead N small tables (`many_0001`, ...: an integer key, an md5 text
and a numeric(10,2), `--rows` rows each, 5,000 by default), as a first start of a database
of many small tables does: each table is its own copy job and commit, two at a time. It
notes when the first copy starts and when the last commits; the reference is one DuckDB
process that attaches the source once and writes each table to its own Parquet file.

`--tree` runs the streambed of another checkout (e.g. a worktree of an older commit) with
this script, to compare two versions on the same machine. The tree's `streambed` package is
byte-compiled first (`__pycache__`, ignored by git), as `pip install` leaves an installed
one. Nothing else is written outside a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.initial_load import _duckdb_extension, pgbench_accounts
from streambed.copy.client import find_psql
from tests.fixtures.postgres import ThrowawayPostgres, free_port

TABLE = "public.pgbench_accounts"
DUCKDB_COPY = """
import sys, duckdb
db = duckdb.connect(config={"allow_unsigned_extensions": "true"})
db.execute(f"LOAD '{sys.argv[1]}'")
db.execute(f"ATTACH '{sys.argv[2]}' AS src (TYPE postgres, READ_ONLY)")
for i, table in enumerate(sys.argv[4:]):
    db.execute(f"COPY (SELECT * FROM src.{table}) TO '{sys.argv[3]}-{i}.parquet' (FORMAT parquet)")
"""


def many_tables(url: str, count: int, rows: int) -> list[str]:
    """(Re)create `count` tables of `rows` rows each; their qualified names."""
    names = [f"public.many_{i:04d}" for i in range(1, count + 1)]
    with psycopg.connect(url, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text, n numeric(10,2))")
            conn.execute(
                f"INSERT INTO {name} SELECT g, md5(g::text), g / 7.0 "
                f"FROM generate_series(1, {rows}) g"
            )
        conn.execute("VACUUM ANALYZE")
    return names


def daemon_cpu() -> list[float]:
    """CPU seconds of each Spark Python worker daemon (its forked workers not included)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            command = (stat.parent / "cmdline").read_bytes().split(b"\0")
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent = Path(f"/proc/{fields[1]}/cmdline")
        try:
            parent_is_java = b"java" in parent.read_bytes().split(b"\0")[0]
        except OSError:
            continue
        daemon = b"pyspark.daemon" in command or b"streambed.spark.daemon" in command
        if daemon and parent_is_java:
            found.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return found


def first_start(
    tree: Path,
    url: str,
    env: dict[str, str],
    archive: Path | None = None,
    keep: Path | None = None,
    tables: Sequence[str] = (TABLE,),
) -> dict[str, float]:
    """One `streambed run` on a new data directory: seconds from the start to each event
    ("copied": when the last of `tables` committed its copy). `archive`: a directory
    holding a built class archive to start with; `keep`: the data directory to use and
    keep (its class archive is recorded and built)."""
    waiting = set(tables)
    with tempfile.TemporaryDirectory(prefix="streambed-bench-") as temporary:
        data = keep or Path(temporary)
        if archive is not None:
            shutil.copytree(archive, data / "spark")
        run_env = {
            **env,
            "STREAMBED_SOURCE_URL": url,
            "STREAMBED_DATA_DIR": str(data),
            "STREAMBED_SPARK_MASTER": "local[2]",
            "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{free_port()}",
            "STREAMBED_SPARK_CLASS_ARCHIVE": "on" if archive or keep else "off",
            "PYTHONPATH": str(tree),
        }
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "streambed.cli", "run"],
            env=run_env,
            cwd=tree,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: dict[str, float] = {}
        try:
            assert process.stdout is not None
            for line in process.stdout:
                now = time.monotonic() - started
                if "starts from its class archive" in line:
                    seen["archive"] = 1
                if "starting spark" in line:
                    seen.setdefault("spark", now)
                elif "copy started" in line and _table(line) in waiting:
                    seen.setdefault("copy started", now)
                elif "copy committed" in line and _table(line) in waiting:
                    waiting.discard(_table(line))
                    if waiting:
                        continue
                    seen["copied"] = now
                    cpu = daemon_cpu()
                    seen["daemons"] = len(cpu)
                    seen["daemon cpu"] = sum(cpu)
                    break
                elif re.search(r"\b(error|critical)\b", line):
                    print(line.rstrip(), file=sys.stderr)
        finally:
            process.send_signal(signal.SIGINT)
            stopping = time.monotonic()
            if process.stdout is not None:
                for _ in process.stdout:
                    pass
            process.wait(120)
            seen["stop"] = time.monotonic() - stopping
        if "copied" not in seen:
            raise SystemExit(f"streambed exited ({process.returncode}) before copying {waiting}")
        return seen


def _table(line: str) -> str | None:
    found = re.search(r"\btable=(\S+)", line)
    return found.group(1) if found else None


def build_archive(
    tree: Path, url: str, env: dict[str, str], data: Path, tables: Sequence[str]
) -> Path:
    """Let one start record its classes and build the archive; the directory holding it."""
    first_start(tree, url, env, keep=data, tables=tables)
    spark = data / "spark"
    started = time.monotonic()
    while not list(spark.glob("spark-*.json")):
        if list(spark.glob("spark-*.failed")) or time.monotonic() - started > 1800:
            raise SystemExit(f"no class archive was built: {(spark / 'build.log').read_text()}")
        time.sleep(1)
    while list(spark.glob("spark-*.lock")):
        time.sleep(0.2)
    built = data / "archive"
    built.mkdir()
    for suffix in (".jsa", ".json"):  # the archive and its manifest
        for path in spark.glob(f"spark-*{suffix}"):
            shutil.copy2(path, built / path.name)
    print(f"class archive built in {time.monotonic() - started:.0f} s after the stop")
    return built


def _line(seen: dict[str, float], duck: float | None) -> str:
    spark = f"at {seen['spark']:.1f} s" if "spark" in seen else "not (no table needed it)"
    return (
        f"spark starts {spark}, copy starts at "
        f"{seen['copy started']:.1f} s, committed at {seen['copied']:.1f} s; "
        f"{seen['daemons']:.0f} Python worker daemons used {seen['daemon cpu']:.2f} "
        f"CPU s; stop took {seen['stop']:.1f} s"
        + (f"; cold DuckDB {duck:.1f} s" if duck is not None else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--class-archive", action="store_true")
    parser.add_argument("--tables", type=int, default=0, help="copy N small tables instead")
    parser.add_argument("--rows", type=int, default=5000, help="rows of each of --tables")
    args = parser.parse_args()
    psql = find_psql()
    assert psql is not None, "psql is needed for pgbench"
    pgbench = str(Path(psql).parent / "pgbench")
    extension = _duckdb_extension()
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp:
        url = pg.url()
        env = {**os.environ, "PGPASSWORD": pg.password}
        if args.tables:
            tables = many_tables(url, args.tables, args.rows)
            rows = args.tables * args.rows
        else:
            tables = [TABLE]
            rows = pgbench_accounts(pgbench, url, env, args.scale)
        with pg.connect() as conn:
            conn.execute("CREATE PUBLICATION streambed FOR ALL TABLES")
            conn.commit()
        scanner = Path(tmp) / "postgres_scanner.duckdb_extension"  # see initial_load.py
        if extension is not None:
            scanner.write_bytes(Path(extension).read_bytes())
        print(f"{rows:,} rows; streambed from {args.tree}; load {os.getloadavg()[0]:.2f}")
        # As `pip install` leaves it: byte-compiled (an editable checkout under
        # PYTHONDONTWRITEBYTECODE=1 compiles every module at every start, about 0.4 s here).
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(args.tree / "streambed")], check=True
        )
        archive = (
            build_archive(args.tree, url, env, Path(tmp) / "kept", tables)
            if args.class_archive
            else None
        )
        ours: list[float] = []
        archived: list[float] = []
        ducks: list[float] = []
        for _ in range(args.repeat):
            duck = None
            if extension is not None:
                started = time.monotonic()
                subprocess.run(
                    [sys.executable, "-c", DUCKDB_COPY, str(scanner), url, f"{tmp}/duck", *tables],
                    check=True,
                    env=env,
                )
                duck = time.monotonic() - started
                ducks.append(duck)
            seen = first_start(args.tree, url, env, tables=tables)
            ours.append(seen["copied"])
            print(f"  round: {_line(seen, duck)}", flush=True)
            if archive is not None:
                seen = first_start(args.tree, url, env, archive=archive, tables=tables)
                if not seen.get("archive"):
                    raise SystemExit("streambed did not start Spark from the class archive")
                archived.append(seen["copied"])
                print(f"  with the class archive: {_line(seen, None)}", flush=True)
        what = f"{len(tables)} tables" if args.tables else TABLE
        print(
            f"{what} copied by a first start in {min(ours):.1f} s best, "
            f"{statistics.median(ours):.1f} s median"
            + (
                f"; with the class archive {min(archived):.1f} s best, "
                f"{statistics.median(archived):.1f} s median"
                if archived
                else ""
            )
            + (f"; a cold DuckDB process copies it in {min(ducks):.1f} s" if ducks else "")
        )


if __name__ == "__main__":
    main()
