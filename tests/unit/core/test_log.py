"""The text log format: fields as `key=value`, quoted when they must be, secrets hidden."""

from __future__ import annotations

import logging

from streambed.core.log import TextFormatter


def _line(**fields: object) -> str:
    record = logging.LogRecord("streambed.copy", logging.INFO, __file__, 1, "copy", None, None)
    record.fields = fields
    return TextFormatter().format(record)


def test_plain_values_stay_as_they_are() -> None:
    assert _line(table="public.orders", rows=3).endswith(
        " info streambed.copy copy table=public.orders rows=3"
    )
    assert _line(table="Ünïcode.naïve").endswith(" table=Ünïcode.naïve")


def test_blank_empty_and_control_characters_are_quoted_and_names_keep_their_script() -> None:
    assert _line(table="Sales Dept.Order Items").endswith(' table="Sales Dept.Order Items"')
    assert _line(table="販売 部.注文").endswith(' table="販売 部.注文"')
    assert _line(note="").endswith(' note=""')
    line = _line(table="public.a\nb", tab="x\ty", bell="a\x07")
    assert "\n" not in line
    assert line.endswith(' table="public.a\\nb" tab="x\\ty" bell="a\\u0007"')


def test_passwords_never_reach_the_line() -> None:
    line = _line(url="postgresql://app:s3cret@db/x", conninfo="host=db password=s3cret")
    assert "s3cret" not in line and "app:***@db" in line
