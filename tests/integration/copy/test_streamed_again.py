"""A table the stream stopped sending (left out by STREAMBED_EXCLUDE_TABLES, or removed from
the publication) is copied again when it is streamed again: the changes made to it
meanwhile were never sent, and the lake must not miss them."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from streambed.state.store import StateStore
from tests.integration.copy.test_initial_copy import _all_ready, _statuses
from tests.integration.copy.test_resync import _copies_committed
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration

BOTH = ["public.kept", "public.left"]
FORGOTTEN = "table no longer streamed"
REPLACED = "table removed from the publication and added again"


def _tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in BOTH:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 300) g")


def _published_tables(url: str) -> None:
    """Both tables, in a publication that lists them (so one can be removed from it)."""
    _tables(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION streambed FOR TABLE public.kept, public.left")


def _change_left_then_kept(url: str, mark: str) -> None:
    """Changes to `left` the stream does not send, then one to `kept`: once `kept`'s is in
    the lake, the stream has read (and acknowledged) past those to `left`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE public.left SET v = %s WHERE id <= 20", (mark,))
        conn.execute("DELETE FROM public.left WHERE id > 290")
        conn.execute("INSERT INTO public.left VALUES (1000 + length(%s), %s)", (mark, mark))
        conn.execute("INSERT INTO public.kept VALUES (1000 + length(%s), %s)", (mark, mark))


def _start_and_copy(d: Deployment) -> None:
    d.proc.start()
    wait_until(lambda: _all_ready(d, BOTH), 240, "both tables copied", d.proc)
    wait_lake_equals_source(d.settings, d.url, BOTH, d.proc)
    assert d.proc.stop() == 0


def test_a_table_included_again_by_configuration_is_copied_again(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _tables(d.url)
    _start_and_copy(d)

    d.proc.start({"STREAMBED_EXCLUDE_TABLES": "public.left"})
    _change_left_then_kept(d.url, "while left out")
    wait_lake_equals_source(d.settings, d.url, ["public.kept"], d.proc)
    assert d.proc.stop() == 0
    forgotten = "public.left" not in _statuses(d)
    with StateStore(d.settings.state_path) as state:
        mark = state.latest_watermark()
    assert mark is not None
    served = set(mark.tables)  # what the query server serves

    d.proc.start()  # the exclusion is gone
    wait_until(lambda: _all_ready(d, BOTH), 240, "both ready", d.proc)
    wait_lake_equals_source(d.settings, d.url, BOTH, d.proc)
    assert _copies_committed(d, "public.left") == 2
    assert _copies_committed(d, "public.kept") == 1
    assert d.proc.stop() == 0
    assert forgotten
    assert served == {"public.kept"}  # a table left out is no longer served
    assert d.proc.logs().count(FORGOTTEN) == 1


def test_a_table_added_back_to_the_publication_is_copied_again_online(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _published_tables(d.url)
    _start_and_copy(d)

    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION streambed DROP TABLE public.left")
    d.proc.start()
    _change_left_then_kept(d.url, "while unpublished")
    wait_lake_equals_source(d.settings, d.url, ["public.kept"], d.proc)

    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION streambed ADD TABLE public.left")
        conn.execute("INSERT INTO public.left VALUES (5000, 'published again')")
    wait_lake_equals_source(d.settings, d.url, BOTH, d.proc)
    assert _copies_committed(d, "public.left") == 2
    assert _all_ready(d, BOTH)
    assert d.proc.stop() == 0
    assert d.proc.logs().count(FORGOTTEN) == 1


def _remove_change_add(url: str, mark: str) -> None:
    """`left` out of the publication, changed, and back in: its changes in between are never
    sent; then a change to `kept`, and one to `left` that is sent."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION streambed DROP TABLE public.left")
    _change_left_then_kept(url, mark)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION streambed ADD TABLE public.left")
        conn.execute("INSERT INTO public.left VALUES (6000 + length(%s), %s)", (mark, mark))


def test_a_table_removed_from_the_publication_and_added_back_while_running_is_copied_again(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _published_tables(d.url)
    d.proc.start()
    wait_until(lambda: _all_ready(d, BOTH), 240, "both tables copied", d.proc)
    wait_lake_equals_source(d.settings, d.url, BOTH, d.proc)

    _remove_change_add(d.url, "out for a moment")
    wait_lake_equals_source(d.settings, d.url, BOTH, d.proc)
    assert _copies_committed(d, "public.left") == 2
    assert _copies_committed(d, "public.kept") == 1
    assert d.proc.logs().count(REPLACED) == 1
    assert d.proc.stop() == 0


def test_a_table_removed_from_the_publication_and_added_back_while_stopped_is_copied_again(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _published_tables(d.url)
    _start_and_copy(d)

    _remove_change_add(d.url, "out while stopped")
    d.proc.start()
    wait_until(lambda: _all_ready(d, BOTH), 240, "both ready", d.proc)
    wait_lake_equals_source(d.settings, d.url, BOTH, d.proc)
    assert _copies_committed(d, "public.left") == 2
    assert d.proc.logs().count(REPLACED) == 1
    assert d.proc.stop() == 0


def test_resync_of_a_table_left_out_by_configuration_is_refused(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    done = subprocess.run(
        [sys.executable, "-m", "streambed.cli", "resync", "public.left"],
        env={**os.environ, **d.env, "STREAMBED_EXCLUDE_TABLES": "shop.*,public.left"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "public.left is left out by" in done.stderr
    assert "STREAMBED_EXCLUDE_TABLES=shop.*,public.left" in done.stderr
    assert not d.settings.state_path.exists()  # nothing was recorded
