"""Scenario e, the blocking API and the way back: a client whose wall clock is 2 minutes off.

``test_fault_clock.py`` runs the async client 2 minutes fast and 2 minutes slow. This adds:

* **2 minutes fast, blocking API**, over the real mosquitto + emulator process: SET, SET NX PX, GET, DEL,
  VDEL, KEYNOTIFY (a watch and a callback subscription), ``LeasedLock.try_acquire``/``acquire`` and a
  ``StateStoreDict`` write each raise :class:`TimestampSkewError` with the service's text (synchronise the
  clocks); nothing is written, no KEYNOTIFY registration is left behind, the connection stays up, a watcher
  of the key sees only the healthy client's changes (bracketed by two of them: no phantom event in between),
  the service clock is not dragged ahead, and the emulator keeps serving.
* **a fencing token 2 minutes ahead** (docs/design/protocol.md §3/§6): SET/DEL/VDEL with it raise
  :class:`FencingTokenSkewError`, and no token is stored with the key.
* **the clock fixed afterwards**: the client's hybrid logical clock never goes back (§5), so it still stands
  ~120 s ahead; the next request fails *locally* with :class:`ClockDriftError` (same advice, nothing sent)
  until the wall clock is within 60 s of it — up to 60 s after the fix, on the same connection, no reconnect
  needed; a new client works at once. Over the broker the test shows the local refusal and the fresh client;
  on the in-process store (injected clock, no real waiting) it shows the same client working again.
* **2 minutes slow, blocking API**: docs/design/protocol.md §5 says timestamps in the past never fail, so the service
  accepts everything. Each response carries a version more than 60 s ahead of the slow clock, which §5
  calls a drift error on the *client* side; the library keeps its clock unchanged, as §5 requires, but returns
  the result (the service did carry the request out) and counts ``clock_drift_warnings`` (README
  "Reliability"). SET/GET, a watch, a leased lock, its fencing token and a fenced dict work.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sskv_mapping import (
    ClockDriftError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    HybridLogicalClock,
    KeyOperation,
    LeasedLock,
    SetCondition,
    StateStoreClient,
    StateStoreDict,
    TimestampSkewError,
)
from sskv_mapping.client import ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.testing import FakeClock, InProcessStore

from .conftest import FaultRow

pytestmark = pytest.mark.faults

SKEW_MS = 120_000
WAIT = 10.0
ADVICE = "clocks are synchronized"


def real_now_ms() -> int:
    return time.time_ns() // 1_000_000


class OffsetClock:
    """A wall clock (ms) ``offset_ms`` away from this machine's; the offset can be changed (the clock fixed)."""

    def __init__(self, offset_ms: int, base: Callable[[], int] = real_now_ms) -> None:
        self.offset_ms = offset_ms
        self._base = base

    def __call__(self) -> int:
        return self._base() + self.offset_ms


@pytest.mark.broker
def test_a_blocking_client_two_minutes_fast_is_refused_writes_nothing_and_breaks_nothing(
    mosquitto: MosquittoBroker, emulator: object, fault_report: FaultRow
) -> None:
    fault_report.scenario = "e. clock 2 min fast, blocking API + fixed"
    fault_report.faults = "client wall clock +120 s, then fixed; a fencing token +120 s"
    ns = f"skewsync{uuid.uuid4().hex[:8]}"
    key, fresh_key, lock_name = f"{ns}-key", f"{ns}-fresh", f"{ns}-lock"
    address: dict[str, Any] = {"host": mosquitto.host, "port": mosquitto.port, "timeout": 5}
    fast_clock = OffsetClock(SKEW_MS)
    with (
        StateStoreClient(**address) as healthy,
        StateStoreClient(**address) as watcher,
        StateStoreClient(**address, wall_clock_ms=fast_clock) as fast,
    ):
        before = healthy.set(key, b"v1")
        watch = watcher.watch(key).start()

        def dict_write() -> None:
            d: StateStoreDict[Any] = StateStoreDict(fast, namespace=ns, local_cache_size=0)
            try:
                d["k"] = {"from": "the future"}
            finally:
                d.close()

        calls: dict[str, Callable[[], object]] = {
            "SET": lambda: fast.set(key, b"from the future"),
            "SET NX PX": lambda: fast.set(fresh_key, b"x", condition=SetCondition.NX, ttl=5),
            "GET": lambda: fast.get(key),
            "DEL": lambda: fast.delete(key),
            "VDEL": lambda: fast.vdelete(key, b"v1"),
            "KEYNOTIFY (watch)": lambda: fast.watch(fresh_key).start(),
            "KEYNOTIFY (subscribe_key)": lambda: fast.subscribe_key(key, lambda event: None),
            "LeasedLock.try_acquire": lambda: LeasedLock(fast, lock_name, lease=5).try_acquire(),
            "LeasedLock.acquire": lambda: LeasedLock(fast, lock_name, lease=5).acquire(timeout=WAIT),
            "StateStoreDict write": dict_write,
        }
        refused: list[str] = []
        for name, call in calls.items():
            with pytest.raises(TimestampSkewError) as info:
                call()
            assert ADVICE in str(info.value), name
            assert fast.state is ConnectionState.CONNECTED, f"{name} ended the skewed client's connection"
            refused.append(name)
        assert fast.watched_keys == [], "a refused KEYNOTIFY left a registration behind"
        assert fast.async_client.reconnects == 0

        # nothing was written or deleted
        entry = healthy.get(key)
        assert entry is not None and (entry.value, entry.version) == (b"v1", before.version)
        for absent in (fresh_key, lock_name, f"{ns}/k"):
            assert healthy.get(absent) is None, absent
        # the service clock was not dragged into the future by the refused __ts
        v2 = healthy.set(key, b"v2")
        assert v2.version is not None and v2.version.wall_ms < real_now_ms() + 60_000
        # the watcher's first two events are the healthy client's two writes: nothing phantom before or between
        v3 = healthy.set(key, b"v3")
        seen = [watch.next(timeout=WAIT) for _ in range(2)]
        assert [(e.op, e.value, e.version) for e in seen] == [
            (KeyOperation.SET, b"v2", v2.version),
            (KeyOperation.SET, b"v3", v3.version),
        ]
        watch.close()

        # a fencing token 2 minutes ahead: refused on SET/DEL/VDEL, and no token is stored with the key
        future_token = HybridLogicalClock(real_now_ms() + SKEW_MS, 0, "StateStore")
        token_refusals = 0
        for attempt in (
            lambda: healthy.set(fresh_key, b"fenced", fencing_token=future_token),
            lambda: healthy.delete(key, fencing_token=future_token),
            lambda: healthy.vdelete(key, b"v3", fencing_token=future_token),
        ):
            with pytest.raises(FencingTokenSkewError, match=ADVICE):
                attempt()
            token_refusals += 1
        assert healthy.get(fresh_key) is None
        assert healthy.set(fresh_key, b"no token needed").applied  # a stored token would demand one
        entry = healthy.get(key)
        assert entry is not None and entry.value == b"v3"

        # the clock is fixed: the HLC still stands 2 minutes ahead, so the client refuses locally (§5)
        fast_clock.offset_ms = 0
        with pytest.raises(ClockDriftError, match="synchronized"):
            fast.get(key)
        assert fast.state is ConnectionState.CONNECTED
        # a new client with the fixed clock works at once; the emulator kept serving throughout
        with StateStoreClient(**address, wall_clock_ms=fast_clock) as fixed:
            assert fixed.set(key, b"after the fix").applied
            entry = fixed.get(key)
            assert entry is not None and entry.value == b"after the fix"
        for k in (key, fresh_key):
            healthy.delete(k)

    fault_report.load = f"3 clients (one 2 min fast, blocking API), {len(calls)} kinds of call"
    fault_report.writes_lost = "0 (nothing written by the skewed client)"
    fault_report.stale_reads = "0 (no phantom event)"
    fault_report.recovery = "fixed clock: ClockDriftError until HLC <= now+60 s; new client at once"
    fault_report.notes.append(
        f"TimestampSkewError for: {', '.join(refused)}; FencingTokenSkewError for SET/DEL/VDEL with a token "
        f"+120 s ({token_refusals}), no token stored; connection never dropped"
    )


async def test_a_fixed_clock_works_again_on_the_same_connection_in_process(fault_report: FaultRow) -> None:
    fault_report.scenario = "e. clock 2 min fast, then fixed (in-process)"
    fault_report.faults = "client wall clock +120 s, fixed, injected time +61 s"
    clock = FakeClock()
    fast_clock = OffsetClock(SKEW_MS, base=clock.wall_ms)
    async with (
        InProcessStore(clock=clock) as store,
        store.async_client(timeout=5) as healthy,
        store.async_client(wall_clock_ms=fast_clock, timeout=5) as fast,
    ):
        with pytest.raises(TimestampSkewError, match=ADVICE):
            await fast.set("k", b"from the future")
        with pytest.raises(TimestampSkewError, match=ADVICE):
            await fast.subscribe_key("k", lambda event: None)
        assert store.core.registrations(fast.client_id) == set()
        assert await healthy.get("k") is None

        fast_clock.offset_ms = 0  # fixed; the HLC stays ~120 s ahead and never goes back
        with pytest.raises(ClockDriftError):
            await fast.set("k", b"too early")
        clock.advance(59)  # the HLC is still 61 s ahead of the wall clock
        with pytest.raises(ClockDriftError):
            await fast.get("k")
        assert await healthy.get("k") is None

        clock.advance(2)  # the wall clock is within 60 s of the HLC again: the same client works
        result = await fast.set("k", b"back")
        assert result.applied and result.version is not None
        entry = await healthy.get("k")
        assert entry is not None and (entry.value, entry.version) == (b"back", result.version)
        sub = await fast.subscribe_key("k", lambda event: None)
        assert store.core.registrations(fast.client_id) == {b"k"}
        await sub.close()
        later = await healthy.set("k", b"healthy after")
        assert later.version is not None and later.version > result.version
        assert fast.state is ConnectionState.CONNECTED and fast.reconnects == 0
        drift = fast.clock_drift_warnings

    fault_report.load = "2 clients, same connection throughout"
    fault_report.writes_lost = "0"
    fault_report.stale_reads = "0"
    fault_report.recovery = "works again 61 s (injected) after the fix, no reconnect"
    fault_report.notes.append(f"clock_drift_warnings of the fixed client: {drift}")


@pytest.mark.broker
def test_a_blocking_client_two_minutes_slow_works(
    mosquitto: MosquittoBroker, emulator: object, fault_report: FaultRow
) -> None:
    fault_report.scenario = "e. clock 2 min slow, blocking API"
    fault_report.faults = "client wall clock -120 s"
    ns = f"slowsync{uuid.uuid4().hex[:8]}"
    key, lock_name = f"{ns}-key", f"{ns}-lock"
    address: dict[str, Any] = {"host": mosquitto.host, "port": mosquitto.port, "timeout": 5}
    with (
        StateStoreClient(**address) as healthy,
        StateStoreClient(**address, wall_clock_ms=OffsetClock(-SKEW_MS)) as slow,
    ):
        result = slow.set(key, b"from the past")
        assert result.applied and result.version is not None
        assert result.version.wall_ms > real_now_ms() - 60_000, "versions are the service's clock, not the client's"
        assert slow.async_client.clock_drift_warnings >= 1
        entry = slow.get(key)
        assert entry is not None and (entry.value, entry.version) == (b"from the past", result.version)

        with slow.watch(key) as watch:
            changed = healthy.set(key, b"changed")
            event = watch.next(timeout=WAIT)
            assert (event.op, event.value, event.version) == (KeyOperation.SET, b"changed", changed.version)

        lock = LeasedLock(slow, lock_name, lease=5)
        token = lock.acquire(timeout=WAIT)
        d: StateStoreDict[Any] = StateStoreDict(slow, namespace=ns, local_cache_size=0)
        try:
            d.fenced(lock)["protected"] = {"by": "slow"}
            assert d["protected"] == {"by": "slow"}
            assert lock.release()
            taker = LeasedLock(healthy, lock_name, lease=5)
            newer = taker.acquire(timeout=WAIT)
            assert newer > token
            with pytest.raises(FencingTokenRequiredError):  # the key is fenced: an unfenced write is refused
                slow.set(f"{ns}/protected", b"{}")
            assert healthy.set(f"{ns}/protected", b'{"by":"taker"}', fencing_token=newer).applied
            assert d["protected"] == {"by": "taker"}
            healthy.delete(f"{ns}/protected", fencing_token=newer)
            assert taker.release()
        finally:
            d.close()
        healthy.delete(key)
        assert slow.state is ConnectionState.CONNECTED and slow.async_client.reconnects == 0
        warnings = slow.async_client.clock_drift_warnings

    fault_report.load = "2 clients (one 2 min slow, blocking API): SET/GET/watch/lock/fenced dict"
    fault_report.writes_lost = "0"
    fault_report.stale_reads = "0"
    fault_report.recovery = "n/a (connection never dropped)"
    fault_report.notes.append(f"every call succeeded; {warnings} response versions not merged into the slow clock")
