"""Scenario e: a client whose clock is wrong, over a real mosquitto + the emulator process.

* **2 minutes fast**: every request carries a ``__ts`` more than 60 s ahead of the service clock. Each call
  fails with :class:`TimestampSkewError` (the service's documented text, telling the user to synchronise the
  clocks) — SET, GET, DEL, VDEL, a watch, a leased lock, a dict write — and nothing else breaks: nothing is
  written, a watcher sees no phantom change, the service clock is not dragged ahead (a healthy client's next
  version is not in the future), the skewed client's connection stays up, and other clients keep working.
* **2 minutes slow**: the service accepts timestamps from the past (docs/design/protocol.md §5), but every response
  carries a version more than 60 s ahead of this client's clock. Merging that into the client's clock is a
  drift error; the client keeps its clock and returns the result — an applied write is never reported as
  failed — and counts the event (``clock_drift_warnings``). Locks and fencing tokens work.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sskv_mapping import KeyEvent, KeyOperation, TimestampSkewError
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.lock import AsyncLeasedLock
from sskv_mapping.mapping import AsyncStateStoreDict

from .conftest import FaultRow

pytestmark = [pytest.mark.faults, pytest.mark.broker]

SKEW_MS = 120_000
WAIT = 10.0


def skewed_clock(offset_ms: int) -> Callable[[], int]:
    return lambda: time.time_ns() // 1_000_000 + offset_ms


def real_now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_client_two_minutes_fast_gets_the_timestamp_error_and_nothing_else_breaks(
    mosquitto: MosquittoBroker, emulator: object, fault_report: FaultRow
) -> None:
    fault_report.scenario = "e. client clock 2 min fast"
    fault_report.faults = "client wall clock +120 s"
    key = f"skew-{uuid.uuid4().hex[:10]}"
    address: dict[str, Any] = {"host": mosquitto.host, "port": mosquitto.port, "timeout": 5}
    async with (
        AsyncStateStoreClient(**address) as healthy,
        AsyncStateStoreClient(**address) as watcher,
        AsyncStateStoreClient(**address, wall_clock_ms=skewed_clock(SKEW_MS)) as fast,
    ):
        before = await healthy.set(key, b"v1")
        events: asyncio.Queue[KeyEvent] = asyncio.Queue()
        sub = await watcher.subscribe_key(key, events.put_nowait)
        namespace = f"skewns{uuid.uuid4().hex[:8]}"
        fast_dict: AsyncStateStoreDict[Any] = AsyncStateStoreDict(fast, namespace=namespace)

        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "SET": lambda: fast.set(key, b"from the future"),
            "GET": lambda: fast.get(key),
            "DEL": lambda: fast.delete(key),
            "VDEL": lambda: fast.vdelete(key, b"v1"),
            "watch (KEYNOTIFY)": lambda: fast.subscribe_key(f"{key}-w", lambda event: None),
            "leased lock": lambda: AsyncLeasedLock(fast, f"{key}-lock", lease=5).try_acquire(),
            "dict write": lambda: fast_dict.set("k", {"from": "the future"}),
        }
        refused: list[str] = []
        for name, call in calls.items():
            with pytest.raises(TimestampSkewError) as info:
                await call()
            assert "clocks are synchronized" in str(info.value), name
            assert fast.state is ConnectionState.CONNECTED, f"{name} ended the skewed client's connection"
            refused.append(name)
        await fast_dict.close()

        # nothing was written or deleted, and the service's clock was not dragged into the future
        entry = await healthy.get(key)
        assert entry is not None and (entry.value, entry.version) == (b"v1", before.version)
        after = await healthy.set(key, b"v2")
        assert after.version is not None and before.version is not None
        assert after.version.wall_ms < real_now_ms() + 60_000, "the service clock ran ahead with the skewed __ts"
        assert await healthy.get(f"{namespace}/k") is None
        # the watcher saw exactly the healthy client's change: no phantom event from the refused requests
        event = await asyncio.wait_for(events.get(), WAIT)
        assert (event.op, event.value, event.version) == (KeyOperation.SET, b"v2", after.version)
        assert events.empty()
        await sub.close()
        await healthy.delete(key)

    fault_report.load = f"3 clients (one 2 min fast), {len(calls)} kinds of call"
    fault_report.writes_lost = "0 (nothing written by the skewed client)"
    fault_report.stale_reads = "0"
    fault_report.recovery = "n/a (connection never dropped)"
    fault_report.notes.append(f"TimestampSkewError for: {', '.join(refused)}; other clients unaffected")


async def test_a_client_two_minutes_slow_works_and_counts_the_drift(
    mosquitto: MosquittoBroker, emulator: object, fault_report: FaultRow
) -> None:
    fault_report.scenario = "e. client clock 2 min slow"
    fault_report.faults = "client wall clock -120 s"
    key = f"slow-{uuid.uuid4().hex[:10]}"
    address: dict[str, Any] = {"host": mosquitto.host, "port": mosquitto.port, "timeout": 5}
    async with (
        AsyncStateStoreClient(**address) as healthy,
        AsyncStateStoreClient(**address, wall_clock_ms=skewed_clock(-SKEW_MS)) as slow,
    ):
        result = await slow.set(key, b"from the past")
        assert result.applied and result.version is not None
        assert slow.clock_drift_warnings >= 1  # the version is 2 min ahead of the slow clock: not merged
        entry = await healthy.get(key)
        assert entry is not None and (entry.value, entry.version) == (b"from the past", result.version)

        events: asyncio.Queue[KeyEvent] = asyncio.Queue()
        sub = await slow.subscribe_key(key, events.put_nowait)
        changed = await healthy.set(key, b"changed")
        event = await asyncio.wait_for(events.get(), WAIT)
        assert (event.op, event.value, event.version) == (KeyOperation.SET, b"changed", changed.version)
        await sub.close()

        # a leased lock and its fencing token (the service's clock) protect a key as usual
        lock = AsyncLeasedLock(slow, f"{key}-lock", lease=5)
        token = await lock.acquire(timeout=WAIT)
        protected = f"{key}-protected"
        assert (await slow.set(protected, b"fenced", fencing_token=token)).applied
        taker = AsyncLeasedLock(healthy, f"{key}-lock", lease=5)
        assert await lock.release()
        newer = await taker.acquire(timeout=WAIT)
        assert newer > token
        assert (await healthy.set(protected, b"taken over", fencing_token=newer)).applied
        assert await taker.release()

        namespace = f"slowns{uuid.uuid4().hex[:8]}"
        slow_dict: AsyncStateStoreDict[Any] = AsyncStateStoreDict(slow, namespace=namespace)
        await slow_dict.set("k", {"ok": True})
        assert await slow_dict.getitem("k") == {"ok": True}
        await slow_dict.close()
        for k in (key, protected):
            await healthy.delete(k, fencing_token=newer)
        warnings = slow.clock_drift_warnings

    fault_report.load = "2 clients (one 2 min slow): SET/GET/watch/lock/fenced SET/dict"
    fault_report.writes_lost = "0"
    fault_report.stale_reads = "0"
    fault_report.recovery = "n/a (connection never dropped)"
    fault_report.notes.append(f"every call succeeded; {warnings} response versions not merged into the slow clock")
