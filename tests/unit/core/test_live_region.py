"""Lines kept at the foot of a terminal (`streambed.core.log.LiveRegion`, the copy progress)
and log lines written above them: what a user's terminal shows (`tests.fixtures.terminal`:
a real pseudo-terminal, rendered by a VT100 emulator)."""

from __future__ import annotations

import logging
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.copy.progress import ProgressBoard
from streambed.core.log import LiveRegion, RegionHandler, TextFormatter, fit
from tests.fixtures.terminal import terminal

# Latin text: how wide characters wrap differs between terminals (cut lines are tested below).
LINES = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x24F, categories=["L", "N", "P", "Zs"]),
    max_size=70,
).map(str.strip)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("log"), LINES),
        st.tuples(st.just("show"), st.lists(LINES, max_size=8)),
        st.tuples(st.just("keep"), st.just("")),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(STEPS, st.integers(20, 60), st.integers(3, 12))
def test_the_terminal_shows_every_log_line_in_order_and_the_region_once_below_them(
    steps: list[tuple[str, str | list[str]]], columns: int, rows: int
) -> None:
    above: list[str] = []  # what the user must see, top to bottom
    region: list[str] = []
    with terminal(columns, rows) as term:
        live = LiveRegion(term.out)
        assert live.live
        for kind, value in steps:
            if kind == "log":
                assert isinstance(value, str)
                live.write(f"log {value}\n")
                above.append(f"log {value}")  # a log line may wrap
            elif kind == "show":
                assert isinstance(value, list)
                live.show([f"> {v}" for v in value])
                region = [f"> {v}" for v in value]
                if len(region) > rows - 1:
                    region = [*region[: rows - 2], f"... and {len(region) - rows + 2} more"]
                region = [fit(line, columns) for line in region]
            else:
                live.keep()
                above += region
                region = []
        shown = term.lines()
    assert shown == _rows([*above, *region], columns)


def _rows(lines: list[str], columns: int) -> list[str]:
    """`lines` as a terminal `columns` wide shows them: a longer line wraps."""
    out: list[str] = []
    for line in lines:
        rows = [line[i : i + columns] for i in range(0, max(len(line), 1), columns)]
        out += [row.rstrip() for row in rows]
    return out


def test_log_lines_from_other_threads_go_above_the_progress_and_the_last_lines_stay() -> None:
    with terminal(columns=200, rows=20) as term:
        board = ProgressBoard("postgresql://unused", out=term.out, interval=3600)
        handler = RegionHandler(board.region)
        handler.setFormatter(TextFormatter())
        streambed = logging.getLogger("streambed")  # the board logs "copy finished" too
        streambed.addHandler(handler)
        streambed.propagate = False
        streambed.setLevel(logging.INFO)
        logger = logging.getLogger("streambed.test_live_region")
        try:
            board.start("public.big", "run1", 1000)
            board.start("public.small", "run1", 10)
            board._show()
            assert [line.split()[:2] for line in term.lines()] == [
                ["public.big", "starting"],
                ["public.small", "starting"],
            ]
            threading.Thread(target=logger.warning, args=("flushed tables=4",)).start()
            logger.warning("merge done files_written=1")
            board.finish("public.small", 10)  # logs "copy finished" above the lines
            shown = term.lines()  # and shows it done at once
            assert len(shown) == 5 and sum("flushed tables=4" in line for line in shown) == 1
            assert "merge done" in " ".join(shown[:3]) and "copy finished" in shown[2]
            assert [line.split()[:2] for line in shown[3:]] == [
                ["public.big", "starting"],  # running ones first
                ["public.small", "done"],
            ]
            board.finish("public.big", 1000)
            assert board._ended()
            logger.warning("after the copies")
            shown = term.lines()
            assert [line.split()[:2] for line in shown[-3:-1]] == [
                ["public.big", "done"],
                ["public.small", "done"],
            ]
            assert shown[-1].endswith("after the copies")  # below them: they stay as they were

            board.start("public.later", "run2", 5)  # a table added later: shown alone
            board._show()
            assert term.lines()[-1].split()[:2] == ["public.later", "starting"]
            assert sum("public.big" in line for line in term.lines()) == 2  # its log line too
            board.close()  # a stop during a copy: its last lines stay, under no log line
            logger.warning("stopping")
            assert [line.split()[-1] for line in term.lines()[-2:]] == ["-", "stopping"]
        finally:
            board.close()
            streambed.removeHandler(handler)
            streambed.propagate = True
            streambed.setLevel(logging.NOTSET)


def test_lines_are_cut_to_the_terminal_and_a_short_terminal_counts_the_rest() -> None:
    with terminal(columns=30, rows=6) as term:
        live = LiveRegion(term.out)
        live.show([f"table_{i} " + "x" * 40 for i in range(8)] + ["表" * 20])
        live.show([f"table_{i} " + "x" * 40 for i in range(8)] + ["表" * 20])  # redrawn
        assert term.lines() == [
            "table_0 " + "x" * 21,
            "table_1 " + "x" * 21,
            "table_2 " + "x" * 21,
            "table_3 " + "x" * 21,
            "... and 5 more",
        ]
    with terminal(columns=30, rows=6, size_known=False) as term:  # `script` to a file
        live = LiveRegion(term.out)
        assert not live.live  # no person watches: the progress is logged instead
        live.show(["x" * 150, "y"])
        live.write("log\n")
        assert term.lines() == ["log"]
    assert fit("表" * 20, 30) == "表" * 14  # two columns each, fewer than 30
    assert fit("e\u0301" * 40, 30) == "e\u0301" * 29  # an accent takes none
