"""Qualified table names as a user writes them (`schema.table`): each part bare, as it is
(not folded to lower case), or in double quotes as in SQL (`""` for a quote), which a part
holding a dot needs: `public."dot.ted"`, `"Sales Dept"."Order Items"`."""

from __future__ import annotations


def name_parts(text: str) -> list[str] | None:
    """The parts of `text`, split at the dots outside double quotes; None when a quote is
    left open or a part is empty."""
    parts: list[str] = []
    part, quoted, i = "", False, 0
    while i < len(text):
        c = text[i]
        if quoted and c == '"':
            if text[i + 1 : i + 2] == '"':
                part, i = part + '"', i + 2
                continue
            quoted = False
        elif not quoted and c == '"':
            quoted = True
        elif not quoted and c == ".":
            parts.append(part)
            part = ""
        else:
            part += c
        i += 1
    parts.append(part)
    return None if quoted or not all(parts) else parts


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
