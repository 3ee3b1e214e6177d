"""Which psql the copy runs, and the CSV options that read Postgres' CSV."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from streambed.copy.client import PSQL_ENV, csv_options, find_psql


def test_configured_psql_wins_and_empty_disables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PSQL_ENV, "/opt/pg/bin/psql")
    assert find_psql() == "/opt/pg/bin/psql"
    monkeypatch.setenv(PSQL_ENV, "")
    assert find_psql() is None


def test_a_wrapper_script_on_path_is_skipped_for_the_real_binary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wrapper = tmp_path / "psql"
    wrapper.write_text("#!/usr/bin/perl\n")
    wrapper.chmod(0o755)
    monkeypatch.delenv(PSQL_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    binaries = glob.glob("/usr/lib/postgresql/*/bin/psql")
    found = find_psql()
    if binaries:
        assert found in binaries
    else:
        assert found == str(wrapper)
    wrapper.write_bytes(b"\x7fELF")  # a real binary on PATH is used as it is
    assert find_psql() == str(wrapper)
    assert os.access(str(wrapper), os.X_OK)


def test_csv_options_read_nulls_empty_strings_and_newlines() -> None:
    read, parse, convert = csv_options([pa.binary()] * 3, 1 << 20)
    data = b'1,,""\n2,"a\nb","x,""y"""\n'
    table = pcsv.read_csv(
        pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert
    )
    assert table.column(1).to_pylist() == [None, b"a\nb"]
    assert table.column(2).to_pylist() == [b"", b'x,"y"']
