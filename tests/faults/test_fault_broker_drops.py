"""Scenario f: the broker drops messages -- a mosquitto on its default settings (20 in flight + 1,000 queued per
session, the rest dropped without a word), real processes throughout.

* **bursts**: 5,000 concurrent gets from one client, and a dict with a small local cache filled past its watch
  limit by 64 writers: the client's bound on requests in flight and the bounded release of idle watches keep
  every queue under the broker's limit -- every call answered, nothing dropped (the broker's ``$SYS`` counter);
* **a stalled consumer**: a reader's loop is blocked while another process rewrites 1,500 of its cached keys; the
  broker drops the notifications it cannot queue (shown, so the fault is real). No value is served stale longer
  than ``max_staleness`` after the writer finished; every value is current again, and no write is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Awaitable

import pytest

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support import watches_of
from tests._support.broker_stats import FAST_SYS, dropped_messages
from tests._support.procs import start_emulator
from tests._support.waiting import eventually

from .conftest import FaultRow, recovery_text

pytestmark = [pytest.mark.faults, pytest.mark.broker]

GETS = 5000
FILL_KEYS, FILL_CACHE, WRITERS = 1600, 500, 64
STALL_KEYS, MAX_STALENESS = 1500, 5.0

WRITER = """
import sys
from sskv_mapping.mapping import StateStoreDict
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace="stalled", local_cache_size=0) as d:
    d.update({f"k{i}": f"new-{i}" for i in range(n)})
"""


async def _timed(call: Awaitable[object], longest: list[float]) -> object:
    started = time.monotonic()
    try:
        return await call
    finally:
        longest[0] = max(longest[0], time.monotonic() - started)


async def test_broker_drops_messages(fault_report: FaultRow) -> None:
    fault_report.scenario = "f. broker drops messages (mosquitto's default queue limits)"
    fault_report.load = (
        f"{GETS:,} concurrent gets from one client; {WRITERS} writers filling (and reading back) {FILL_KEYS:,} keys "
        f"through a {FILL_CACHE}-entry local cache; a reader stalled while another process rewrites "
        f"{STALL_KEYS:,} cached keys"
    )
    with MosquittoBroker(extra_config=[FAST_SYS]) as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with AsyncStateStoreClient(broker.host, broker.port) as client:  # default 10 s timeout
                # -- bursts: nothing dropped -------------------------------------------------------------------
                await client.set("burst", b"x")
                longest = [0.0]
                got = await asyncio.gather(*(_timed(client.get("burst"), longest) for _ in range(GETS)))
                assert all(e is not None for e in got)
                d: AsyncStateStoreDict[int] = AsyncStateStoreDict(client, namespace="fill", local_cache_size=FILL_CACHE)
                await d.open()
                queue: asyncio.Queue[int] = asyncio.Queue()
                for i in range(FILL_KEYS):
                    queue.put_nowait(i)

                async def writer() -> None:
                    while not queue.empty():
                        i = queue.get_nowait()
                        await _timed(d.set(f"k{i}", i), longest)
                        await _timed(d.get(f"k{i}"), longest)  # read back: watched (a write alone is not)

                await asyncio.gather(*(writer() for _ in range(WRITERS)))
                assert watches_of(d._store).released > 0
                await d.close()
                burst_dropped = await dropped_messages(broker)
                assert burst_dropped == 0

            # -- a stalled consumer: the broker drops, the cache is stale at most max_staleness ---------------
            async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
                r: AsyncStateStoreDict[str] = AsyncStateStoreDict(
                    client, namespace="stalled", local_cache_size=STALL_KEYS + 100, max_staleness=MAX_STALENESS
                )
                await r.open()
                await r.update({f"k{i}": f"old-{i}" for i in range(STALL_KEYS)})
                for i in range(STALL_KEYS):
                    await r.get(f"k{i}")
                hit = r._core.hit
                subprocess.run(  # noqa: ASYNC221 - blocking this loop is the fault
                    [sys.executable, "-c", WRITER, broker.host, str(broker.port), str(STALL_KEYS)],
                    check=True,
                    timeout=120,
                )
                written = time.monotonic()
                stale_late = 0

                def served(i: int) -> str | None:
                    e = hit(f"k{i}")
                    return None if e is None else str(e.value)

                def all_current() -> bool:
                    nonlocal stale_late
                    values = [served(i) for i in range(STALL_KEYS)]
                    if time.monotonic() - written > MAX_STALENESS:
                        stale_late += sum(v is not None and v != f"new-{i}" for i, v in enumerate(values))
                    return values == [f"new-{i}" for i in range(STALL_KEYS)]

                await eventually(all_current, timeout=MAX_STALENESS + 60, interval=0.05)
                recovered = time.monotonic() - written
                final = [await r.get(f"k{i}") for i in range(STALL_KEYS)]
                lost = sum(v != f"new-{i}" for i, v in enumerate(final))
                await r.close()
            stall_dropped = await dropped_messages(broker) - burst_dropped
        finally:
            with contextlib.suppress(Exception):
                emulator.stop()
    fault_report.faults = f"{stall_dropped:,} messages dropped by the broker (the stall); 0 in the bursts"
    fault_report.writes_lost = str(lost)
    fault_report.stale_reads = f"{stale_late} served past max_staleness ({MAX_STALENESS:.0f} s)"
    fault_report.recovery = recovery_text([recovered])
    fault_report.notes.append(
        f"bursts: {GETS:,} gets + {FILL_KEYS:,} writes all answered, 0 dropped; longest call {longest[0]:.2f} s"
    )
    assert stall_dropped > 0  # the fault happened
    assert lost == 0
    assert stale_late == 0
