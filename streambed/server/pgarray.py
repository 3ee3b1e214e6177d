"""Postgres array text ("{1,NULL,"a b"}") read back into its elements.

The lake stores arrays as their Postgres text; a client that asks for them in binary
format gets the array send format built from the parsed elements
(`streambed.server.wire.results`).
"""

from __future__ import annotations


class NotOneDimensional(ValueError):
    """The text is not a one-dimensional array literal this parser reads."""


def parse_array(text: str) -> list[str | None]:
    """The elements of a one-dimensional array literal, as text (None for NULL).
    Raises NotOneDimensional for nested arrays, dimension decorations or bad text."""
    if not (text.startswith("{") and text.endswith("}")):
        raise NotOneDimensional(f"not an array literal: {text[:40]!r}")
    body = text[1:-1]
    if body == "":
        return []
    items: list[str | None] = []
    i, n = 0, len(body)
    while True:
        if i < n and body[i] == '"':
            i += 1
            chars: list[str] = []
            while i < n and body[i] != '"':
                if body[i] == "\\":
                    i += 1
                if i < n:
                    chars.append(body[i])
                i += 1
            if i >= n:
                raise NotOneDimensional("unterminated quoted array element")
            i += 1
            items.append("".join(chars))
        else:
            end = i
            while end < n and body[end] != ",":
                if body[end] in '{}"\\':
                    raise NotOneDimensional("nested or escaped array elements")
                end += 1
            word = body[i:end].strip()
            items.append(None if word.upper() == "NULL" else word)
            i = end
        if i >= n:
            return items
        if body[i] != ",":
            raise NotOneDimensional("text after a quoted array element")
        i += 1
