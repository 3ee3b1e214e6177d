"""`streambed resync TABLE [TABLE ...]`: ask for tables to be copied again.

The request goes into the state store; a running `streambed run` starts the copies within
seconds (`streambed.copy.manager`), otherwise the next start does. Each name is read as SQL
writes it (`streambed.core.names`). Before anything is recorded, the source is asked whether the
stream sends each table: a name it does not (a typo, a table outside the publication or
left out by the settings) is refused with the names it does send that are closest, since
a running streambed would only drop the request with a warning in its log. When the
source cannot be asked, or the publication does not exist yet (the first start creates it
and copies every table), the requests are recorded all the same, and the reply says so.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from streambed.core.config import Settings
from streambed.core.errors import ConfigError, StreambedError
from streambed.core.names import name_parts, qualified, table_selected

Name = tuple[str, str]


def request(settings: Settings, tables: Sequence[str]) -> str:
    """Record a resync of each of `tables` (as SQL writes them); the reply to print.
    Raises ConfigError, recording nothing, when a name is not a table streambed streams."""
    names = list(dict.fromkeys(_name(settings, table) for table in tables))
    streamed, unchecked = _streamed(settings)
    if streamed is not None:
        missing = [name for name in names if name not in streamed]
        if missing:
            raise ConfigError(_not_streamed(settings, missing, streamed))
    from streambed.state.store import StateStore

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with StateStore(settings.state_path) as state:
        for schema, name in names:
            state.request_resync(schema, name)
    listed = ", ".join(qualified(*name) for name in names)
    reply = (
        f"resync of {listed} requested: a running `streambed run` copies "
        f"{'them' if len(names) > 1 else 'it'} again within seconds (otherwise the next "
        "start does); `streambed status` shows each table's state\n"
    )
    return reply + (f"note: {unchecked}\n" if unchecked else "")


def _name(settings: Settings, table: str) -> Name:
    parts = name_parts(table)
    if parts is None or len(parts) != 2:
        raise ConfigError(
            f"resync needs a schema-qualified table name (public.orders), not {table!r}; "
            'a part holding a dot goes in double quotes (public."dot.ted")'
        )
    schema, name = parts
    if not table_selected(schema, name, settings.include_tables, settings.exclude_tables):
        raise ConfigError(
            f"{qualified(schema, name)} is left out by STREAMBED_INCLUDE_TABLES="
            f"{','.join(settings.include_tables)} / STREAMBED_EXCLUDE_TABLES="
            f"{','.join(settings.exclude_tables)}: streambed does not stream it, so a copy "
            "would be stale at once. Change the settings to include it; the next start "
            "copies it"
        )
    return schema, name


def _streamed(settings: Settings) -> tuple[set[Name] | None, str]:
    """The tables the stream sends, or None and why they are not known."""
    from streambed.source import setup
    from streambed.source.connection import sql_connect

    try:
        with sql_connect(settings.source_url) as conn:
            if not setup.publication_exists(conn, settings.publication):
                return None, (
                    f"the publication {settings.publication} does not exist yet: the first "
                    "start creates it and copies every table it publishes"
                )
            members = setup.memberships(
                conn, settings.publication, settings.include_tables, settings.exclude_tables
            )
    except StreambedError as e:
        return None, (
            f"the source could not be asked whether it streams them ({e}); a running "
            "streambed copies those it streams and logs a warning for any other"
        )
    return set(members), ""


def _not_streamed(settings: Settings, missing: list[Name], streamed: set[Name]) -> str:
    known = {qualified(*name): name for name in streamed}
    lines = []
    for name in missing:
        close = difflib.get_close_matches(qualified(*name), list(known), n=3, cutoff=0.6)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        lines.append(f"{qualified(*name)}{hint}")
    return (
        f"not streamed, so not copied again: {'; '.join(lines)}. streambed streams the "
        f"tables of the publication {settings.publication} that STREAMBED_INCLUDE_TABLES / "
        f"STREAMBED_EXCLUDE_TABLES keep ({len(streamed)} now); a table added to it is "
        "copied by itself. Nothing was requested"
    )
