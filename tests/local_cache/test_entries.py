"""Where a local cache keeps its entries (``_Entries``), on its own: the cachetools bound and order, the hot map kept
in step with it, the log of hot hits and its replay, expiry. Versions, staleness and connections are the cache's
business (tests/local_cache/test_local_cache.py); here the caller says what to put and whether it is hot."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping.local_cache import CachedEntry
from sskv_mapping.local_cache._entries import _TOUCH_REPLAY, _Entries
from tests._support.clocks import ManualClock


def entry(value: str, expires_at: float | None = None) -> CachedEntry[str]:
    return CachedEntry(value, value.encode(), expires_at=expires_at)


@pytest.fixture
def clock() -> ManualClock[float]:
    return ManualClock()


def test_put_held_and_drop(clock: ManualClock[float]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(4, None, clock)
    e.put(b"a", entry("A"), hot=True, serve_until=150.0)
    assert e.held(b"a") == entry("A")
    assert e.hot == {b"a": (150.0, entry("A"))}
    assert e.held(b"b") is None
    assert (len(e), e.maxsize) == (1, 4)
    assert e.drop(b"a")
    assert not e.drop(b"a")
    assert (e.held(b"a"), e.hot, len(e)) == (None, {}, 0)


def test_an_entry_put_not_hot_is_held_but_not_in_the_hot_map(clock: ManualClock[float]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(4, None, clock)
    e.put(b"a", entry("A"), hot=False, serve_until=None)
    assert e.held(b"a") == entry("A")
    assert e.hot == {}
    e.put(b"b", entry("B"), hot=True, serve_until=None)
    e.cool()  # the cache stops serving hot (a disconnect): every entry stays held
    assert e.hot == {}
    assert sorted(k for k, _ in e.items()) == [b"a", b"b"]


def test_with_a_local_ttl_nothing_is_hot_and_entries_age_out(clock: ManualClock[float]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(4, 10.0, clock)
    e.put(b"a", entry("A"), hot=True, serve_until=None)
    assert e.hot == {}
    assert e.lookup(b"a") == entry("A")
    clock.now += 10.0
    assert e.held(b"a") is None
    with pytest.raises(KeyError):
        e.lookup(b"a")


def test_eviction_takes_the_least_recently_used_out_of_the_hot_map_too(clock: ManualClock[float]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(2, None, clock)
    e.put(b"a", entry("A"), hot=True, serve_until=None)
    e.put(b"b", entry("B"), hot=True, serve_until=None)
    e.touched.append(b"a")  # a hot hit of a, logged by the lock-free path
    e.put(b"c", entry("C"), hot=True, serve_until=None)  # replays the log first: b is the least recently used
    assert sorted(e.hot) == [b"a", b"c"]
    assert e.held(b"b") is None
    assert e.hot_hits == 1
    assert e.touched == []


def test_a_replay_counts_every_logged_hit_and_moves_up_only_the_most_recent_keys(clock: ManualClock[float]) -> None:
    maxsize = 2 * _TOUCH_REPLAY
    e: _Entries[CachedEntry[str]] = _Entries(maxsize, None, clock)
    keys = [b"k%d" % i for i in range(maxsize)]
    for key in keys:
        e.put(key, entry(key.decode()), hot=True, serve_until=None)
    log = keys[: _TOUCH_REPLAY + 1] + keys[:1] * 5  # k0..k64 hit once each, then k0 five times more
    e.touched.extend(log)
    e.replay_touches()
    assert (e.hot_hits, e.touched) == (len(log), [])
    evicted: list[bytes] = []
    for i in range(maxsize):  # each new key evicts the least recently used one: read the LRU order off that
        before = {k for k, _ in e.items()}
        e.put(b"new%d" % i, entry("new"), hot=True, serve_until=None)
        evicted += before - {k for k, _ in e.items()}
    # the 64 most recent distinct keys (k0, then k64 down to k2) moved up, the newest hit last; k1, one hit
    # older than all of them, stays where it was with the keys nobody read
    assert evicted == [keys[1], *keys[_TOUCH_REPLAY + 1 :], *keys[2 : _TOUCH_REPLAY + 1], keys[0]]


def test_expire_drops_what_is_past_its_expiry_and_says_how_many(clock: ManualClock[float]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(4, None, clock)
    e.put(b"past", entry("P", expires_at=100.0), hot=True, serve_until=100.0)
    e.put(b"later", entry("L", expires_at=200.0), hot=True, serve_until=200.0)
    e.put(b"never", entry("N"), hot=True, serve_until=None)
    assert e.expire(clock.now) == 1
    assert sorted(e.hot) == [b"later", b"never"]
    assert e.expire(200.0) == 1
    assert [k for k, _ in e.items()] == [b"never"]


def test_clear_forgets_everything_but_the_hit_count(clock: ManualClock[float]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(4, None, clock)
    e.put(b"a", entry("A"), hot=True, serve_until=None)
    e.touched.append(b"a")
    e.put(b"b", entry("B"), hot=True, serve_until=None)
    e.clear()
    assert (len(e), e.hot, e.items(), e.hot_hits) == (0, {}, [], 1)


@given(st.lists(st.tuples(st.sampled_from(["put", "put-cold", "drop", "touch"]), st.integers(0, 5)), max_size=60))
def test_the_hot_map_only_ever_holds_entries_held_as_they_are(ops: list[tuple[str, int]]) -> None:
    e: _Entries[CachedEntry[str]] = _Entries(3, None, ManualClock())
    for n, (op, i) in enumerate(ops):
        key = b"k%d" % i
        if op == "put":
            e.put(key, entry(str(n)), hot=True, serve_until=None)
        elif op == "put-cold":
            e.cool()
            e.put(key, entry(str(n)), hot=False, serve_until=None)
        elif op == "drop":
            e.drop(key)
        elif key in e.hot:
            e.touched.append(key)
        assert len(e) <= 3
        assert {k: held for k, (_, held) in e.hot.items()} == {k: v for k, v in e.items() if k in e.hot}
