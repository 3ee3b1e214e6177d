"""No server paths or credentials in what the query server answers.

DuckDB names files in its error messages and query plans (the views read
`iceberg_scan('<metadata location>')`). `Redactor` replaces the warehouse root with `<lake>`
(so `<lake>/public/orders/metadata/...` still says which table), the server's scratch and
other allowed directories with `<server>`, and the S3 credentials with `<secret>`, in error
messages and EXPLAIN output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

LAKE = "<lake>"
SERVER = "<server>"
SECRET = "<secret>"


def _forms(root: str) -> list[str]:
    """The ways a directory may be written: as given, as a file:// URI, resolved."""
    root = root.rstrip("/")
    if not root:
        return []
    if "://" in root and not root.startswith("file://"):
        return [root]
    path = root.removeprefix("file://")
    forms = {path, "file://" + path}
    resolved = str(Path(path).resolve())
    forms |= {resolved, "file://" + resolved}
    return sorted(forms, key=len, reverse=True)


class Redactor:
    def __init__(
        self, lake: str, server_paths: Iterable[str] = (), secrets: Iterable[str] = ()
    ) -> None:
        pairs: list[tuple[str, str]] = [(f, LAKE) for f in _forms(lake)]
        for path in server_paths:
            pairs += [(f, SERVER) for f in _forms(path)]
        pairs += [(s, SECRET) for s in secrets if s]
        pairs.sort(key=lambda p: len(p[0]), reverse=True)  # the longest match first
        self._pairs = pairs
        self._pattern = re.compile("|".join(re.escape(p) for p, _ in pairs)) if pairs else None
        self._replacement = dict(pairs)

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(lambda m: self._replacement[m.group(0)], value)

    def batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """String columns redacted (EXPLAIN output: small)."""
        if self._pattern is None:
            return batch
        arrays = []
        for column in batch.columns:
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                for old, new in self._pairs:
                    column = pc.replace_substring(column, pattern=old, replacement=new)
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)

    def batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.batch(batch)
