"""`streambed run` serves queries from a child process and starts it again when it dies.

A query that crashes DuckDB (a segfault, an abort, memory exhausted) then ends that process
and its sessions only: replication goes on in the parent. The parent binds the query port
once (`streambed.core.listen`: a bad or busy address stops the start with a configuration
error) and hands the listening socket to each child it starts (`streambed.server.process`),
so clients that connect while a child is being replaced wait in the socket's backlog and
are served by the next one.

Commits reach the child as one line each on its stdin (`notify`), written without ever
blocking the pipeline: when the pipe is full the line is dropped, since the child refreshes
to the newest watermark anyway and already has a refresh pending. The child ends at end of
file on that pipe, so it does not outlive the parent, however the parent ends.

A child that exits while the parent is not stopping (any exit code or signal) is logged with
its exit code or signal and the number of restarts so far (`restarts`), and started again
after a backoff (`RestartBackoff`: 0.5 s, doubled at each exit up to 30 s, back to 0.5 s once a
child has served for a minute). A child that cannot start (which the parent's checks of the
configuration should prevent) therefore restarts at most every 30 s, and the log says it
keeps failing; the parent never gives up on it, as replication does not need it.

With `metrics` (`streambed.metrics.children.ChildMetrics`), each child keeps its metrics in
that directory (`PROMETHEUS_MULTIPROC_DIR`) and is marked dead there when it exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import signal
import site
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Final

from streambed.core.config import Settings
from streambed.core.errors import ConfigError
from streambed.core.listen import listen
from streambed.core.log import LiveRegion, log, terminal
from streambed.metrics import children
from streambed.metrics.children import ChildMetrics

logger = logging.getLogger("streambed.server")

# the child's TMPDIR, one per child (`QuerySupervisor._launch`)
SCRATCH_PREFIX: Final = "streambed-query-"

COMMAND: Final = (
    # SIGINT ignored before DuckDB and the rest load (a second or two): Ctrl-C reaches the
    # whole process group, and the parent decides when its query process ends
    "import runpy, signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "runpy.run_module('streambed.server.process', run_name='__main__')"
)
"""What the query process runs: `python -m streambed.server.process`, SIGINT ignored."""

STOP_SECONDS: Final = 20.0
"""How long a child may take to stop before it is killed (it ends itself after 15 s)."""


@dataclass
class RestartBackoff:
    """The delay before starting a process again after it exited: `first`, doubled at each
    exit up to `cap`, and `first` again once a process ran `steady` seconds. No I/O."""

    first: float = 0.5
    cap: float = 30.0
    steady: float = 60.0
    failures: int = field(default=0, init=False)
    """Exits in a row of processes that ran less than `steady` seconds."""
    _next: float = field(default=0.0, init=False, repr=False)
    _last: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._next = self.first

    def after_exit(self, uptime: float) -> float:
        """The delay before the next start, for a process that exited after `uptime` s."""
        if uptime >= self.steady:
            self._next = self.first
            self.failures = 0
        self.failures += 1
        self._last = self._next
        self._next = min(self._last * 2, self.cap)
        return self._last

    @property
    def capped(self) -> bool:
        """Whether processes keep exiting early: more than one in a row, and the last
        delay was `cap`."""
        return self.failures > 1 and self._last >= self.cap


def exit_fields(returncode: int | None) -> dict[str, Any]:
    """How a process ended, as log fields: its exit code, or the signal that killed it."""
    if returncode is None:
        return {"exit_code": "none"}  # it could not be started
    if returncode < 0:
        try:
            return {"signal": signal.Signals(-returncode).name.lower()}
        except ValueError:
            return {"signal": -returncode}
    return {"exit_code": returncode}


class QuerySupervisor:
    """Runs `python -m streambed.server.process` on `listener` and starts it again whenever
    it exits, until `stop()`. `restarts` counts the exits after which it started (or is
    about to start) another one: the query server's restarts, for logs and metrics."""

    def __init__(
        self,
        settings: Settings,
        listener: socket.socket,
        backoff: RestartBackoff | None = None,
        metrics: ChildMetrics | None = None,
    ) -> None:
        self.listener = listener
        self.backoff = backoff or RestartBackoff()
        self.restarts = 0
        self._metrics = metrics
        self._settings = pickle.dumps(settings)
        self._env = _child_environment()
        self._env.pop(children.ENV, None)  # only this run's metrics directory, if any
        if metrics is not None:
            self._env[children.ENV] = metrics.path
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None  # the write end of the child's stdin
        # the child's TMPDIR (DuckDB's scratch and spill files): removed when it exits, as a
        # crashed or killed child cannot remove it itself
        self._scratch: str | None = None
        self._started_at = 0.0
        self._stopping = False  # stop(): under _lock
        self._shutting_down = False  # a signal: set without a lock (see `stop_on_signals`)
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="streambed-query-supervisor", daemon=True
        )

    @property
    def pid(self) -> int | None:
        """The running child's process id."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def start(self) -> QuerySupervisor:
        with self._lock:
            self._launch()
        self._thread.start()
        return self

    def notify(self, lsn: int | None = None) -> None:
        """A watermark was recorded: tell the child (never waits for it; a line that does
        not fit in the pipe is dropped)."""
        line = b"%d\n" % (lsn or 0)
        with self._lock:
            if self._pipe is None:
                return
            with contextlib.suppress(OSError):
                # BlockingIOError: the pipe is full, the child has refreshes pending
                # BrokenPipeError: the child is gone and will be replaced
                os.write(self._pipe, line)

    def stop_on_signals(self) -> None:
        """Do not restart the child once SIGINT or SIGTERM has arrived, then call the
        handler installed before this call (the pipeline's, which stops it; `stop()` then
        ends the child). Under a service manager that signals every process of the service, the
        child's own exit is then not taken for a crash."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)

            def handler(number: int, frame: FrameType | None, previous: object = previous) -> None:
                self._shutting_down = True  # no lock: the main thread may hold it
                if callable(previous):
                    previous(number, frame)

            signal.signal(signum, handler)

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """End the child (end of file on its stdin, then SIGKILL after `timeout`), stop
        restarting it and close the listening socket. Once: later calls do nothing."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            self._stopped.set()
            proc = self._proc
            self._close_pipe()
        if proc is not None:
            try:
                returncode = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                returncode = proc.wait()
            self._remove_scratch()
            self._exited(proc.pid)
            log(logger, "query process stopped", pid=proc.pid, **exit_fields(returncode))
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.listener.close()

    # ---- the child -----------------------------------------------------------------------

    def _launch(self) -> None:
        """Start a child (under `_lock`)."""
        fd = self.listener.fileno()
        region = terminal()
        self._scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
        proc = subprocess.Popen(
            [sys.executable, "-c", COMMAND, str(fd)],
            stdin=subprocess.PIPE,
            # its log lines go to the parent's stderr; on a terminal with lines kept at its
            # foot (the copy progress) through the parent, which writes them above those
            stderr=subprocess.PIPE if region.live else None,
            pass_fds=(fd,),
            env={**self._env, "TMPDIR": self._scratch},
        )
        assert proc.stdin is not None
        if proc.stderr is not None:
            threading.Thread(
                target=_relay, args=(proc.stderr, region), name="streambed-query-log", daemon=True
            ).start()
        pipe = proc.stdin.fileno()
        with contextlib.suppress(BrokenPipeError):  # it died already: `_watch` sees it
            os.write(pipe, self._settings)  # blocking: a few kB, read first by the child
        os.set_blocking(pipe, False)
        self._proc, self._pipe, self._started_at = proc, pipe, time.monotonic()
        log(logger, "query process started", pid=proc.pid, restarts=self.restarts)

    def _close_pipe(self) -> None:
        proc = self._proc
        self._pipe = None
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    def _remove_scratch(self) -> None:
        """After the child exited: its temporary files."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _exited(self, pid: int) -> None:
        if self._metrics is not None:
            self._metrics.exited(pid)

    def _watch(self) -> None:
        while True:
            proc = self._proc
            returncode = proc.wait() if proc is not None else None
            uptime = time.monotonic() - self._started_at
            with self._lock:
                if self._stopping:
                    return
                self._close_pipe()
                self._remove_scratch()
                if proc is not None:
                    self._exited(proc.pid)
                self._proc = None
                if self._shutting_down:
                    log(logger, "query process ended during shutdown", **exit_fields(returncode))
                    return
                self.restarts += 1
            delay = self.backoff.after_exit(uptime)
            log(
                logger,
                "query process exited; its sessions are closed, replication continues; "
                "starting it again",
                level=logging.ERROR,
                pid=proc.pid if proc is not None else "none",
                **exit_fields(returncode),
                uptime=f"{uptime:.1f}s",
                restarts=self.restarts,
                restart_in=f"{delay:g}s",
            )
            if self.backoff.capped:
                log(
                    logger,
                    "the query process keeps exiting soon after it starts; see the lines "
                    "above for why; it is started again at this interval until it runs "
                    f"{self.backoff.steady:g}s",
                    level=logging.ERROR,
                    failures=self.backoff.failures,
                    interval=f"{self.backoff.cap:g}s",
                )
            if self._stopped.wait(delay) or not self._relaunch():
                return

    def _relaunch(self) -> bool:
        """Start the next child; False once stopping."""
        with self._lock:
            if self._stopping or self._shutting_down:
                return False
            try:
                self._launch()
            except OSError as e:
                log(logger, "query process not started", level=logging.ERROR, error=str(e))
                self._started_at = time.monotonic()
            return True


def _relay(lines: IO[bytes], region: LiveRegion) -> None:
    """Write a child's stderr above the terminal's kept lines, until the child ends."""
    with lines:
        for line in lines:
            region.write(line.decode(errors="replace"))


def _child_environment() -> dict[str, str]:
    """The parent's environment, with this streambed's directory first on PYTHONPATH when
    the interpreter would not find it by itself (a source checkout run from elsewhere): the
    child runs the same code as its parent."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    installed = {
        str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]
    }
    if root not in installed:
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = root + (os.pathsep + path if path else "")
    return env


def query_process(
    settings: Settings, metrics: ChildMetrics | None = None
) -> QuerySupervisor | None:
    """Check the query server's configuration and bind its port: its supervisor, whose
    `start()` starts the process; None when STREAMBED_QUERY_LISTEN is empty. Raises
    `ConfigError` before anything starts. `metrics`: where its processes keep their metrics."""
    if settings.query_host_port is None:
        return None
    from streambed.server.wire.server import ServerOptions
    from streambed.server.wire.tls import TlsMode, server_context

    options = ServerOptions.from_settings(settings)  # the users
    if options.tls is not TlsMode.OFF and options.tls_cert and options.tls_key:
        try:
            server_context(options.tls_cert, options.tls_key)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(
                "STREAMBED_QUERY_TLS_CERT / STREAMBED_QUERY_TLS_KEY: cannot load the "
                f"certificate and key: {e}"
            ) from e
    listener = listen(options.host, options.port)
    try:
        supervisor = QuerySupervisor(settings, listener, metrics=metrics)
    except BaseException:
        listener.close()
        raise
    host, port = settings.query_host_port[0], listener.getsockname()[1]
    log(
        logger,
        "query server listening",
        address=f"{host}:{port}",
        connect=f"psql -h {host} -p {port}",
    )
    return supervisor


def start_query_process(
    settings: Settings, metrics: ChildMetrics | None = None
) -> QuerySupervisor | None:
    """`query_process`, started."""
    supervisor = query_process(settings, metrics)
    if supervisor is None:
        return None
    try:
        return supervisor.start()
    except BaseException:
        supervisor.listener.close()
        raise
