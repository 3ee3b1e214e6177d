"""A local Spark started from its class archive, for real: the first start records the
classes and, while it runs, starts the builder (the real `java -Xshare:dump`), the next JVM
maps the archive, and a damaged archive does not stop Spark from starting.

Each start is a new Python process (pyspark starts one JVM per process), run the way
`streambed run` starts and stops Spark: `get_spark(settings)`, then `stop_spark()`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from streambed.spark.class_archive import ClassArchive

START = """
import json, sys, time
from pathlib import Path
from streambed.core.config import Settings
from streambed.spark import session as spark_session

settings = Settings(source_url="postgresql://unused", data_dir=Path(sys.argv[1]),
                    spark_master="local[1]", spark_class_archive="on")
spark_session.BUILD_AFTER = 3.0  # the builder starts while Spark runs, as in a long run
spark = spark_session.get_spark(settings)
total = spark.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"]
if sys.argv[2:] == ["first"]:
    deadline = time.monotonic() + 60
    while not list((settings.data_dir / "spark").glob("spark-*.lock")):
        assert time.monotonic() < deadline, "no builder started"
        time.sleep(0.1)
pid = spark_session._jvm_pid(spark)
maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
mapped = sorted({line.split()[-1] for line in maps if line.endswith(".jsa")})
mapped = [m for m in mapped if m.startswith(str(settings.data_dir.resolve()))]
spark_session.stop_spark()
print("RESULT " + json.dumps({"sum": total, "mapped": mapped}))
"""
BUILD_TIMEOUT = 900.0


def _start(data_dir: Path, cwd: Path, *args: str) -> tuple[dict[str, object], str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    env.pop("STREAMBED_SPARK_CLASS_ARCHIVE", None)
    done = subprocess.run(
        [sys.executable, "-c", START, str(data_dir), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), output


def _archive(data_dir: Path) -> ClassArchive:
    (path,) = (data_dir / "spark").glob("spark-*.classlist")
    return ClassArchive(data_dir / "spark", path.name.split("-", 1)[1].split(".")[0])


def _wait_built(archive: ClassArchive) -> None:
    deadline = time.monotonic() + BUILD_TIMEOUT
    while not archive.usable() and not archive.failed.exists():
        assert time.monotonic() < deadline, (archive.directory / "build.log").read_text()
        time.sleep(1)
    while archive.builder() is not None and time.monotonic() < deadline:
        time.sleep(0.2)


def test_spark_starts_from_the_archive_its_first_run_built(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    archive: ClassArchive | None = None
    try:
        first, _ = _start(data_dir, cwd, "first")
        assert first["sum"] == 499500
        assert first["mapped"] == []
        archive = _archive(data_dir)
        lines = archive.class_list.read_text().splitlines()
        assert "org/apache/spark/SparkContext" in {line.split(" ")[0] for line in lines}

        _wait_built(archive)
        log = (archive.directory / "build.log").read_text()
        assert archive.usable(), log
        assert not archive.failed.exists() and not archive.class_list.exists()
        assert not list(archive.directory.glob("*.tmp-*")) and not archive.lock.exists()

        second, output = _start(data_dir, cwd)
        assert second["sum"] == 499500
        assert second["mapped"] == [str(archive.archive)], output
        assert not list(archive.directory.glob("spark-*.classlist*"))  # nothing recorded

        # Damaged in place, same size (its manifest agrees): this JVM crashes on it.
        archive.archive.chmod(0o644)  # java writes its archives read-only
        with archive.archive.open("r+b") as f:
            f.seek(4096)
            f.write(os.urandom(1 << 20))
        third, output = _start(data_dir, cwd)
        assert third["sum"] == 499500
        assert third["mapped"] == [], output
        assert "did not start with its class archive" in output
        assert not archive.archive.exists() and archive.failed.exists()
        assert list(archive.directory.glob("hs_err_pid*.log")), output
        assert not list(cwd.iterdir())  # the JVM's crash log is not left where it ran

        fourth, _ = _start(data_dir, cwd)  # after a failure: neither used nor recorded
        assert fourth["sum"] == 499500 and fourth["mapped"] == []
        assert not list(archive.directory.glob("spark-*.classlist*"))
        assert archive.builder() is None
    finally:
        if archive is not None and (pid := archive.builder()) is not None:
            os.killpg(pid, signal.SIGKILL)
