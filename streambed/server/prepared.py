"""A session's SELECTs as they were prepared for DuckDB, by statement text.

Parsing a statement into pglast's Python nodes, checking it against the allow-list and
printing the rewritten tree back to SQL take 1-4 ms a statement, 10-20% of a 20 ms
analytical query; dashboards and BI tools send the same texts again and again. A session
keeps what it prepared for its last `CAPACITY` statements (at most `MAX_CHARS` characters
of SQL in all: a BI tool's catalog queries run to tens of kilobytes, and a server has up
to a hundred sessions), keyed by everything the result
depends on: the text, the session's settings (search_path, current_setting() answers, ...)
and the database's generation (the tables and schemas served, which a refresh changes).
What the rewrite resolved from anything else is never kept: statements with parameters,
time travel (resolved against the lake's snapshots) and set_config() (a side effect)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CAPACITY = 128
MAX_CHARS = 1_000_000


@dataclass(frozen=True)
class PreparedSelect:
    """A checked and rewritten statement: the DuckDB text, the Postgres column names, the
    columns' table origins (None: not known) and the command tag."""

    text: str
    names: tuple[str | None, ...]
    origins: tuple[Any, ...] | None
    tag: str


Key = tuple[str, tuple[tuple[str, str], ...], int]


def key(sql: str, settings: Mapping[str, str], generation: int) -> Key:
    return (sql, tuple(sorted(settings.items())), generation)


class PreparedCache:
    """Bounded, least recently used first out. Used by one session's thread at a time."""

    def __init__(self, capacity: int = CAPACITY, max_chars: int = MAX_CHARS) -> None:
        self.capacity = capacity
        self.max_chars = max_chars
        self._entries: OrderedDict[Key, PreparedSelect] = OrderedDict()
        self._chars = 0

    def get(self, cache_key: Key) -> PreparedSelect | None:
        found = self._entries.get(cache_key)
        if found is not None:
            self._entries.move_to_end(cache_key)
        return found

    def put(self, cache_key: Key, prepared: PreparedSelect) -> None:
        size = _size(cache_key, prepared)
        if size > self.max_chars:
            return
        replaced = self._entries.pop(cache_key, None)
        if replaced is not None:
            self._chars -= _size(cache_key, replaced)
        self._entries[cache_key] = prepared
        self._chars += size
        while len(self._entries) > self.capacity or self._chars > self.max_chars:
            old_key, old = self._entries.popitem(last=False)
            self._chars -= _size(old_key, old)

    def __len__(self) -> int:
        return len(self._entries)


def _size(cache_key: Key, prepared: PreparedSelect) -> int:
    return len(cache_key[0]) + len(prepared.text)
