"""Which tables the stream sends, and which of them left the publication and came back.

The stream sends a table while the publication lists it and the settings
(`STREAMBED_INCLUDE_TABLES` / `STREAMBED_EXCLUDE_TABLES`) keep it. Each table's publication
rows (`setup.Membership`) are stored in the state store as last seen. A table none of whose
stored rows remain (`setup.left_and_came_back`) was removed from the publication and added
again since: the changes made to it in between were never sent, so it must be copied again.

`CopyManager` asks this at start (`replaced`, then `remember`) and, while running, every
`MEMBERSHIP_POLL_SECONDS` (`changes`). A table whose copy is running (`held`) is looked at
only once that copy has ended: its stored rows are those from before the copy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from streambed.core.config import Settings
from streambed.core.errors import StreambedError
from streambed.core.log import log
from streambed.source import setup
from streambed.source.connection import sql_connect
from streambed.state.store import StateStore

logger = logging.getLogger("streambed.copy")

MEMBERSHIP_POLL_SECONDS: Final = 10.0
"""How often a running process looks for tables removed from the publication and added
again (`StreamedTables.changes`)."""

Name = tuple[str, str]
Members = Mapping[Name, setup.Membership]


class StreamedTables:
    """The tables the stream sends, asked of the source (`ask`: the default runs
    `setup.memberships` on a new connection; None when the source cannot be asked), and
    their publication rows as the state store last saw them."""

    def __init__(
        self,
        settings: Settings,
        state: StateStore,
        ask: Callable[[], dict[Name, setup.Membership] | None] | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self._ask = ask or self._memberships
        self._next_poll = time.monotonic() + MEMBERSHIP_POLL_SECONDS

    def now(self) -> dict[Name, setup.Membership] | None:
        """The tables the stream sends now, with their publication rows; None when the
        source cannot be asked."""
        return self._ask()

    def _memberships(self) -> dict[Name, setup.Membership] | None:
        try:
            conn = sql_connect(self.settings.source_url)
            try:
                return setup.memberships(
                    conn,
                    self.settings.publication,
                    self.settings.include_tables,
                    self.settings.exclude_tables,
                )
            finally:
                conn.close()
        except StreambedError:
            return None

    def replaced(self, members: Members, held: Callable[[Name], bool]) -> list[Name]:
        """Registered tables none of whose publication rows are those seen last: each was
        removed from the publication and added again since (a row added again gets a new
        oid). Tables whose copy is running (`held`) are looked at once it has ended."""
        stored = self.state.memberships()
        return [
            name
            for name, rows in members.items()
            if setup.left_and_came_back(stored.get(name), rows) and not held(name)
        ]

    def remember(self, members: Members, held: Callable[[Name], bool]) -> None:
        """Store the publication rows of the registered tables not being copied (after
        `replaced` has been acted on, durably)."""
        stored = self.state.memberships()
        for name, rows in members.items():
            if stored.get(name) != rows and not held(name) and self.state.table(*name) is not None:
                self.state.set_membership(*name, rows)

    def changes(self, now: float, held: Callable[[Name], bool]) -> list[Name]:
        """Every `MEMBERSHIP_POLL_SECONDS`: the registered tables removed from the
        publication and added again (`replaced`), marked `pending` (durably, before their
        new publication rows are stored) to be copied again. A source that cannot be asked
        is asked at the next poll."""
        if now < self._next_poll:
            return []
        self._next_poll = now + MEMBERSHIP_POLL_SECONDS
        members = self.now()
        if members is None:
            return []
        replaced: list[Name] = []
        for name in self.replaced(members, held):
            current = self.state.table(*name)
            if current is None:
                continue  # a new table: its Relation message copies it
            self.state.register(name[0], name[1], current.relation_id, "pending")
            self.log_replaced(name, "copying it again")
            replaced.append(name)
        self.remember(members, held)
        return replaced

    def only_streamed(self, requested: list[Name]) -> list[Name]:
        """The resync requests for tables the stream sends; a request for any other table
        (not in the publication, left out by STREAMBED_INCLUDE_TABLES /
        STREAMBED_EXCLUDE_TABLES, or not existing) is dropped with a warning: its copy would
        be stale from its first moment. If the source cannot be asked, every request is
        kept (its copy reports what is wrong)."""
        if not requested:
            return requested
        streamed = self.now()
        if streamed is None:
            return requested
        for schema, name in requested:
            if (schema, name) not in streamed:
                log(
                    logger,
                    "resync ignored: the table is not streamed (not in the publication, left "
                    "out by STREAMBED_INCLUDE_TABLES / STREAMBED_EXCLUDE_TABLES, or not "
                    "existing)",
                    logging.WARNING,
                    table=f"{schema}.{name}",
                    publication=self.settings.publication,
                )
        return [t for t in requested if t in streamed]

    def log_replaced(self, name: Name, action: str) -> None:
        log(
            logger,
            f"table removed from the publication and added again since it was last "
            f"streamed: the changes made in between were never sent; {action}",
            logging.WARNING,
            table=f"{name[0]}.{name[1]}",
            publication=self.settings.publication,
        )
