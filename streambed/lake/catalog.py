"""The Iceberg catalog: embedded SQLite by default, or an Iceberg REST catalog.

Namespaces are the source schema names; tables keep their source names.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

from streambed.core.config import Settings
from streambed.core.errors import ConfigError, StorageError
from streambed.lake.storage import ensure_warehouse, fileio_properties

logger = logging.getLogger(__name__)


def catalog_properties(settings: Settings) -> dict[str, str]:
    """The pyiceberg catalog properties for these settings (secrets included: never log)."""
    props = {"uri": settings.catalog_url, "warehouse": settings.warehouse_uri}
    props.update(fileio_properties(settings))
    if is_rest(settings.catalog_url) and settings.catalog_token:
        props["token"] = settings.catalog_token
    return props


def open_catalog(settings: Settings) -> Catalog:
    """Open (and for the embedded catalog, create) the catalog and the warehouse."""
    url = settings.catalog_url
    props = catalog_properties(settings)
    if is_rest(url):
        try:
            return RestCatalog(settings.catalog_name, **props)
        except Exception as e:
            raise StorageError(
                f"cannot open the Iceberg REST catalog at {url}: {e}; check "
                "STREAMBED_CATALOG_URI and STREAMBED_CATALOG_TOKEN"
            ) from e
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigError(
            f"STREAMBED_CATALOG_URI={url!r}: use a sqlite:/// URL or an http(s):// REST catalog"
        )
    ensure_warehouse(settings)
    database = parts.path[1:]  # sqlite:////abs/path.db → /abs/path.db; sqlite:///rel.db → rel.db
    if database and database != ":memory:":
        try:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(
                f"cannot create the catalog directory for {database}: {e}; set "
                "STREAMBED_DATA_DIR or STREAMBED_CATALOG_URI to a writable place"
            ) from e
        write_ahead_log(database)
    return SqlCatalog(settings.catalog_name, **props)


def write_ahead_log(database: str) -> None:
    """Put the SQLite catalog `database` in WAL journal mode (a setting kept in the file).

    Every Iceberg commit is a catalog transaction. In the default rollback-journal mode each
    one writes and syncs a journal file and then the database, and deletes the journal; in
    WAL mode it appends to the log and syncs once (SQLite's default `synchronous=FULL`, so a
    commit is durable when it returns, as before). Readers in other processes (`streambed
    serve`) see each commit whole in both modes. The switch needs the database to itself
    and writable: if another process holds it open, or it cannot be written, the mode is
    left as it is (a later start sets it) and the catalog opens as before, reporting its
    own errors."""
    try:
        with contextlib.closing(sqlite3.connect(database, timeout=5)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as e:
        logger.debug("catalog %s left in its journal mode: %s", database, e)


def is_rest(url: str) -> bool:
    """Whether `url` (STREAMBED_CATALOG_URI) is an Iceberg REST catalog's."""
    return urlsplit(url).scheme in ("http", "https")
