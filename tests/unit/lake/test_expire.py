"""Which snapshots expiry removes (`streambed.lake.expire.due`), without a lake."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streambed.lake.expire import Retention, due

HOUR_MS = 3_600_000
NOW = 100 * HOUR_MS


def test_the_window_and_the_count_each_expire() -> None:
    snapshots = [(1, NOW - 3 * HOUR_MS), (2, NOW - 2 * HOUR_MS), (3, NOW - 10), (4, NOW)]
    assert due(snapshots, {4}, Retention(hours=1, max_snapshots=10), NOW) == [2, 1]
    assert due(snapshots, {4}, Retention(hours=5, max_snapshots=2), NOW) == [2, 1]
    assert due(snapshots, {4}, Retention(hours=5, max_snapshots=10), NOW) == []
    # kept ids are never expired, however old, and count towards the maximum
    assert due(snapshots, {1, 4}, Retention(hours=0, max_snapshots=1), NOW) == [3, 2]
    assert due(snapshots, {1, 4}, Retention(hours=5, max_snapshots=2), NOW) == [3, 2]


def test_a_fraction_of_an_hour_and_equal_timestamps() -> None:
    snapshots = [(7, NOW - HOUR_MS // 2), (5, NOW - HOUR_MS // 4), (6, NOW - HOUR_MS // 4)]
    assert due(snapshots, set(), Retention(hours=0.3, max_snapshots=10), NOW) == [7]
    # among equal timestamps the higher id counts as newer
    assert due(snapshots, set(), Retention(hours=1, max_snapshots=1), NOW) == [5, 7]


snapshot_lists = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(NOW - 5 * HOUR_MS, NOW)),
    unique_by=lambda s: s[0],
    max_size=40,
)


@given(
    snapshot_lists,
    st.data(),
    st.floats(0, 6, allow_nan=False),
    st.integers(1, 50),
)
def test_what_is_kept_is_the_newest_within_the_window(
    snapshots: list[tuple[int, int]], data: st.DataObject, hours: float, max_snapshots: int
) -> None:
    ids = [s[0] for s in snapshots]
    keep = set(data.draw(st.lists(st.sampled_from(ids), max_size=3))) if ids else set()
    retention = Retention(hours=hours, max_snapshots=max_snapshots)
    expired = due(snapshots, keep, retention, NOW)
    assert len(expired) == len(set(expired))
    assert not keep & set(expired)
    assert set(expired) <= set(ids)
    kept = [s for s in snapshots if s[0] not in expired]
    assert len(kept) <= max(max_snapshots, len(keep))
    cutoff = NOW - int(hours * HOUR_MS)
    assert all(ts >= cutoff for sid, ts in kept if sid not in keep)
    # nothing expired is newer than a kept snapshot that was not protected, unless the
    # count was full; and a young one expires only when the count is full
    order = {sid: (ts, sid) for sid, ts in snapshots}
    free = [order[sid] for sid, _ in kept if sid not in keep]
    for sid in expired:
        if order[sid][0] >= cutoff:
            assert len(kept) >= max_snapshots
            assert all(order[sid] < f for f in free)
