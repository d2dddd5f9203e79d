"""Bounded staleness: an entry is served only within ``max_staleness`` of its last confirmation (a read, a write,
a notification, or a re-read that found it unchanged), so a value whose notification a broker dropped is stale
for at most that long. Every test runs on an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.local_cache import DEFAULT_MAX_STALENESS, CachedEntry, LocalCache
from tests._support.clocks import ManualClock

K = b"key"


def v(n: int) -> HybridLogicalClock:
    return HybridLogicalClock(1_700_000_000_000 + n, 0, "StateStore")


def entry(value: str, n: int, **kw: Any) -> CachedEntry[str]:
    return CachedEntry(value, value.encode(), v(n), **kw)


@pytest.fixture
def clock() -> ManualClock[float]:
    return ManualClock()


@pytest.mark.parametrize("ttl", [None, 1000.0], ids=["hot-map", "locked-path"])
def test_an_entry_is_served_only_within_max_staleness_of_its_confirmation(
    clock: ManualClock[float], ttl: float | None
) -> None:
    cache: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock, ttl=ttl, max_staleness=5)
    cache.store_write(K, entry("one", 1))
    clock.now += 4.9
    hit = cache.get(K)
    assert hit is not None and hit.value == "one"
    assert K in cache
    clock.now += 0.1
    assert cache.get(K) is None  # 5 s without a confirmation: a lost notification would show by now
    assert K not in cache
    assert cache.stale_misses == 1
    assert cache.peek(K) is not None and cache.holds(K)  # kept, for a re-read to confirm


def test_a_notification_confirms_and_a_reread_of_the_same_version_confirms(clock: ManualClock[float]) -> None:
    cache: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock, max_staleness=5)
    cache.store_write(K, entry("one", 1))
    clock.now += 4
    cache.apply_event(KeyEvent(K, KeyOperation.SET, b"two", v(2)), bytes.decode)
    clock.now += 4
    hit = cache.get(K)
    assert hit is not None and hit.value == "two"  # confirmed 4 s ago by the notification
    clock.now += 2
    assert cache.get(K) is None
    ticket = cache.begin_read(K)
    assert not cache.finish_read(ticket, entry("two", 2))  # the same version: not stored again...
    hit = cache.get(K)
    assert hit is not None and hit.value == "two"  # ...but confirmed: served again
    clock.now += 5
    assert cache.get(K) is None
    ticket = cache.begin_read(K)
    assert cache.finish_read(ticket, entry("three", 3))  # a lost change found by the re-read
    hit = cache.get(K)
    assert hit is not None and hit.value == "three"


def test_confirm_restamps_only_the_version_held(clock: ManualClock[float]) -> None:
    cache: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock, max_staleness=5)
    cache.store_write(K, entry("one", 1))
    clock.now += 5
    assert not cache.confirm(K, v(2))  # the store has another version: this entry stays unserved
    assert cache.get(K) is None
    assert cache.confirm(K, v(1))
    hit = cache.get(K)
    assert hit is not None and hit.value == "one"
    assert not cache.confirm(b"other", v(1))


def test_due_lists_what_ages_out_soon_oldest_first_and_leaves_expiring_keys_alone(clock: ManualClock[float]) -> None:
    cache: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock, max_staleness=10)
    cache.store_write(b"a", entry("a", 1))
    clock.now += 3
    cache.store_write(b"b", entry("b", 2))
    cache.store_write(b"expiring", entry("e", 3, expires_at=clock.now + 5))  # gone before it would age out
    clock.now += 3
    cache.store_write(b"c", entry("c", 4))
    assert cache.due(within=2) == []
    assert cache.due(within=5) == [b"a"]
    assert cache.due(within=8) == [b"a", b"b"]
    assert cache.due(within=8, limit=1) == [b"a"]
    clock.now += 100
    assert cache.due(within=0) == [b"a", b"b", b"c"]


def test_none_trusts_notifications_forever_and_the_default_is_30_s(clock: ManualClock[float]) -> None:
    forever: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock, max_staleness=None)
    default: LocalCache[str] = LocalCache(maxsize=10, monotonic=clock)
    assert default.max_staleness == DEFAULT_MAX_STALENESS == 30.0
    for c in (forever, default):
        c.store_write(K, entry("one", 1))
    clock.now += 29.9
    assert default.get(K) is not None
    clock.now += 10_000
    hit = forever.get(K)
    assert hit is not None and hit.value == "one"
    assert default.get(K) is None
    assert forever.due(within=1e9) == []


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "30"])
def test_max_staleness_must_be_positive_seconds_or_none(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_staleness"):
        LocalCache(maxsize=10, max_staleness=bad)  # type: ignore[arg-type]
