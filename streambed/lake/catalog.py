"""The Iceberg catalog: embedded SQLite by default, or an Iceberg REST catalog.

Namespaces are the source schema names; tables keep their source names.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

from streambed.config import Settings
from streambed.errors import ConfigError, StorageError
from streambed.lake.storage import ensure_warehouse, fileio_properties


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
    return SqlCatalog(settings.catalog_name, **props)


def is_rest(url: str) -> bool:
    """Whether `url` (STREAMBED_CATALOG_URI) is an Iceberg REST catalog's."""
    return urlsplit(url).scheme in ("http", "https")
