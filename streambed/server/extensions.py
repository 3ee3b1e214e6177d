"""Load DuckDB's avro, httpfs and iceberg extensions from the pinned wheels, offline.

The `duckdb-extension-*` wheels ship the compiled extension files inside their Python
packages; we LOAD them by path, in dependency order (avro before iceberg), and never let
DuckDB download or autoload anything.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb

from streambed.core.errors import ConfigError

EXTENSIONS = ("avro", "httpfs", "iceberg")


def extension_path(name: str) -> Path:
    """Path of `<name>.duckdb_extension` inside the installed duckdb-extension-<name> wheel."""
    package = f"duckdb_extension_{name}"
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the Python package {package} is not installed; install streambed's dependencies "
            f"(pip install duckdb-extension-{name}=={duckdb.__version__})"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    version = f"v{duckdb.__version__}"
    found = sorted(root.glob(f"extensions/{version}/**/{name}.duckdb_extension"))
    if not found:
        raise ConfigError(
            f"{package} has no {name}.duckdb_extension for DuckDB {version} under {root}; "
            f"install duckdb-extension-{name}=={duckdb.__version__}"
        )
    return found[0]


def offline_config(extension_directory: str) -> dict[str, str | bool]:
    """DuckDB connection config that never touches the network for extensions;
    `extension_directory` is the caller's to remove (DuckDB may write into it)."""
    return {
        "extension_directory": extension_directory,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }


def load_extensions(conn: duckdb.DuckDBPyConnection) -> None:
    """LOAD avro, httpfs and iceberg from the wheels into `conn` (before any lockdown)."""
    for name in EXTENSIONS:
        path = str(extension_path(name)).replace("'", "''")
        conn.execute(f"LOAD '{path}'")
