"""`streambed resync TABLE` takes the table as SQL writes it: `schema.table`, a part in
double quotes when it holds a dot."""

from __future__ import annotations

from pathlib import Path

import pytest

from streambed.commands.resync import request
from streambed.core.config import Settings
from streambed.core.errors import ConfigError
from streambed.state import StateStore


@pytest.mark.parametrize(
    ("argument", "requested"),
    [
        ("public.orders", ("public", "orders")),
        ('"Sales Dept"."Order Items"', ("Sales Dept", "Order Items")),
        ('public."dot.ted"', ("public", "dot.ted")),
        ('"a.b".c', ("a.b", "c")),
    ],
)
def test_the_named_table_is_requested(
    argument: str, requested: tuple[str, str], tmp_path: Path
) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    reply = request(settings, [argument])
    assert "resync of" in reply
    assert "note: the source could not be asked whether it streams them" in reply
    with StateStore(settings.state_path) as state:
        assert state.take_resync_requests() == [requested]


@pytest.mark.parametrize("argument", ["orders", "public.dot.ted", '"open.x', "public."])
def test_what_is_not_schema_dot_table_is_refused(argument: str, tmp_path: Path) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    with pytest.raises(ConfigError, match=r'schema-qualified table name.*public\."dot\.ted"'):
        request(settings, [argument])
    assert not settings.state_path.exists()
