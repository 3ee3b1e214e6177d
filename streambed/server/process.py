"""The query server process: what `streambed run` starts to serve queries apart from the
replication loop (`streambed.server.supervisor` starts and restarts it).

Started as `python -m streambed.server.process FD` (with SIGINT ignored first: the
supervisor's `COMMAND`), where FD is the listening socket the parent bound. Its stdin is a
pipe from the parent: first the pickled `Settings`, then one line per commit the pipeline
records, on which the views are refreshed
(`streambed.server.refresher`). End of file on that pipe, which the parent's exit causes
however it dies (SIGKILL included), stops the server and ends the process: no query server
outlives its `streambed run`. SIGTERM stops it too; SIGINT is ignored, since a terminal's
Ctrl-C reaches the whole process group and the parent decides when its query server ends.
Logs go to the stderr it inherits from the parent.

Its metrics (`streambed.metrics.query`) are kept in files of the directory the supervisor
names in `PROMETHEUS_MULTIPROC_DIR`, which `streambed run`'s /metrics reads; without it
(metrics off) none are kept.

Exit codes: 0 after a stop, 2 for a configuration error, 1 for any other failure.

`start_server` builds the server over the state store's newest watermark, for this process
and for `streambed serve`, which runs it in its own process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, Final

from streambed.core.config import Settings
from streambed.core.errors import EXIT_CONFIG, EXIT_FATAL, EXIT_OK, ConfigError
from streambed.core.log import setup
from streambed.metrics import children
from streambed.metrics.query import QueryMetrics
from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.refresher import ViewRefresher
from streambed.server.supervisor import SCRATCH_PREFIX
from streambed.server.wire.server import ConnectionObserver, QueryServer, ServerOptions
from streambed.state.store import StateStore

logger = logging.getLogger("streambed.server")

STOP_SECONDS: Final = 15.0
"""A stop that takes longer (a session that does not end) ends the process at once."""


class StateSnapshots:
    """The query server's view of the lake: the newest watermark in the state store."""

    def __init__(self, state: StateStore) -> None:
        self.state = state

    def latest(self) -> ServedWatermark | None:
        from streambed.core.names import split_qualified

        mark = self.state.latest_watermark()
        if mark is None:
            return None
        tables = {split_qualified(q): loc for q, loc in mark.tables.items()}
        return ServedWatermark(lsn=mark.lsn, tables=tables)


def start_server(
    settings: Settings,
    state: StateStore,
    listener: socket.socket | None = None,
    observer: ConnectionObserver | None = None,
) -> tuple[QueryServer, LakeDatabase]:
    """A started query server whose views show the newest watermark. `listener`: an
    already listening socket, else it binds `STREAMBED_QUERY_LISTEN`; `observer`: the
    metrics. Raises `ConfigError` for invalid users before anything starts, and what the
    first refresh raises."""
    options = ServerOptions.from_settings(settings)
    database = LakeDatabase(DatabaseSettings.from_settings(settings), StateSnapshots(state))
    try:
        database.refresh()
        server = QueryServer(options, database, listener=listener, observer=observer).start()
    except BaseException:
        database.close()
        raise
    return server, database


def _follow(commits: IO[bytes], refresher: ViewRefresher, stop: threading.Event) -> None:
    """Refresh on each line from the parent; stop at end of file (the parent is gone or
    stops this process)."""
    try:
        for _ in commits:
            refresher.notify()
    except OSError:
        pass
    stop.set()


def serve(settings: Settings, listener: socket.socket, commits: IO[bytes]) -> None:
    """Serve on `listener` until `commits` ends or SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    state = StateStore(settings.state_path)
    metrics = _metrics()
    try:
        server, database = start_server(settings, state, listener, metrics)
    except BaseException:
        state.close()
        raise
    if metrics is not None:
        metrics.serving(True)
    refresher = ViewRefresher(database).start()
    threading.Thread(
        target=_follow, args=(commits, refresher, stop), name="streambed-commits", daemon=True
    ).start()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        if metrics is not None:
            metrics.serving(False)
        # a session that does not end must not keep the process, and the port, from the
        # next query process
        watchdog = threading.Timer(STOP_SECONDS, os._exit, (EXIT_OK,))
        watchdog.daemon = True
        watchdog.start()
        refresher.stop(STOP_SECONDS)
        server.stop()
        database.close()  # removes its scratch directory
        state.close()
        # the TMPDIR the supervisor made for this process, empty now; the supervisor
        # removes it too, but not when it was killed first
        scratch = tempfile.gettempdir()
        if Path(scratch).name.startswith(SCRATCH_PREFIX):
            with contextlib.suppress(OSError):
                os.rmdir(scratch)


def _metrics() -> QueryMetrics | None:
    """The metrics, kept in the supervisor's directory (`streambed.metrics.children`)."""
    if not os.environ.get(children.ENV):
        return None
    from prometheus_client import CollectorRegistry

    return QueryMetrics(CollectorRegistry())


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    commits = sys.stdin.buffer
    try:
        settings: Any = pickle.load(commits)
    except (EOFError, pickle.UnpicklingError):
        settings = None  # the parent died before it sent them
    if not isinstance(settings, Settings):
        sys.stderr.write("streambed.server.process: expected Settings on stdin\n")
        return EXIT_FATAL
    setup(settings.log_level, settings.log_format)
    try:
        listener = socket.socket(fileno=int(argv[0]))
        serve(settings, listener, commits)
    except ConfigError as e:
        logger.error("query process cannot start: %s", e)
        return EXIT_CONFIG
    except Exception:
        logger.exception("query process failed")
        return EXIT_FATAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
