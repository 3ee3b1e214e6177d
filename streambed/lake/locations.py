"""Where a lake table's files live: one directory per table, named after the source table.

A Postgres name may hold any character, but a lake table's location is a URI that
pyiceberg, pyarrow, Spark and DuckDB each parse: pyiceberg cuts a location at `#` or `?`
(a table `hash#tag` wrote its metadata to a file named `hash`), `/` nests directories (the
tables `"a/b".c` and `a."b/c"` would share `a/b/c`, and each one's sweep would delete the
other's files), and `..` leaves the warehouse. So the embedded catalog's tables are placed
by `table_location`: `<warehouse>/<schema>/<table>`, each name with every character but
letters, digits, `_`, `-` and `.` (so every `~` too) written as `~` and its UTF-8 bytes in
hex, and a name of dots only written so whole: `Sales Dept` is `Sales~20Dept`, `User` and
`naïve` stay as they are. Only `~` starts an escape, so two names never share a directory.
Until 2026-11-29 pyiceberg placed them, at `<warehouse>/<schema>/<table>` with the names as
they are; tables created then keep their locations.

A local warehouse may sit on a filesystem that does not tell `User` from `user` (macOS's,
Windows's, a Docker bind mount from one), or `é` written as one character from `é` written
as two (macOS's). There two such tables would share a directory, and each one's sweep
would delete the other's files. So `separate` moves a new table whose directory is already
another lake table's to `<directory>~~2` (or `~~3`, ...): `segment` never writes `~~`, so
that is no other table's name either. The sweep refuses to touch tables that share a
directory all the same (made before 2026-11-30, or by another program).

A REST catalog places its tables itself; `check_addressable` refuses a location pyiceberg
would cut short, with what to do.

Locations and file URIs are never percent-encoded: `file://` and the path as it is, as
pyiceberg and Iceberg's Java libraries write them.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable

from streambed.core.config import CUT
from streambed.core.errors import ConfigError
from streambed.storage.uris import split_uri

SAFE = frozenset("_-.")
ESCAPE = "~"
APART = "~~"  # what `separate` adds: `segment` always writes two hex digits after `~`


def segment(name: str) -> str:
    """`name` as one directory name (see the module doc)."""
    if not name:
        raise ValueError("a Postgres name is never empty")
    if set(name) == {"."}:  # `.` and `..` name directories already
        return _escaped(name)
    return "".join(c if c.isalnum() or c in SAFE else _escaped(c) for c in name)


def _escaped(text: str) -> str:
    return "".join(f"{ESCAPE}{b:02X}" for b in text.encode())


def table_location(warehouse: str, schema: str, name: str) -> str:
    """The location of the lake table of `schema.name` under `warehouse` (a URI)."""
    return f"{warehouse.rstrip('/')}/{segment(schema)}/{segment(name)}"


def folded(name: str) -> str:
    """`name` as a case- and normalization-insensitive filesystem compares it."""
    return unicodedata.normalize("NFC", name).casefold()


def separate(location: str, others: Callable[[], Iterable[str]]) -> str:
    """`location` for a new lake table, or, when it is a local directory that is already
    the directory of one of `others()` (the locations of the catalog's other tables whose
    names `folded` does not tell apart: called only when `location` exists), the first of
    `location~~2`, `location~~3`, ... that is no such table's directory."""
    scheme, path = split_uri(location)
    if scheme != "file" or not os.path.isdir(path):
        return location  # S3 and most local filesystems tell every name apart
    taken = [other for kind, other in map(split_uri, others()) if kind == "file"]
    n, suffix = 1, ""
    while any(same_directory(path + suffix, other) for other in taken):
        n += 1
        suffix = f"{APART}{n}"
    return location + suffix


def same_directory(a: str, b: str) -> bool:
    """Whether the local paths `a` and `b` name one existing directory."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is missing
        return False


def check_addressable(location: str, table: str) -> None:
    """Raise ConfigError when pyiceberg cannot address files under `location`."""
    cut = [c for c in CUT if c in location]
    if cut:
        raise ConfigError(
            f"the catalog placed the lake table of {table} at {location}, whose "
            f"{' and '.join(repr(c) for c in cut)} pyiceberg reads as the end of the path: "
            "its files would land elsewhere. Rename the source table, or leave it out with "
            "STREAMBED_EXCLUDE_TABLES"
        )
