"""Property: applying the drained deltas to the lake gives what applying every committed
change would. Random transactions over a small key space: ordinary and streamed, with
aborted subtransactions and aborted streams, spilled or not, flushed at random points."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streambed.buffer import ChangeBuffer
from streambed.pgoutput.messages import UNCHANGED, Message
from tests.unit.buffer.model import (
    KEY,
    REL,
    Lake,
    apply_delta,
    dele,
    feed,
    ins,
    trunc,
    upd,
)

KEYS = [b"1", b"2", b"3", b"4", b"5"]
VALUES = [b"a", b"b", b"c"]
BIGS = [b"X" * 50, b"Y" * 50, b""]


def change(draw: st.DrawFn, state: Lake) -> Message:
    """One change that is valid against `state` (the source table), applied to it."""
    present = sorted(state)
    absent = [k for k in KEYS if k not in state]
    kinds = []
    if absent:
        kinds.append("insert")
    if present:
        kinds += ["update", "delete"]
    if present and absent:
        kinds.append("key_change")
    kind = "truncate" if draw(st.integers(0, 19)) == 0 else draw(st.sampled_from(kinds))
    if kind == "insert":
        key = draw(st.sampled_from(absent))
        row = (key, draw(st.sampled_from(VALUES)), draw(st.sampled_from(BIGS)))
        state[key] = row
        return ins(*row)
    if kind == "delete":
        key = draw(st.sampled_from(present))
        del state[key]
        return dele(key)
    if kind == "truncate":
        state.clear()
        return trunc()
    old_key = draw(st.sampled_from(present))
    old = state.pop(old_key)
    key = draw(st.sampled_from(absent)) if kind == "key_change" else old_key
    value = draw(st.sampled_from(VALUES))
    big = draw(st.sampled_from(BIGS))
    state[key] = (key, value, big)
    # Postgres sends an unchanged TOAST value as 'u'. For a key change the merge could not
    # fill it (the contract has no "moved from" key), so only same-key updates use it here.
    sent_big = UNCHANGED if big == old[2] and kind == "update" and draw(st.booleans()) else big
    return upd(key, value, sent_big, old_key=old_key if kind == "key_change" else None)


@dataclass(frozen=True)
class Plain:
    xid: int
    msgs: list[Message]


@dataclass(frozen=True)
class Streamed:
    """Blocks of (subxid, messages); `aborted_subs` roll back; `commit` or abort at the end."""

    xid: int
    blocks: list[tuple[int, list[Message]]]
    aborted_subs: list[int]
    commit: bool


@dataclass(frozen=True)
class Flush:
    pass


Step = Plain | Streamed | Flush
Scenario = tuple[Lake, list[Step], Lake]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """(lake before, steps for the buffer, source table after every committed change)."""
    lake: Lake = {k: (k, b"lake", BIGS[0]) for k in draw(st.sets(st.sampled_from(KEYS)))}
    source: Lake = dict(lake)
    steps: list[Step] = []
    xid = 1000
    for _ in range(draw(st.integers(1, 8))):
        xid += 10
        mode = draw(st.sampled_from(["plain", "streamed", "aborted"]))
        state = dict(source)
        if mode == "plain":
            steps.append(Plain(xid, [change(draw, state) for _ in range(draw(st.integers(0, 6)))]))
            source = state
        else:
            blocks: list[tuple[int, list[Message]]] = []
            live_subs = [xid]
            aborted_subs: list[int] = []
            for n in range(draw(st.integers(1, 4))):
                sub = draw(st.sampled_from([*live_subs, xid + n + 1]))
                if sub not in live_subs and draw(st.booleans()):
                    # a subtransaction that rolls back: its changes leave no trace
                    msgs = [change(draw, dict(state)) for _ in range(draw(st.integers(1, 5)))]
                    aborted_subs.append(sub)
                else:
                    msgs = [change(draw, state) for _ in range(draw(st.integers(0, 5)))]
                    live_subs.append(sub)
                blocks.append((sub, msgs))
            steps.append(Streamed(xid, blocks, aborted_subs, commit=mode == "streamed"))
            if mode == "streamed":
                source = state
        if draw(st.integers(0, 3)) == 0:
            steps.append(Flush())
    steps.append(Flush())
    return lake, steps, source


def run(buf: ChangeBuffer, lake: Lake, steps: list[Step]) -> Lake:
    lake = dict(lake)
    lsn = 10_000
    for step in steps:
        lsn += 100
        if isinstance(step, Flush):
            for delta in buf.drain():
                assert delta.relation == REL
                assert delta.commit_lsn == buf.last_commit_lsn
                apply_delta(lake, delta)
            assert buf.pending_rows == 0
        elif isinstance(step, Plain):
            buf.begin(step.xid)
            for msg in step.msgs:
                feed(buf, msg)
            buf.commit(lsn, lsn + 1)
        else:
            for i, (sub, msgs) in enumerate(step.blocks):
                buf.stream_start(step.xid, first_segment=i == 0)
                for msg in msgs:
                    feed(buf, msg.__class__(**{**msg.__dict__, "xid": sub}))
                buf.stream_stop()
            for sub in step.aborted_subs:
                buf.stream_abort(step.xid, sub)
            if step.commit:
                buf.stream_commit(step.xid, lsn, lsn + 1)
            else:
                buf.stream_abort(step.xid, step.xid)
    assert buf.staged_streams == 0
    assert buf.staged_bytes == 0
    return lake


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), memory=st.sampled_from([1, 300, 1 << 30]))
def test_drained_deltas_reproduce_the_source(scenario: Scenario, memory: int) -> None:
    lake_before, steps, source_after = scenario
    with TemporaryDirectory() as tmp:
        buf = ChangeBuffer(Path(tmp), memory, lambda schema, table: None)
        buf.relation(REL, KEY)
        lake_after = run(buf, lake_before, steps)
        assert list(Path(tmp).iterdir()) == []
    assert lake_after == source_after
