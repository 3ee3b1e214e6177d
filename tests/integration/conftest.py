"""Every test under tests/integration needs real servers: it is marked `integration`, so
`pytest -m "not integration"` runs the fast suite (what `make unit` runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
