"""Each class name of the package means one thing: no two modules define a top-level class
of the same name (issue 41: `TableKey`, `Watermark`, `FileInfo`, `TableInfo`, `State`,
`Backoff` and `Origin` each named two different things)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import streambed

ROOT = Path(streambed.__file__).parent


def test_no_class_name_is_defined_twice() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(ROOT.parent)))
    assert len(where) > 100
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
