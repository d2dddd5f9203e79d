"""Scenario d, the lock API's side: a stale holder writing through ``LeasedLock`` / a fenced dict view.

``test_fault_lease_pause.py`` pauses a holder *coroutine* and fires raw SET/DEL/VDEL with its old token.
Here the holder is a real process, paused with SIGSTOP, and it writes through everything the library offers
it: the raw client with the token it got, ``LeasedLock.set``/``delete`` and ``StateStoreDict.fenced(lock)``.

Each round: holder A takes the lock (fencing token ``tA``) and is paused past its lease; taker B acquires
the lock (``tB > tA``) and writes the protected key with ``tB``; A resumes and tries to write it. Two lock
objects of A hold the same lease (one holder value; the second ``SET NEX`` is a renewal):

* ``honest`` times its lease with the real monotonic clock: after the pause it refuses to hand out its
  token (:class:`LockError`), so nothing is even sent;
* ``blind`` times it with a clock that did not see the pause (``CLOCK_MONOTONIC`` does not count a system or
  VM suspend; or the holder checked before it was paused): it still thinks it holds the lock and sends its
  writes with ``tA``. Only the service's fencing stands in the way — every one must be refused with
  :class:`FencingTokenLowerVersionError`, and the key must keep B's value.

* over the real mosquitto + emulator process: the holder is ``_lease_worker.py`` (blocking API), frozen
  with SIGSTOP after its grant and resumed with SIGCONT once B wrote; 50 ms lease, B's ``acquire()`` is woken
  by the expiry's DELETE (``SSKV_FAULTS_FENCING_BROKER_ROUNDS``, default 100);
* on the in-process store with one injected clock for the service and both clients (async API; the pause
  costs no real time; ``SSKV_FAULTS_FENCING_ROUNDS``, default 1,000).

Every round must produce exactly the expected refusals (7 by the service, 2 by the lock object), so the
test cannot pass by attempting nothing.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sskv_mapping import FencingTokenLowerVersionError, HybridLogicalClock, LockError
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.lock import AsyncLeasedLock
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.testing import FakeClock, InProcessStore
from tests._support.waiting import eventually

from . import _harness
from .conftest import FaultRow, env_int

pytestmark = pytest.mark.faults

LEASE_WORKER = Path(__file__).with_name("_lease_worker.py")
BROKER_LEASE_MS = 50
IN_PROCESS_LEASE_MS = 1000
WAIT = 15.0

#: every stale attempt and how it must end: ``fencing`` = refused by the service, ``lock`` = by the lock object
EXPECTED: Mapping[str, str] = {
    "SET": "fencing",
    "DEL": "fencing",
    "VDEL": "fencing",
    "blind lock.set": "fencing",
    "blind lock.delete": "fencing",
    "blind fenced dict set": "fencing",
    "blind fenced dict del": "fencing",
    "honest lock.set": "lock",
    "honest fenced dict set": "lock",
}
BY_SERVICE = sum(1 for v in EXPECTED.values() if v == "fencing")
BY_LOCK = sum(1 for v in EXPECTED.values() if v == "lock")


class Tally:
    def __init__(self) -> None:
        self.rounds = 0
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.unexpected: list[str] = []
        self.value_overwritten = 0
        self.blind_held = 0
        self.takeovers: list[float] = []

    def add(self, round_no: int, results: Mapping[str, str]) -> None:
        assert set(results) == set(EXPECTED), f"round {round_no}: attempts {sorted(results)}"
        for name, got in results.items():
            self.outcomes[got] += 1
            if got != EXPECTED[name]:
                self.unexpected.append(f"round {round_no}: {name} -> {got}")

    @property
    def stale_accepted(self) -> int:
        return self.outcomes["accepted"] + self.value_overwritten

    def check(self, rounds: int) -> None:
        assert self.rounds == rounds
        assert self.unexpected == []
        assert self.stale_accepted == 0
        assert self.outcomes["fencing"] == BY_SERVICE * rounds
        assert self.outcomes["lock"] == BY_LOCK * rounds
        assert self.blind_held == rounds, "the blind lock must still believe it holds the lease"

    def fill(self, row: FaultRow) -> None:
        row.writes_lost = "0"
        row.stale_reads = f"stale writes accepted: {self.stale_accepted}"
        row.notes.append(
            f"{self.outcomes['fencing']} stale writes refused by the service (FencingTokenLowerVersionError: "
            f"raw SET/DEL/VDEL + blind-clock LeasedLock.set/delete + fenced dict set/del), "
            f"{self.outcomes['lock']} refused by the honest lock itself (LockError, nothing sent)"
        )


async def outcome(attempt: Callable[[], Awaitable[object]]) -> str:
    try:
        await attempt()
    except FencingTokenLowerVersionError:
        return "fencing"
    except LockError:
        return "lock"
    except Exception as exc:  # reported as unexpected
        return f"error:{type(exc).__name__}: {exc}"
    return "accepted"


def process_state(pid: int) -> str:
    """The one-letter state of a process (``T`` when stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


@pytest.mark.broker
async def test_sigstopped_holder_process_never_writes_over_the_broker(
    mosquitto: MosquittoBroker, emulator: object, fault_report: FaultRow, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = env_int("SSKV_FAULTS_FENCING_BROKER_ROUNDS", 100)
    ns = f"fencestop{uuid.uuid4().hex[:8]}"
    lock_name, key = f"{ns}-lock", f"{ns}/protected".encode()
    tally = Tally()
    fault_report.scenario = "d. SIGSTOPped holder process, lock API (broker)"
    fault_report.faults = f"{rounds} SIGSTOP/SIGCONT of the holder process past a {BROKER_LEASE_MS} ms lease"
    monkeypatch.setattr(_harness, "WORKER", LEASE_WORKER)
    worker = _harness.WorkerProcess(
        "holder",
        [
            f"--id=fence-holder-{uuid.uuid4().hex[:8]}",
            f"--host={mosquitto.host}",
            f"--port={mosquitto.port}",
            f"--lock={lock_name}",
            f"--namespace={ns}",
            f"--lease-ms={BROKER_LEASE_MS}",
        ],
    )
    pid = worker.process.pid
    try:
        await asyncio.to_thread(worker.wait_for, lambda e: e["ev"] == "ready", WAIT)
        async with AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as b:
            b_dict: AsyncStateStoreDict[Any] = AsyncStateStoreDict(b, namespace=ns, local_cache_size=0)
            taker: AsyncLeasedLock | None = None
            for i in range(rounds):
                mark = worker.mark()
                worker.send("acquire")
                armed = await asyncio.to_thread(
                    worker.wait_for, lambda e: e["ev"] in ("armed", "not_acquired"), WAIT, mark
                )
                assert armed["ev"] == "armed", f"round {i}: the holder could not take a free lock"
                os.kill(pid, signal.SIGSTOP)
                paused = time.monotonic()
                await eventually(lambda: process_state(pid) == "T", timeout=5)

                taker = AsyncLeasedLock(b, lock_name, lease=5)
                fresh = await taker.acquire(timeout=WAIT)  # woken by the expiry's DELETE
                tally.takeovers.append(time.monotonic() - paused)
                assert fresh > HybridLogicalClock.parse(armed["token"]) > HybridLogicalClock.parse(armed["blind_token"])
                await b_dict.fenced(taker).set("protected", f"taker-{i}")
                written = await b.get(key)
                assert written is not None

                mark = worker.mark()
                worker.send(f"go {written.value.hex()}")  # waits in the pipe until the process runs again
                os.kill(pid, signal.SIGCONT)
                attempts = await asyncio.to_thread(worker.wait_for, lambda e: e["ev"] == "attempts", WAIT, mark)
                tally.add(i, attempts["results"])
                tally.blind_held += bool(attempts["blind_held"])
                entry = await b.get(key)
                if entry is None or entry.value != written.value or entry.version != written.version:
                    tally.value_overwritten += 1
                assert await taker.release()
                tally.rounds += 1
            if taker is not None:
                token = await taker.acquire(timeout=WAIT)
                await b_dict.fenced(taker).clear()
                assert token is not None and await taker.release()
            await b_dict.close()
        done = await asyncio.to_thread(worker.finish, WAIT)
    finally:
        if worker.process.poll() is None:
            os.kill(pid, signal.SIGCONT)
        worker.close()

    fault_report.load = f"{tally.rounds} rounds: holder process (blocking API) + taker, 1 lock, 1 protected key"
    fault_report.recovery = (
        f"takeover {max(tally.takeovers) * 1000:.0f}/{statistics.median(tally.takeovers) * 1000:.0f} ms"
    )
    tally.fill(fault_report)
    fault_report.notes.append(
        f"takeover (max/median) = from SIGSTOP to the taker's grant, waiting out the {BROKER_LEASE_MS} ms lease; "
        f"the holder's connection survived every pause (reconnects: {done['reconnects']})"
    )
    tally.check(rounds)
    assert done["connected_at_end"]
    assert worker.junk == []


def standing_clock(t: float) -> Callable[[], float]:
    """A monotonic clock that stands still at ``t``: a lease check that cannot see the pause."""
    return lambda: t


async def stale_attempts(
    client: AsyncStateStoreClient,
    d: AsyncStateStoreDict[Any],
    key: bytes,
    stale: HybridLogicalClock,
    taker_value: bytes,
    blind: AsyncLeasedLock,
    honest: AsyncLeasedLock,
) -> dict[str, str]:
    """The stale holder's writes of the protected key, the same as ``_lease_worker.py`` makes."""
    return {
        "SET": await outcome(lambda: client.set(key, b'"stale"', fencing_token=stale)),
        "DEL": await outcome(lambda: client.delete(key, fencing_token=stale)),
        "VDEL": await outcome(lambda: client.vdelete(key, taker_value, fencing_token=stale)),
        "blind lock.set": await outcome(lambda: blind.set(key, b'"stale"')),
        "blind lock.delete": await outcome(lambda: blind.delete(key)),
        "blind fenced dict set": await outcome(lambda: d.fenced(blind).set("protected", -1)),
        "blind fenced dict del": await outcome(lambda: d.fenced(blind).delitem("protected")),
        "honest lock.set": await outcome(lambda: honest.set(key, b'"stale"')),
        "honest fenced dict set": await outcome(lambda: d.fenced(honest).set("protected", -1)),
    }


async def test_stale_holder_through_the_lock_api_in_process(fault_report: FaultRow) -> None:
    rounds = env_int("SSKV_FAULTS_FENCING_ROUNDS", 1000)
    fake = FakeClock()  # the service's and the clients' wall clock, the honest lock's monotonic clock
    tally = Tally()
    fault_report.scenario = "d. stale holder, lock API (in-process)"
    fault_report.faults = f"{rounds} holders paused past a {IN_PROCESS_LEASE_MS} ms lease (injected clock)"
    lease = IN_PROCESS_LEASE_MS / 1000
    last_value = b""
    async with (
        InProcessStore(clock=fake) as store,
        store.async_client(timeout=5) as a,
        store.async_client(timeout=5) as b,
    ):
        ns = f"fenceinproc{uuid.uuid4().hex[:8]}"
        lock_name, key = f"{ns}-lock", f"{ns}/protected".encode()
        a_dict: AsyncStateStoreDict[Any] = AsyncStateStoreDict(a, namespace=ns, local_cache_size=0)
        b_dict: AsyncStateStoreDict[Any] = AsyncStateStoreDict(b, namespace=ns, local_cache_size=0)
        for i in range(rounds):
            # the blind lock's clock will not see the pause; the honest one's is the injected clock
            blind = AsyncLeasedLock(a, lock_name, holder="A", lease=lease, monotonic=standing_clock(fake.monotonic()))
            honest = AsyncLeasedLock(a, lock_name, holder="A", lease=lease, monotonic=fake.monotonic)
            taker = AsyncLeasedLock(b, lock_name, holder="B", lease=lease, monotonic=fake.monotonic)
            blind_token = await blind.try_acquire()
            stale = await honest.try_acquire()  # the same holder: a renewal
            assert blind_token is not None and stale is not None and stale > blind_token, f"round {i}"
            assert await taker.try_acquire() is None  # held: the taker has to wait

            fake.advance((IN_PROCESS_LEASE_MS + 1) / 1000)  # A is paused past its lease
            fresh = await taker.try_acquire()
            assert fresh is not None and fresh > stale
            await b_dict.fenced(taker).set("protected", i)
            written = await b.get(key)
            assert written is not None

            tally.blind_held += blind.held
            tally.add(i, await stale_attempts(a, a_dict, key, stale, written.value, blind, honest))
            entry = await b.get(key)
            if entry is None or (entry.value, entry.version) != (written.value, written.version):
                tally.value_overwritten += 1
            assert await taker.release()
            last_value = written.value
            tally.rounds += 1
        await a_dict.close()
        await b_dict.close()
    assert json.loads(last_value) == rounds - 1

    fault_report.load = f"{tally.rounds} rounds, 2 clients (async API), 1 lock, 1 protected key"
    fault_report.recovery = "-"
    tally.fill(fault_report)
    tally.check(rounds)
