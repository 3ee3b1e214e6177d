"""`python -m streambed.spark.daemon`: pyspark's worker daemon, without a traceback
each time Spark stops an idle worker.

Spark stops a Python worker that has been idle for a minute by closing its socket. The
worker, waiting for its next task, then fails to flush its output, and pyspark's daemon
(4.3, with `spark.python.daemon.killWorkerOnFlushFailure`, the default) prints a
`BrokenPipeError` traceback to the process's stderr: one for every worker, about a minute
after each burst of merges or copies, in the log of a process that is working normally.

Spark runs this module as its daemon (`spark.python.daemon.module`, set by
`streambed.spark.session`). It is pyspark's daemon with `worker` wrapped: a worker
whose connection the JVM closed ends with code 1, which the daemon's loop takes as the end
of that worker, silently. Spark already knows why it closed the connection (an idle worker
stopped, a task killed) and says so on its side. Everything else is pyspark's. Like
pyspark's daemon, it imports nothing a worker's tasks need before it forks them.
"""

from __future__ import annotations

import socket

import pyspark.daemon as daemon

_pyspark_worker = daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    """pyspark's `daemon.worker`; 1 when the JVM has closed the worker's connection."""
    try:
        code: int = _pyspark_worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1
    return code


def main() -> None:
    daemon.worker = worker  # the daemon's loop looks `worker` up in its module each time
    daemon.manager()


if __name__ == "__main__":
    main()
