"""One warm SparkSession per process.

Starting Spark takes seconds; later merges and copies reuse the session. The master comes from
the argument, else `STREAMBED_SPARK_MASTER`, else `local[*]`. `sc://` masters use Spark
Connect (the server ships in the pyspark wheel); `spark://` and `local[...]` use classic Spark.
Started from `Settings` with a local master, the JVM uses (or records the classes for) the
data directory's class archive (`streambed.spark.class_archive`). A local Spark talks to
its Python workers over Unix sockets in a directory of the process's own
(`streambed.spark.sockets`). A session whose JVM has ended (the out-of-memory killer,
a signal to every process of a service) is dropped, and the next `get_spark` starts Spark
again: the failed merge or copy is retried on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from streambed.core.config import Settings
from streambed.spark import launch as spark_launch
from streambed.spark import sockets as spark_sockets
from streambed.spark.class_archive import BUILD_AFTER, ClassArchive
from streambed.spark.python import NAME as SPARK_PYTHON

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
JVM_END_SECONDS = 10.0
"""How long a stop that failed waits for the JVM to end before it takes the failure as real."""
MASTER_ENV = "STREAMBED_SPARK_MASTER"

DAEMON_MODULE = "streambed.spark.daemon"  # Spark's Python daemon: run with `python -m`

JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)
"""HotSpot's C2 compiles a method after ten times as many calls and loop iterations as its
defaults (JDK 17: 5000, 600, 15000, 40000). Spark's scheduling code, run a few times per job,
then stays compiled by C1 instead of keeping C2 busy on one of the machine's cores through a
young JVM's first few dozen jobs (a first start's copies), while a merge's per-row code,
run millions of times, still reaches C2 within its first file (docs/initial-copy.md)."""

# Settings every streambed session gets. Field ids: Iceberg maps Parquet columns to table
# columns by id, so Spark must write them (and may use them when reading).
_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.fieldId.write.enabled": "true",
    "spark.sql.parquet.fieldId.read.enabled": "true",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.autoBroadcastJoinThreshold": str(64 * 1024 * 1024),
    "spark.driver.extraJavaOptions": f"-Dlog4j2.level=WARN {JIT_OPTIONS}",
    # pyspark's daemon, quiet when Spark stops an idle worker (streambed.spark.daemon)
    "spark.python.daemon.module": DAEMON_MODULE,
}
# Only for an in-process (local) driver: a cluster has its own sizing.
_LOCAL_CONF = {
    "spark.driver.memory": "2g",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}

_lock = threading.Lock()
_session: SparkSession | None = None
_session_master: str | None = None
_archive: ClassArchive | None = None
_archive_timer: threading.Timer | None = None


def resolve_master(settings_or_master: Settings | str | None = None) -> str:
    """The master URL: an explicit one, else the settings', else the environment, else local[*]."""
    if isinstance(settings_or_master, Settings):
        return settings_or_master.spark_master or DEFAULT_MASTER
    if settings_or_master:
        return settings_or_master
    return os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def get_spark(settings_or_master: Settings | str | None = None) -> SparkSession:
    """The process's SparkSession, started on first use with streambed's settings.

    A later call with a different master returns the running session (one per process) and
    logs that the requested master was not used; call `stop_spark()` first to switch.
    """
    global _session, _session_master, _archive, _archive_timer
    master = resolve_master(settings_or_master)
    with _lock:
        if _session is not None and _jvm_ended(_session):
            log.warning("starting spark again (a job it was running is retried)")
            _forget_session()
        if _session is not None:
            if master != _session_master:
                log.warning(
                    "spark session already running master=%s; requested master=%s not used",
                    _session_master,
                    master,
                )
            return _session
        _prepare_environment(master)
        archive = _class_archive(settings_or_master, master)
        _session = _build(master, archive)
        _session_master = master
        _archive = archive
        if archive is not None and archive.recording is not None:
            jvm = _jvm_pid(_session)
            _archive_timer = threading.Timer(BUILD_AFTER, archive.build_later, (jvm,))
            _archive_timer.daemon = True
            _archive_timer.start()
        return _session


def stop_spark() -> None:
    """Stop the process's SparkSession, if one was started; with a class archive whose
    builder has not started yet, start it."""
    global _session, _session_master, _archive, _archive_timer
    with _lock:
        if _archive_timer is not None:
            _archive_timer.cancel()
            _archive_timer = None
        if _session is not None and _jvm_ended(_session):
            _forget_session()
        if _session is not None:
            jvm = _jvm_pid(_session)
            try:
                _session.stop()
            except Exception:
                if not _jvm_ended(_session, wait=JVM_END_SECONDS):
                    raise
                _forget_session()  # it was ending already (a signal to every process)
                return
            if _archive is not None:
                _archive.build_later(jvm)
            _session = None
            _session_master = None
            _archive = None


def _jvm_ended(session: SparkSession, *, wait: float = 0.0) -> bool:
    """Whether the JVM pyspark started for `session` has exited (the kernel's out-of-memory
    killer, a signal sent to every process of a service, a crash), waiting up to `wait`
    seconds for it to; logged. False for a session without a JVM of this process's own
    (Spark Connect)."""
    process = _jvm_process(session)
    if process is None:
        return False
    try:
        code = process.wait(wait)
    except subprocess.TimeoutExpired:
        return False
    how = f"signal {-code}" if code < 0 else f"exit code {code}"
    if code == -signal.SIGKILL:
        how += " (if nothing else sent it, the kernel's out-of-memory killer: `dmesg` says)"
    log.warning("spark's JVM (pid %s) ended with %s", process.pid, how)
    return True


def _forget_session() -> None:
    """Drop the session whose JVM ended, and pyspark's own references to it, so that the next
    `get_spark` starts a new JVM (pyspark would keep handing out the dead one: its
    `SparkContext` and gateway are class attributes). Its class archive, if it was
    recording one, is not built from the dead JVM's partial class list."""
    global _session, _session_master, _archive, _archive_timer
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    assert _session is not None
    gateway = SparkContext._gateway
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    if gateway is not None:
        with contextlib.suppress(Exception):  # its sockets; the JVM answers nothing now
            gateway.close()
    if _archive_timer is not None:
        _archive_timer.cancel()
        _archive_timer = None
    spark_sockets.clear_jvm_temp()  # Spark's local directories the JVM could not delete
    _session = None
    _session_master = None
    _archive = None


def _jvm_pid(session: SparkSession) -> int | None:
    """The pid of the JVM pyspark started for a classic session (None for Spark Connect)."""
    process = _jvm_process(session)
    return None if process is None else int(process.pid)


def _jvm_process(session: SparkSession) -> subprocess.Popen[bytes] | None:
    """The JVM process pyspark started for a classic session (None for Spark Connect)."""
    try:
        gateway = session.sparkContext._gateway
        process: subprocess.Popen[bytes] | None = gateway.proc if gateway is not None else None
    except Exception:  # a remote session, or a pyspark that keeps no proc
        return None
    return process


def _class_archive(settings_or_master: Settings | str | None, master: str) -> ClassArchive | None:
    if not isinstance(settings_or_master, Settings) or not master.startswith("local"):
        return None
    if settings_or_master.spark_class_archive != "on":
        return None
    import pyspark

    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).resolve().parent)
    try:
        return ClassArchive.open(settings_or_master.data_dir / "spark", Path(home) / "jars")
    except OSError as error:
        log.warning("spark starts without its class archive: %s", error)
        return None


def _prepare_environment(master: str) -> None:
    # Workers start `python3` from PATH unless told otherwise, and that one may lack pyarrow.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The driver's Python too: Spark starts it for the data source lookup.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = worker_python(master)


def worker_python(master: str) -> str:
    """The Python Spark starts for its workers: for a `local` master whose Spark is the
    installed pyspark, `streambed-spark-python` installed beside this interpreter (it runs
    this interpreter with the installed, compiled pyspark instead of Spark's source archive,
    `streambed.spark.python`); otherwise this interpreter."""
    if not master.startswith("local"):
        return sys.executable  # executors elsewhere run their own Python
    import pyspark

    home = os.environ.get("SPARK_HOME")
    installed = Path(pyspark.__file__).resolve().parent
    if home is not None and Path(home).resolve() != installed:
        return sys.executable  # another Spark: its archive may hold another pyspark
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        script = directory / SPARK_PYTHON
        if script.is_file() and os.access(script, os.X_OK):
            return str(script)
    log.debug("%s is not installed; Spark's workers import pyspark from its archive", SPARK_PYTHON)
    return sys.executable


def _build(master: str, archive: ClassArchive | None = None) -> SparkSession:
    java_options = _CONF["spark.driver.extraJavaOptions"]
    if archive is None:
        return _start(master, java_options)
    try:
        archive_options = archive.java_options()
    except OSError as error:  # the archive is an optimisation: Spark starts without it
        log.warning("spark starts without its class archive: %s", error)
        return _start(master, java_options)
    try:
        return _start(master, f"{java_options} {archive_options}")
    except Exception as error:
        if not archive.in_use:
            raise
        reason = " ".join(str(error).split())
        log.warning(
            "spark did not start with its class archive; deleting it and starting without "
            "it (remove %s to let streambed build another): %s",
            archive.failed,
            reason,
        )
        archive.discard(f"the JVM did not start with the archive: {reason}")
        return _start(master, java_options)


def _start(master: str, java_options: str) -> SparkSession:
    from pyspark.sql import SparkSession

    log.info("starting spark master=%s", master)
    builder = SparkSession.builder.appName("streambed")
    builder = builder.remote(master) if master.startswith("sc://") else builder.master(master)
    conf = {**_CONF, "spark.driver.extraJavaOptions": java_options}
    if not master.startswith("sc://"):
        spark_launch.install()  # an exit while the JVM starts leaves nothing behind
    if master.startswith("local"):
        conf.update(_LOCAL_CONF)
        sockets = spark_sockets.socket_dir()
        if sockets is not None:  # else TCP, where each Python task waits for its input
            conf["spark.python.unix.domain.socket.enabled"] = "true"
            conf["spark.python.unix.domain.socket.dir"] = str(sockets)
        temp = spark_sockets.jvm_temp_dir()
        if temp is not None:  # what a killed JVM leaves goes with the process's directory
            options = conf["spark.driver.extraJavaOptions"]
            conf["spark.driver.extraJavaOptions"] = f"{options} -Djava.io.tmpdir={temp}"
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not master.startswith("sc://"):
        session.sparkContext.setLogLevel("WARN")
    return session
