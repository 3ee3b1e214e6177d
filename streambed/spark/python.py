"""`streambed-spark-python`: the Python a local Spark starts for its workers.

Spark puts its own source archives first on every Python worker's `PYTHONPATH`
(`$SPARK_HOME/python/lib/pyspark.zip`, `py4j-*-src.zip`, then the spark-core jar). Python
never caches bytecode for modules imported from an archive, so each worker daemon Spark
starts (one per kind: a Python data source's lookup, creation, planning, then the tasks')
compiled pyspark from source again, one after another, before doing anything else.

With a pip-installed pyspark the same modules are installed, compiled, in site-packages. This
command drops Spark's archives and jars from `PYTHONPATH` and replaces itself with the
interpreter it runs under, so the workers import the installed pyspark. `spark_session` uses
it only for a `local` master whose `SPARK_HOME` is the installed pyspark (the archives then
hold the same code); workers on a cluster run the cluster's Python as before.

It runs at every worker daemon start, so it imports only `os` and `sys` (its package adds
only the pure merge plan).
"""

from __future__ import annotations

import os
import sys

NAME = "streambed-spark-python"


def worker_path(path: str) -> str:
    """`path` (a `PYTHONPATH`) without Spark's source archives and jars, order kept."""
    kept = [p for p in path.split(os.pathsep) if p and not _spark_archive(p)]
    return os.pathsep.join(kept)


def _spark_archive(entry: str) -> bool:
    name = os.path.basename(entry.rstrip("/"))
    return (
        name == "pyspark.zip"
        or (name.startswith("py4j-") and name.endswith("-src.zip"))
        or name.endswith(".jar")
    )


def main() -> None:
    env = dict(os.environ)
    path = worker_path(env.get("PYTHONPATH", ""))
    if path:
        env["PYTHONPATH"] = path
    else:
        env.pop("PYTHONPATH", None)
    os.execve(sys.executable, [sys.executable, *sys.argv[1:]], env)


if __name__ == "__main__":
    main()
