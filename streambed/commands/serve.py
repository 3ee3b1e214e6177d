"""`streambed serve`: only the query server, following the commits of a `streambed run`
elsewhere (the same lake and state store)."""

from __future__ import annotations

import logging
import signal
import threading

from streambed.core.config import Settings
from streambed.core.log import log
from streambed.state.store import StateStore

logger = logging.getLogger("streambed")


def serve(settings: Settings) -> None:
    if settings.query_host_port is None:
        raise SystemExit("STREAMBED_QUERY_LISTEN is empty: nothing to serve")
    from streambed.server.process import start_server

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    state = StateStore(settings.state_path)
    try:
        server, database = start_server(settings, state)
    except BaseException:
        state.close()
        raise
    host = settings.query_host_port[0]
    log(
        logger,
        "query server listening",
        address=f"{host}:{server.port}",
        connect=f"psql -h {host} -p {server.port}",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            database.refresh()  # follow commits of a `streambed run` elsewhere
    finally:
        server.stop()
        database.close()
        state.close()
