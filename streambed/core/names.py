"""Qualified table names as a user writes them (`schema.table`): each part bare, as it is
(not folded to lower case), or in double quotes as in SQL (`""` for a quote), which a part
holding a dot needs: `public."dot.ted"`, `"Sales Dept"."Order Items"`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase


def name_parts(text: str) -> list[str] | None:
    """The parts of `text`, split at the dots outside double quotes; None when a quote is
    left open or a part is empty."""
    parts = _split(text, ".", lambda c: c)
    return None if parts is None or not all(parts) else parts


def split_list(text: str) -> list[str]:
    """The items of a comma-separated list, split at the commas outside double quotes
    (`"a,b".c, public.*`), each stripped, empty ones left out. A quote left open makes
    the whole text one item, for `pattern_problem` to name."""
    items = _split(text, ",", lambda c: c, keep_quotes=True)
    return [item.strip() for item in items or [text] if item.strip()]


def table_matches(schema: str, name: str, pattern: str) -> bool:
    """Whether `pattern` selects the table `schema.name`. A pattern without double quotes
    is a shell pattern over the text `schema.name` (`public.*`, `*.orders`). A pattern
    with them is two parts, as SQL writes a name: a quoted part is read literally, a bare
    one as a shell pattern (`"Sales Dept".*`, `public."a,b"`)."""
    if '"' not in pattern:
        return fnmatchcase(f"{schema}.{name}", pattern)
    parts = _split(pattern, ".", _literal)
    if parts is None or len(parts) != 2:
        return False
    return fnmatchcase(schema, parts[0]) and fnmatchcase(name, parts[1])


def table_selected(schema: str, name: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether the include list (empty: every table) and then the exclude list keep
    `schema.name`."""
    if include and not any(table_matches(schema, name, p) for p in include):
        return False
    return not any(table_matches(schema, name, p) for p in exclude)


def pattern_problem(pattern: str) -> str | None:
    """What is wrong with a table pattern, or None."""
    if '"' not in pattern:
        return None
    parts = _split(pattern, ".", _literal)
    if parts is None:
        return f"{pattern!r} leaves a double quote open"
    if len(parts) != 2 or not all(parts):
        return (
            f"{pattern!r} is not schema.table: with double quotes, a pattern names the "
            'schema and the table, each part bare or quoted (public."a.b", "Sales Dept".*)'
        )
    return None


def _literal(c: str) -> str:
    return f"[{c}]" if c in "*?[" else c


def _split(
    text: str, separator: str, quoted_char: Callable[[str], str], keep_quotes: bool = False
) -> list[str] | None:
    """`text` split at each `separator` outside double quotes; a character inside them
    becomes `quoted_char(c)`, and `""` in them a quote. The quotes themselves are left out
    unless `keep_quotes`. None when a quote is left open."""
    parts: list[str] = []
    part, quoted, i = "", False, 0
    mark = '"' if keep_quotes else ""
    while i < len(text):
        c = text[i]
        if quoted and c == '"':
            if text[i + 1 : i + 2] == '"':
                part, i = part + ('""' if keep_quotes else quoted_char('"')), i + 2
                continue
            quoted, part = False, part + mark
        elif not quoted and c == '"':
            quoted, part = True, part + mark
        elif not quoted and c == separator:
            parts.append(part)
            part = ""
        else:
            part += quoted_char(c) if quoted else c
        i += 1
    parts.append(part)
    return None if quoted else parts


def qualified(schema: str, name: str) -> str:
    """`schema.name`, each part in double quotes when it holds a dot or a double quote, so
    that `split_qualified` reads it back (`public.orders`, `public."dot.ted"`)."""
    return ".".join(_quoted(p) if "." in p or '"' in p else p for p in (schema, name))


def split_qualified(text: str) -> tuple[str, str]:
    """(schema, name) of a `qualified` text; one written before names were quoted (a dot
    in the table's name) is split at its first dot, as it was then."""
    parts = name_parts(text)
    if parts is not None and len(parts) == 2:
        return parts[0], parts[1]
    schema, _, name = text.partition(".")
    return schema, name


def _quoted(part: str) -> str:
    return '"' + part.replace('"', '""') + '"'
