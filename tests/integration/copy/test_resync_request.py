"""`streambed resync TABLE [TABLE ...]` asks the source before recording anything: a name
the stream does not send is refused with the closest names it does send, and nothing is
requested; names it sends are recorded together."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streambed.commands.resync import request
from streambed.core.config import Settings
from streambed.core.errors import ConfigError
from streambed.state import StateStore
from tests.fixtures.postgres import PgDatabase

pytestmark = pytest.mark.integration


def _requested(settings: Settings) -> list[tuple[str, str]]:
    if not settings.state_path.exists():
        return []
    with StateStore(settings.state_path) as state:
        return sorted(state.take_resync_requests())


@pytest.fixture
def settings(pg_db: PgDatabase, tmp_path: Path) -> Settings:
    with pg_db.connect() as conn:
        conn.execute(
            'CREATE TABLE orders (id int PRIMARY KEY); CREATE TABLE "Order Items" (id int '
            "PRIMARY KEY); CREATE TABLE unpublished (id int PRIMARY KEY); "
            'CREATE PUBLICATION mine FOR TABLE orders, "Order Items"'
        )
    return Settings(source_url=pg_db.url, data_dir=tmp_path, publication="mine")


def test_tables_the_stream_sends_are_requested_together(settings: Settings) -> None:
    reply = request(settings, ["public.orders", 'public."Order Items"', "public.orders"])
    assert reply.startswith("resync of public.orders, public.Order Items requested")
    assert "note:" not in reply
    assert _requested(settings) == [("public", "Order Items"), ("public", "orders")]


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (["public.ordrs"], r"public\.ordrs \(did you mean public\.orders or public\.Order"),
        (["public.orders", "public.unpublished"], r"not copied again: public\.unpublished\. "),
        (["nowhere.orders"], r"nowhere\.orders\. streambed streams the tables of the "),
    ],
)
def test_a_table_the_stream_does_not_send_is_refused_and_nothing_requested(
    settings: Settings, tables: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        request(settings, tables)
    assert "publication mine" in str(refused.value) and "(2 now)" in str(refused.value)
    assert _requested(settings) == []


def test_before_the_first_start_the_request_is_recorded_with_a_note(
    settings: Settings,
) -> None:
    settings = Settings(
        source_url=settings.source_url, data_dir=settings.data_dir, publication="later"
    )
    reply = request(settings, ["public.anything"])
    assert "note: the publication later does not exist yet" in reply
    assert _requested(settings) == [("public", "anything")]


def test_the_command_takes_several_tables_and_exits_2_for_one_not_streamed(
    settings: Settings,
) -> None:
    env = {
        **os.environ,
        "STREAMBED_SOURCE_URL": settings.source_url,
        "STREAMBED_DATA_DIR": str(settings.data_dir),
        "STREAMBED_PUBLICATION": "mine",
    }

    def resync(*tables: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "streambed.cli", "resync", *tables]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    refused = resync("public.orders", "public.ordrs")
    assert refused.returncode == 2, refused.stderr
    assert "public.ordrs (did you mean public.orders" in refused.stderr
    assert _requested(settings) == []
    done = resync("public.orders", 'public."Order Items"')
    assert done.returncode == 0, done.stderr
    assert "resync of public.orders, public.Order Items requested" in done.stdout
    assert _requested(settings) == [("public", "Order Items"), ("public", "orders")]
