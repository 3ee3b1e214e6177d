"""The bounded cache of prepared statements: least recently used out first, and a key that
changes with the settings and the database's generation."""

from __future__ import annotations

from streambed.server import prepared


def _entry(text: str) -> prepared.PreparedSelect:
    return prepared.PreparedSelect(text, ("a",), None, "SELECT")


def test_least_recently_used_goes_first() -> None:
    cache = prepared.PreparedCache(capacity=2)
    keys = [prepared.key(f"SELECT {n}", {}, 0) for n in range(3)]
    cache.put(keys[0], _entry("0"))
    cache.put(keys[1], _entry("1"))
    assert cache.get(keys[0]) == _entry("0")  # now the most recently used
    cache.put(keys[2], _entry("2"))
    assert len(cache) == 2
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) == _entry("0")
    assert cache.get(keys[2]) == _entry("2")


def test_the_text_held_is_bounded() -> None:
    cache = prepared.PreparedCache(capacity=10, max_chars=100)
    keys = [prepared.key(f"SELECT {n:02}", {}, 0) for n in range(3)]  # 9 characters each
    for k in keys:
        cache.put(k, _entry("x" * 30))  # 39 characters an entry: two fit
    assert cache.get(keys[0]) is None
    assert cache.get(keys[1]) is not None and cache.get(keys[2]) is not None
    cache.put(keys[2], _entry("y" * 30))  # replacing an entry counts it once
    assert len(cache) == 2
    cache.put(prepared.key("SELECT 3", {}, 0), _entry("z" * 200))  # too big: not kept
    assert len(cache) == 2


def test_the_key_holds_settings_and_generation() -> None:
    base = prepared.key("SELECT 1", {"search_path": "public", "timezone": "UTC"}, 3)
    assert base == prepared.key("SELECT 1", {"timezone": "UTC", "search_path": "public"}, 3)
    assert base != prepared.key("SELECT 1", {"search_path": "sales", "timezone": "UTC"}, 3)
    assert base != prepared.key("SELECT 1", {"search_path": "public", "timezone": "UTC"}, 4)
    assert base != prepared.key("SELECT  1", {"search_path": "public", "timezone": "UTC"}, 3)
