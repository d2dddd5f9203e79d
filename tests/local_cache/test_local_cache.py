"""The local cache (layer 4): version ordering, read-in-flight protection, expiry on a fake clock, the LRU
bound, connection state, and a two-thread smoke test. No test sleeps."""

from __future__ import annotations

import logging
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.local_cache import ABSENT, CachedEntry, LocalCache, ReadTicket
from tests._support.clocks import ManualClock

SET, DELETE = KeyOperation.SET, KeyOperation.DELETE
K = b"key"


def v(n: int, node: str = "StateStore") -> HybridLogicalClock:
    """The n-th version: walls and counters both move, as the service clock's do."""
    return HybridLogicalClock(1_700_000_000_000 + n // 3, n % 3, node)


def entry(value: str, n: int | None, **kw: Any) -> CachedEntry[str]:
    return CachedEntry(value, value.encode(), None if n is None else v(n), **kw)


def set_event(key: bytes, value: str, n: int | None, synthetic: bool = False) -> KeyEvent:
    return KeyEvent(key, SET, value.encode(), None if n is None else v(n), synthetic)


def delete_event(key: bytes, n: int | None) -> KeyEvent:
    return KeyEvent(key, DELETE, None, None if n is None else v(n))


def loads(data: bytes) -> str:
    return data.decode("utf-8")


@pytest.fixture
def clock() -> ManualClock[float]:
    return ManualClock()


@pytest.fixture
def cache(clock: ManualClock[float]) -> LocalCache[str]:
    return LocalCache(maxsize=100, monotonic=clock)


# ---------------------------------------------------------------------------------------------------------
# basics


def test_miss_then_hit_and_counters(cache: LocalCache[str]) -> None:
    assert cache.get(K) is None
    assert cache.store_write(K, entry("one", 1))
    got = cache.get(K)
    assert got is not None
    assert got.value == "one"
    assert got.raw == b"one"
    assert got.version == v(1)
    assert not got.stale
    assert (cache.hits, cache.misses, cache.size, len(cache)) == (1, 1, 1, 1)
    assert K in cache
    assert b"other" not in cache
    assert "not bytes" not in cache
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.size, stats.maxsize, stats.reads_in_flight) == (1, 1, 1, 100, 0)


def test_peek_and_contains_do_not_count(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("one", 1))
    assert cache.peek(K) == entry("one", 1)
    assert K in cache
    assert cache.peek(b"nope") is None
    assert (cache.hits, cache.misses) == (0, 0)


def test_cached_absence_is_an_entry(cache: LocalCache[str]) -> None:
    assert cache.store_write(K, CachedEntry.missing(v(3)))
    got = cache.get(K)
    assert got is not None
    assert got.value is ABSENT
    assert got.absent
    assert got.raw is None
    assert got.version == v(3)
    assert K in cache
    assert not ABSENT
    assert repr(ABSENT) == "ABSENT"
    assert not entry("", 1).absent  # an empty string is a value, not an absence


def test_none_is_a_value_not_an_absence() -> None:
    c: LocalCache[None] = LocalCache(maxsize=2)
    c.store_write(K, CachedEntry(None, b"null", v(1)))
    got = c.get(K)
    assert got is not None
    assert got.value is None
    assert not got.absent


@pytest.mark.parametrize(
    "kwargs",
    [
        {"maxsize": 0},
        {"maxsize": -1},
        {"maxsize": True},
        {"maxsize": 1.5},
        {"ttl": 0},
        {"ttl": -1.0},
        {"ttl": float("nan")},
        {"ttl": float("inf")},
        {"ttl": "5"},
        {"ttl": True},
        {"monotonic": 1.0},
    ],
)
def test_bad_configuration(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        LocalCache(**kwargs)


def test_invalidate_and_clear(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("one", 1))
    cache.store_write(b"k2", entry("two", 2))
    assert cache.invalidate(K) is True
    assert cache.invalidate(K) is False
    assert cache.get(K) is None
    cache.clear()
    assert len(cache) == 0
    assert cache.get(b"k2") is None


# ---------------------------------------------------------------------------------------------------------
# ordering by version


def test_older_write_never_overwrites_newer(cache: LocalCache[str]) -> None:
    assert cache.store_write(K, entry("new", 5))
    assert not cache.store_write(K, entry("old", 4))
    assert cache.peek(K) == entry("new", 5)


def test_node_id_breaks_ties_between_equal_wall_and_counter(cache: LocalCache[str]) -> None:
    a: CachedEntry[str] = CachedEntry("a", b"a", v(5, "A"))
    b: CachedEntry[str] = CachedEntry("b", b"b", v(5, "B"))
    cache.store_write(K, b)
    assert not cache.store_write(K, a)
    cache.apply_event(KeyEvent(K, SET, b"a", v(5, "A")), loads)
    assert cache.peek(K) == b


def test_newer_set_event_updates_in_place(cache: LocalCache[str]) -> None:
    fence = v(0, "lock")
    cache.store_write(K, entry("mine", 1, fence=fence, expires_at=500.0))
    cache.apply_event(set_event(K, "theirs", 2), loads)
    got = cache.get(K)
    assert got == CachedEntry("theirs", b"theirs", v(2))
    # another writer's SET: its expiry is unknown (the DELETE notification will tell) and it is not ours
    assert got is not None
    assert (got.fence, got.expires_at) == (None, None)


def test_newer_delete_event_caches_the_absence(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("x", 1))
    cache.apply_event(delete_event(K, 2), loads)
    got = cache.get(K)
    assert got is not None
    assert got.absent
    assert got.version == v(2)
    # and a SET after it brings the key back
    cache.apply_event(set_event(K, "back", 3), loads)
    assert cache.peek(K) == entry("back", 3)


@pytest.mark.parametrize("late", [set_event(K, "stale", 1), delete_event(K, 1), set_event(K, "stale", 2)])
def test_old_or_duplicate_events_change_nothing(cache: LocalCache[str], late: KeyEvent) -> None:
    cache.store_write(K, entry("current", 2))
    cache.apply_event(late, loads)
    cache.apply_event(late, loads)
    assert cache.peek(K) == entry("current", 2)


def test_write_ack_after_its_own_echo_keeps_the_write_metadata(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("a", 1))
    # our SET v2 was echoed by its notification before the acknowledgement arrived
    cache.apply_event(set_event(K, "b", 2), loads)
    mine = entry("b", 2, fence=v(0, "lock"), expires_at=130.0)
    assert cache.store_write(K, mine)
    assert cache.peek(K) == mine
    # and an echo after the acknowledgement does not strip them either
    cache.apply_event(set_event(K, "b", 2), loads)
    assert cache.peek(K) == mine


def test_an_event_or_write_without_version_drops_the_entry(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("x", 1))
    cache.apply_event(set_event(K, "y", None), loads)
    assert cache.peek(K) is None
    cache.store_write(K, entry("x", 1))
    cache.apply_event(delete_event(K, None), loads)  # e.g. a synthetic delete after a reconnect
    assert cache.peek(K) is None
    cache.store_write(K, entry("x", 1))
    assert not cache.store_write(K, CachedEntry.missing(None))  # an acknowledged DEL carries no version
    assert cache.peek(K) is None


def test_events_do_not_pull_uncached_keys_in(cache: LocalCache[str]) -> None:
    cache.apply_event(set_event(K, "x", 1), loads)
    cache.apply_event(delete_event(b"k2", 1), loads)
    assert len(cache) == 0
    assert cache.get(K) is None


def test_undecodable_event_drops_the_entry_and_does_not_raise(
    cache: LocalCache[str], caplog: pytest.LogCaptureFixture
) -> None:
    cache.store_write(K, entry("x", 1))

    def bad(data: bytes) -> str:
        raise ValueError("not my format")

    with caplog.at_level(logging.WARNING, logger="sskv_mapping.local_cache"):
        cache.apply_event(set_event(K, "y", 2), bad)
    assert cache.peek(K) is None
    assert "b'key'" in caplog.text
    assert "not my format" in caplog.text


def test_old_events_are_not_even_decoded(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("x", 5))
    calls: list[bytes] = []

    def counting(data: bytes) -> str:
        calls.append(data)
        return loads(data)

    cache.apply_event(set_event(K, "old", 4), counting)
    cache.apply_event(set_event(b"uncached", "u", 9), counting)
    assert calls == []


def test_decoding_happens_outside_the_lock_and_a_newer_event_meanwhile_wins(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("x", 1))

    def slow_loads(data: bytes) -> str:
        assert not cache._lock.locked(), "readers must not wait for a decode"
        # a newer notification is applied while this one is being decoded
        cache.apply_event(set_event(K, "newer", 3), loads)
        return loads(data)

    cache.apply_event(set_event(K, "older", 2), slow_loads)
    assert cache.peek(K) == entry("newer", 3)


@st.composite
def versioned_histories(draw: st.DrawFn) -> tuple[list[tuple[str, int, str]], int]:
    """A key's history as (kind, version, value) operations, shuffled into an arbitrary delivery order.

    kind is "set"/"delete" (a notification) or "write" (this client's acknowledged SET). Some versions are
    both a write and its notification echo; some notifications arrive twice.
    """
    n = draw(st.integers(min_value=1, max_value=12))
    versions = sorted(draw(st.sets(st.integers(min_value=1, max_value=200), min_size=n, max_size=n)))
    ops: list[tuple[str, int, str]] = []
    for ver in versions:
        kind = draw(st.sampled_from(["set", "delete", "write", "echo"]))
        value = f"value-{ver}"
        if kind == "echo":
            ops += [("write", ver, value), ("set", ver, value)]
        else:
            ops.append((kind, ver, value))
    ops += draw(st.lists(st.sampled_from(ops), max_size=4))  # duplicates
    return draw(st.permutations(ops)), max(versions)


@given(versioned_histories())
def test_any_delivery_order_ends_on_the_newest_version(
    history: tuple[list[tuple[str, int, str]], int],
) -> None:
    ops, newest = history
    c: LocalCache[str] = LocalCache(maxsize=4)
    c.store_write(K, entry("seed", 0))
    fence = v(0, "lock")
    for kind, ver, value in ops:
        if kind == "write":
            c.store_write(K, entry(value, ver, fence=fence))
        elif kind == "set":
            c.apply_event(set_event(K, value, ver), loads)
        else:
            c.apply_event(delete_event(K, ver), loads)
    got = c.get(K)
    assert got is not None
    assert got.version == v(newest)
    kinds = {kind for kind, ver, _ in ops if ver == newest}
    if kinds == {"delete"}:
        assert got.absent
    else:
        assert got.value == f"value-{newest}"
        # when the newest version was our own write, its metadata survives its echo
        assert got.fence == (fence if "write" in kinds else None)


# ---------------------------------------------------------------------------------------------------------
# reads in flight


def test_a_read_is_stored(cache: LocalCache[str]) -> None:
    ticket = cache.begin_read(K)
    assert cache.reads_in_flight == 1
    assert cache.finish_read(ticket, entry("x", 1))
    assert cache.peek(K) == entry("x", 1)
    assert cache.reads_in_flight == 0
    assert ticket.closed


def test_a_read_miss_is_cached_as_absence(cache: LocalCache[str]) -> None:
    ticket = cache.begin_read(K)
    assert cache.finish_read(ticket, CachedEntry.missing())
    got = cache.get(K)
    assert got is not None
    assert got.absent


def test_an_invalidation_during_a_read_wins(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("old", 1))
    ticket = cache.begin_read(K)
    cache.invalidate(K)  # e.g. our own DEL was acknowledged, or a notification without version
    assert not cache.finish_read(ticket, entry("old", 1))
    assert cache.peek(K) is None
    assert cache.reads_in_flight == 0


@pytest.mark.parametrize(
    "meanwhile",
    [
        pytest.param(lambda c: c.apply_event(set_event(K, "new", 2), loads), id="set-event"),
        pytest.param(lambda c: c.apply_event(delete_event(K, 2), loads), id="delete-event"),
        pytest.param(lambda c: c.apply_event(set_event(K, "dup", 1), loads), id="older-event"),
        pytest.param(lambda c: c.store_write(K, entry("mine", 2)), id="write"),
        pytest.param(lambda c: c.clear(), id="clear"),
        pytest.param(lambda c: c.disconnected(), id="disconnected"),
        pytest.param(lambda c: c.reconnected(), id="reconnected"),
    ],
)
def test_anything_that_happens_to_the_key_during_a_read_wins(cache: LocalCache[str], meanwhile: Any) -> None:
    ticket = cache.begin_read(K)
    meanwhile(cache)
    before = cache.peek(K)
    assert not cache.finish_read(ticket, entry("from-the-read", 7))
    assert cache.peek(K) == before
    assert cache.reads_in_flight == 0


def test_an_event_for_a_key_being_read_is_stored(cache: LocalCache[str]) -> None:
    ticket = cache.begin_read(K)
    cache.apply_event(set_event(K, "pushed", 3), loads)
    assert cache.peek(K) == entry("pushed", 3)
    assert not cache.finish_read(ticket, entry("pulled", 2))
    assert cache.peek(K) == entry("pushed", 3)


def test_events_for_other_keys_do_not_disturb_a_read(cache: LocalCache[str]) -> None:
    cache.store_write(b"other", entry("o", 1))
    ticket = cache.begin_read(K)
    cache.apply_event(set_event(b"other", "o2", 2), loads)
    cache.invalidate(b"other")
    assert cache.finish_read(ticket, entry("x", 1))


def test_overlapping_reads_are_ordered_by_version(cache: LocalCache[str]) -> None:
    first, second = cache.begin_read(K), cache.begin_read(K)
    assert cache.finish_read(second, entry("newer", 6))
    assert not cache.finish_read(first, entry("older", 5))
    assert cache.peek(K) == entry("newer", 6)

    cache.clear()
    first, second = cache.begin_read(K), cache.begin_read(K)
    assert cache.finish_read(first, entry("older", 5))
    assert cache.finish_read(second, entry("newer", 6))
    assert cache.peek(K) == entry("newer", 6)


def test_overlapping_hit_and_miss_cannot_be_ordered_so_neither_is_kept(cache: LocalCache[str]) -> None:
    first, second, third = cache.begin_read(K), cache.begin_read(K), cache.begin_read(K)
    assert cache.finish_read(first, entry("hit", 5))
    assert not cache.finish_read(second, CachedEntry.missing())  # a miss has no version
    assert cache.peek(K) is None
    assert not cache.finish_read(third, entry("hit", 5))
    assert cache.reads_in_flight == 0


def test_a_read_does_not_replace_an_entry_of_the_same_or_newer_version(cache: LocalCache[str]) -> None:
    mine = entry("x", 4, fence=v(0, "lock"))
    cache.store_write(K, mine)
    ticket = cache.begin_read(K)
    assert not cache.finish_read(ticket, entry("x", 4))
    assert cache.peek(K) == mine


def test_abandon_and_double_close_are_harmless(cache: LocalCache[str]) -> None:
    ticket = cache.begin_read(K)
    cache.abandon(ticket)
    cache.abandon(ticket)
    assert not cache.finish_read(ticket, entry("x", 1))
    assert cache.peek(K) is None
    assert cache.reads_in_flight == 0
    ticket = cache.begin_read(K)
    assert cache.finish_read(ticket, entry("x", 1))
    assert not cache.finish_read(ticket, entry("y", 2))
    assert cache.peek(K) == entry("x", 1)


def test_ticket_as_context_manager_is_abandoned_on_error(cache: LocalCache[str]) -> None:
    with pytest.raises(TimeoutError), cache.begin_read(K) as ticket:
        assert cache.reads_in_flight == 1
        raise TimeoutError("the GET timed out")
    assert ticket.closed
    assert cache.reads_in_flight == 0
    assert len(cache._reads) == 0  # no per-key book-keeping left behind


def test_a_ticket_belongs_to_its_cache(cache: LocalCache[str]) -> None:
    other: LocalCache[str] = LocalCache(maxsize=2)
    ticket = other.begin_read(K)
    with pytest.raises(ConfigurationError):
        cache.finish_read(ticket, entry("x", 1))
    with pytest.raises(ConfigurationError):
        cache.abandon(ticket)
    assert isinstance(ticket, ReadTicket)
    assert "open" in repr(ticket)
    other.abandon(ticket)
    assert "closed" in repr(ticket)


_READ_OPS = st.lists(
    st.tuples(
        st.sampled_from(["begin", "finish", "abandon", "event", "write", "invalidate", "clear", "flap"]),
        st.sampled_from([b"a", b"b", b"c"]),
        st.integers(min_value=0, max_value=50),
    ),
    max_size=60,
)


@given(_READ_OPS)
def test_model_reads_are_stored_iff_nothing_touched_the_key_and_tickets_never_leak(
    ops: list[tuple[str, bytes, int]],
) -> None:
    """Every read result carries a version newer than anything before it, so the only reason to refuse
    one is that its key was touched (event, write, invalidation, clear, reconnect) while it was in flight."""
    c: LocalCache[str] = LocalCache(maxsize=100)
    open_tickets: list[tuple[ReadTicket, list[bool]]] = []  # (ticket, [touched])

    def touch(key: bytes | None) -> None:
        for ticket, touched in open_tickets:
            if key is None or ticket.key == key:
                touched[0] = True

    for counter, (op, key, pick) in enumerate(ops, start=1):
        if op == "begin":
            open_tickets.append((c.begin_read(key), [False]))
        elif op in ("finish", "abandon") and open_tickets:
            ticket, touched = open_tickets.pop(pick % len(open_tickets))
            if op == "finish":
                stored = c.finish_read(ticket, entry(f"read-{counter}", counter))
                assert stored == (not touched[0])
                if stored:
                    assert c.peek(ticket.key) == entry(f"read-{counter}", counter)
            else:
                c.abandon(ticket)
        elif op == "event":
            c.apply_event(set_event(key, f"ev-{counter}", counter), loads)
            touch(key)
        elif op == "write":
            c.store_write(key, entry(f"w-{counter}", counter))
            touch(key)
        elif op == "invalidate":
            c.invalidate(key)
            touch(key)
        elif op == "clear":
            c.clear()
            touch(None)
        elif op == "flap":
            c.disconnected()
            c.reconnected()
            touch(None)
        assert c.reads_in_flight == len(open_tickets)
    for ticket, _ in open_tickets:
        c.abandon(ticket)
    assert c.reads_in_flight == 0
    assert len(c._reads) == 0


# ---------------------------------------------------------------------------------------------------------
# expiry, on a fake clock


def test_entry_never_outlives_the_keys_expiry(cache: LocalCache[str], clock: ManualClock[float]) -> None:
    deadline = cache.deadline(10.0)
    assert deadline == clock.now + 10.0
    assert cache.deadline(None) is None
    cache.store_write(K, entry("x", 1, expires_at=deadline))
    clock.advance(9.999)
    assert cache.get(K) is not None
    assert K in cache
    clock.advance(0.001)
    assert K not in cache
    assert cache.get(K) is None
    assert cache.peek(K) is None  # dropped, not just hidden
    assert (cache.hits, cache.misses) == (1, 1)


def test_local_ttl_bounds_every_entry(clock: ManualClock[float]) -> None:
    c: LocalCache[str] = LocalCache(maxsize=10, ttl=5.0, monotonic=clock)
    assert c.ttl == 5.0
    c.store_write(K, entry("x", 1))
    clock.advance(4.9)
    assert c.get(K) is not None
    clock.advance(0.1)
    assert c.get(K) is None
    assert K not in c


def test_the_earlier_of_local_ttl_and_key_expiry_wins(clock: ManualClock[float]) -> None:
    c: LocalCache[str] = LocalCache(maxsize=10, ttl=5.0, monotonic=clock)
    c.store_write(b"short-key-ttl", entry("x", 1, expires_at=clock.now + 2.0))
    c.store_write(b"long-key-ttl", entry("y", 1, expires_at=clock.now + 60.0))
    clock.advance(2.0)
    assert c.get(b"short-key-ttl") is None
    assert c.get(b"long-key-ttl") is not None
    clock.advance(3.0)
    assert c.get(b"long-key-ttl") is None


def test_an_update_restarts_the_local_ttl(clock: ManualClock[float]) -> None:
    c: LocalCache[str] = LocalCache(maxsize=10, ttl=5.0, monotonic=clock)
    c.store_write(K, entry("x", 1))
    clock.advance(4.0)
    c.apply_event(set_event(K, "y", 2), loads)
    clock.advance(4.0)
    got = c.get(K)
    assert got is not None
    assert got.value == "y"


def test_an_event_for_a_locally_expired_entry_does_not_revive_it(clock: ManualClock[float]) -> None:
    c: LocalCache[str] = LocalCache(maxsize=10, ttl=5.0, monotonic=clock)
    c.store_write(K, entry("x", 1))
    clock.advance(5.0)
    c.apply_event(set_event(K, "y", 2), loads)
    assert c.get(K) is None


def test_expire_purges_now(clock: ManualClock[float]) -> None:
    c: LocalCache[str] = LocalCache(maxsize=10, ttl=5.0, monotonic=clock)
    c.store_write(b"a", entry("a", 1, expires_at=clock.now + 1.0))
    c.store_write(b"b", entry("b", 1))
    clock.advance(3.0)
    c.store_write(b"c", entry("c", 1))
    clock.advance(2.5)  # a: key expired, b: local ttl over, c: fresh
    assert c.expire() == 2
    assert c.size == 1
    assert c.peek(b"c") is not None


# ---------------------------------------------------------------------------------------------------------
# the LRU bound


def test_least_recently_used_is_evicted() -> None:
    c: LocalCache[str] = LocalCache(maxsize=3)
    for i, key in enumerate([b"a", b"b", b"c"]):
        c.store_write(key, entry(key.decode(), i))
    assert c.get(b"a") is not None  # a is now the most recently used
    c.store_write(b"d", entry("d", 9))
    assert c.peek(b"b") is None
    assert [k for k in (b"a", b"c", b"d") if c.peek(k) is not None] == [b"a", b"c", b"d"]
    assert c.size == c.maxsize == 3


@given(st.lists(st.integers(min_value=0, max_value=30), max_size=200), st.integers(min_value=1, max_value=8))
def test_size_never_exceeds_maxsize(keys: list[int], maxsize: int) -> None:
    c: LocalCache[str] = LocalCache(maxsize=maxsize)
    for n, i in enumerate(keys):
        c.store_write(b"k%d" % i, entry(str(i), n))
        assert len(c) <= maxsize
    if keys:
        assert c.peek(b"k%d" % keys[-1]) is not None  # the last one written is always there


# ---------------------------------------------------------------------------------------------------------
# connection state


def test_nothing_is_served_while_disconnected(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("x", 1))
    cache.disconnected()
    assert not cache.connected
    assert cache.get(K) is None
    assert K not in cache
    assert cache.misses == 1
    cache.reconnected()
    assert cache.connected
    assert cache.get(K) is None  # emptied: notifications were lost while away
    assert len(cache) == 0
    cache.store_write(K, entry("y", 2))
    got = cache.get(K)
    assert got is not None
    assert got.value == "y"


def test_stale_while_disconnected_serves_marked_entries(clock: ManualClock[float]) -> None:
    c: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock, stale_while_disconnected=True)
    c.store_write(K, entry("x", 1))
    c.store_write(b"expiring", entry("e", 1, expires_at=clock.now + 1.0))
    c.disconnected()
    got = c.get(K)
    assert got is not None
    assert got.stale
    assert got.value == "x"
    assert K in c
    peeked = c.peek(K)
    assert peeked is not None
    assert not peeked.stale  # the held entry itself is not modified
    clock.advance(1.0)
    assert c.get(b"expiring") is None  # stale is allowed, expired never is
    c.reconnected()
    assert c.get(K) is None


def test_a_stale_entry_stored_back_is_not_stale(cache: LocalCache[str]) -> None:
    cache.store_write(K, CachedEntry("x", b"x", v(1), stale=True))
    got = cache.get(K)
    assert got is not None
    assert not got.stale


def test_synthetic_events_after_reconnect_update_the_cache(cache: LocalCache[str]) -> None:
    cache.store_write(K, entry("before", 1))
    cache.disconnected()
    cache.reconnected()
    ticket = cache.begin_read(K)
    assert cache.finish_read(ticket, entry("reread", 2))
    cache.apply_event(set_event(K, "changed-while-away", 3, synthetic=True), loads)
    assert cache.peek(K) == entry("changed-while-away", 3)


# ---------------------------------------------------------------------------------------------------------
# threads


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # make the interpreter switch threads as often as it can
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.mark.usefixtures("fast_switching")
def test_two_threads_smoke() -> None:
    """An event-loop-like thread applies writes and events with rising versions while a reader thread reads
    and reads through the network path. Invariants: a served value always matches its version, a reader
    never sees a key go back in time, nothing raises, no ticket leaks, the bound holds."""
    c: LocalCache[str] = LocalCache(maxsize=4)  # fewer slots than keys: evictions race with everything else
    keys = [b"k%d" % i for i in range(6)]
    iterations = 4000
    errors: list[BaseException] = []
    latest: dict[bytes, int] = {}
    latest_lock = threading.Lock()
    start = threading.Barrier(2)

    def writer() -> None:
        try:
            rng = random.Random(1)
            start.wait()
            for n in range(1, iterations + 1):
                key = rng.choice(keys)
                with latest_lock:
                    latest[key] = n
                action = rng.random()
                if action < 0.4:
                    c.store_write(key, entry(str(n), n))
                elif action < 0.8:
                    c.apply_event(set_event(key, str(n), n), loads)
                elif action < 0.95:
                    c.apply_event(delete_event(key, n), loads)
                else:
                    c.invalidate(key)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            rng = random.Random(2)
            seen: dict[bytes, HybridLogicalClock] = {}
            start.wait()
            for _ in range(iterations):
                key = rng.choice(keys)
                got = c.get(key)
                if got is None:
                    with c.begin_read(key) as ticket:
                        with latest_lock:
                            n = latest.get(key, 0)
                        c.finish_read(ticket, entry(str(n), n))
                    continue
                assert got.version is not None
                if not got.absent:
                    assert got.value == str(_index(got.version))
                previous = seen.get(key)
                assert previous is None or got.version >= previous
                seen[key] = got.version
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert c.reads_in_flight == 0
    assert len(c._reads) == 0
    assert len(c) <= 4
    assert c.hits + c.misses == iterations
    for key in keys:  # whatever is held is the newest thing the writer did to the key
        held = c.peek(key)
        if held is not None:
            assert held.version == v(latest[key])


def _index(version: HybridLogicalClock) -> int:
    return (version.wall_ms - 1_700_000_000_000) * 3 + version.counter


# ---------------------------------------------------------------------------------------------------------
# the hot map: hits served without the lock, in step with the entries


def test_hot_hits_are_counted_and_their_log_stays_bounded() -> None:
    c: LocalCache[str] = LocalCache(maxsize=10)
    for i, key in enumerate([b"a", b"b", b"c"]):
        c.store_write(key, entry(key.decode(), i))
    for n in range(10_000):
        assert c.get([b"a", b"b", b"c"][n % 3]) is not None
    assert c.hits == c.stats().hits == 10_000
    assert c.misses == 0
    assert len(c._entries.touched) < 1024  # replayed into the LRU order as it grows


def test_a_key_read_often_survives_a_stream_of_new_keys() -> None:
    c: LocalCache[str] = LocalCache(maxsize=50)
    c.store_write(b"hot", entry("hot", 0))
    for i in range(1, 2_000):
        assert c.get(b"hot") is not None, f"evicted after {i} new keys"
        c.store_write(b"k%d" % i, entry(str(i), i))
    assert c.size == 50


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["write", "delete-event", "set-event", "invalidate", "get", "disconnect", "reconnect", "clear"]
        ),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=60,
)


@given(OPS, st.integers(min_value=1, max_value=4))
def test_the_hot_map_serves_exactly_what_the_locked_path_would(ops: list[tuple[str, int]], maxsize: int) -> None:
    c: LocalCache[str] = LocalCache(maxsize=maxsize)
    for version, (op, i) in enumerate(ops, start=1):
        key = b"k%d" % i
        if op == "write":
            c.store_write(key, entry(f"w{version}", version))
        elif op == "delete-event":
            c.apply_event(KeyEvent(key, KeyOperation.DELETE, None, v(version)), bytes.decode)
        elif op == "set-event":
            c.apply_event(KeyEvent(key, KeyOperation.SET, b"e%d" % version, v(version)), bytes.decode)
        elif op == "invalidate":
            c.invalidate(key)
        elif op == "get":
            c.get(key)
        elif op == "disconnect":
            c.disconnected()
        elif op == "reconnect":
            c.reconnected()
        else:
            c.clear()
        held = {k: c.peek(k) for k in (b"k%d" % j for j in range(6))}
        expected = {k: e for k, e in held.items() if e is not None} if c.connected else {}
        assert {k: e for k, (_, e) in c._entries.hot.items()} == expected
