"""The copy progress of real running COPYs, as `pg_stat_progress_copy` shows them: rows,
rows/s and ETA per table, redrawn at the foot of a terminal under the log lines, or logged
off a terminal. Each copy here is two slow `COPY ... TO STDOUT` (a millisecond a row) on
connections named as a copy's workers are."""

from __future__ import annotations

import io
import logging
import re
import threading
import time

import psycopg
import pytest

from streambed.copy.progress import ProgressBoard
from streambed.core.log import RegionHandler, TextFormatter
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.terminal import terminal

pytestmark = pytest.mark.integration

ROWS = 1500  # per partition: about two seconds each
LINE = re.compile(
    r"(?P<table>\S+) +(?P<state>\w+) +(?P<rows>[\d,]+)/~(?P<total>[\d,]+) rows +"
    r"(?P<rate>[\d,]+) rows/s +eta (?P<eta>\S+)"
)


def _copies(url: str, run_id: str) -> list[threading.Thread]:
    def copy(part: int) -> None:
        name = f"streambed-copy {run_id}/{part}"
        with psycopg.connect(url, application_name=name, autocommit=True) as conn:
            query = f"COPY (SELECT g, pg_sleep(0.001) FROM generate_series(1, {ROWS}) g) TO STDOUT"
            with conn.cursor().copy(query) as rows:
                for _ in rows:
                    pass

    threads = [threading.Thread(target=copy, args=(part,)) for part in (0, 1)]
    for t in threads:
        t.start()
    return threads


def _figures(line: str) -> dict[str, str]:
    match = LINE.search(line)
    assert match, line
    return match.groupdict()


def test_the_progress_of_running_copies_is_logged_off_a_terminal(
    pg_db: PgDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streambed.copy")
    board = ProgressBoard(pg_db.url, out=io.StringIO(), interval=0.2, log_interval=0.5)
    assert not board.live
    board.start("public.slow", "run1", 2 * ROWS)
    for t in _copies(pg_db.url, "run1"):
        t.join()
    board.finish("public.slow", 2 * ROWS)
    board.close()
    lines = [
        r.fields["progress"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() in ("copy progress", "copy finished")
    ]
    figures = [_figures(line) for line in lines]
    counts = [int(f["rows"].replace(",", "")) for f in figures]
    assert counts == sorted(counts) and counts[-1] == 2 * ROWS, lines
    running = [f for f, n in zip(figures, counts, strict=True) if 0 < n < 2 * ROWS]
    assert running, lines  # seen while the copies ran: their counts, a rate, an ETA
    assert all(f["state"] == "copying" and f["rate"] != "0" for f in running), lines
    assert all(re.fullmatch(r"\d+s", f["eta"]) for f in running), lines
    assert figures[-1]["state"] == "done" and all(f["total"] == f"{2 * ROWS:,}" for f in figures)


def test_the_progress_of_running_copies_is_redrawn_under_the_log_lines_on_a_terminal(
    pg_db: PgDatabase,
) -> None:
    with terminal(columns=160, rows=30) as term:
        board = ProgressBoard(pg_db.url, out=term.out, interval=0.2)
        assert board.live
        handler = RegionHandler(board.region)
        handler.setFormatter(TextFormatter())
        logger = logging.getLogger("streambed.test_progress_board")
        logger.addHandler(handler)
        logger.propagate = False
        threads: list[threading.Thread] = []
        try:
            board.start("public.slow", "run2", 2 * ROWS)
            board.start("public.other", "run3", 10)
            deadline = time.monotonic() + 10
            while len(term.lines()) < 2:  # the first lines come with the first poll
                assert time.monotonic() < deadline
                time.sleep(0.05)
            threads += _copies(pg_db.url, "run2")
            seen: list[int] = []
            while any(t.is_alive() for t in threads):
                logger.warning("flushed n=%d", len(seen))  # as the streaming tables' flushes
                time.sleep(0.1)
                shown = term.lines()
                # The log lines so far, in order, then the two tables' lines, once each.
                assert [line.split()[-1] for line in shown[:-2]] == [
                    f"n={i}" for i in range(len(seen) + 1)
                ], shown
                slow, other = (_figures(line) for line in shown[-2:])
                assert (slow["table"], other["table"]) == ("public.slow", "public.other")
                seen.append(int(slow["rows"].replace(",", "")))
            board.finish("public.slow", 2 * ROWS)
            board.finish("public.other", None, failed=True)
            deadline = time.monotonic() + 10
            while board._thread is not None:  # the lines' last redraw, then the thread ends
                assert time.monotonic() < deadline
                time.sleep(0.05)
            logger.warning("after the copies")
            shown = term.lines()
        finally:
            for t in threads:  # a failed assertion: the database is dropped after them
                t.join()
            board.close()
            logger.removeHandler(handler)
    assert seen == sorted(seen) and any(0 < n < 2 * ROWS for n in seen), seen
    assert [_figures(line)["state"] for line in shown[-3:-1]] == ["done", "failed"], shown
    assert _figures(shown[-3])["rows"] == f"{2 * ROWS:,}"
    assert shown[-1].endswith("after the copies")
