"""Scenario d: a lease holder paused past its lease while another takes over — no stale write accepted.

Each round: holder A takes the leased lock (fencing token ``tA``) and is paused (it does nothing, its lease
is not renewed) until its lease has run out; taker B acquires the lock (``tB > tA``) and writes the protected
key with ``tB``; then A resumes and writes with the token it holds — SET, DEL and VDEL with ``tA``. Every
one of A's attempts must be refused by the service (``FencingTokenLowerVersionError``) and the key must keep
B's value. A second line of defence is checked too: A's lock object, asked for its token after the pause
by its own clock, refuses (``LockError``) so a fenced dict view sends nothing.

* on the in-process store (the same emulator core, on a loopback broker) with one injected clock for the
  service, both clients and both locks: the pause costs no real time (``SSKV_FAULTS_FENCING_ROUNDS``,
  default 1,000 rounds);
* over the real mosquitto + emulator process with a 40 ms lease: B's ``acquire()`` waits for the lease to
  expire (the emulator's expiry timer and its DELETE notification), no sleeps
  (``SSKV_FAULTS_FENCING_BROKER_ROUNDS``, default 100).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import pytest

from sskv_mapping import FencingTokenLowerVersionError, LockError
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.lock import AsyncLeasedLock
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.testing import FakeClock, InProcessStore

from .conftest import FaultRow, env_int

pytestmark = pytest.mark.faults


class Tally:
    def __init__(self) -> None:
        self.rounds = 0
        self.stale_accepted = 0
        self.refused = 0
        self.client_side_refusals = 0
        self.takeovers: list[float] = []


async def stale_holder_attempts(
    holder: AsyncStateStoreClient, key: str, stale: Any, taker_value: bytes, observer: AsyncStateStoreClient
) -> tuple[int, int]:
    """A's three writes with its stale token; returns (accepted, refused) and checks B's value survived."""
    accepted = refused = 0
    attempts = (
        lambda: holder.set(key, b"stale write", fencing_token=stale),
        lambda: holder.delete(key, fencing_token=stale),
        lambda: holder.vdelete(key, taker_value, fencing_token=stale),
    )
    for attempt in attempts:
        try:
            await attempt()
        except FencingTokenLowerVersionError:
            refused += 1
        else:
            accepted += 1
    entry = await observer.get(key)
    if entry is None or entry.value != taker_value:
        accepted += 1  # something of A's got through
    return accepted, refused


async def test_paused_lease_holders_never_write_in_process(fault_report: FaultRow) -> None:
    rounds = env_int("SSKV_FAULTS_FENCING_ROUNDS", 1000)
    fake = FakeClock()  # one clock for everything: wall ms for the HLCs, seconds for the locks
    lease_ms = 1000
    tally = Tally()
    fault_report.scenario = "d. paused lease holder (in-process)"
    fault_report.faults = f"{rounds} holders paused past a {lease_ms} ms lease (injected clock)"
    async with (
        InProcessStore(clock=fake) as store,
        store.async_client(timeout=5) as a,
        store.async_client(timeout=5) as b,
    ):
        namespace = f"fence{uuid.uuid4().hex[:8]}"
        a_dict: AsyncStateStoreDict[Any] = AsyncStateStoreDict(a, namespace=namespace, local_cache_size=0)
        lock_name, key = f"{namespace}-lock", f"{namespace}-protected"
        for i in range(rounds):
            holder = AsyncLeasedLock(a, lock_name, lease=lease_ms / 1000, monotonic=fake.monotonic)
            taker = AsyncLeasedLock(b, lock_name, lease=lease_ms / 1000, monotonic=fake.monotonic)
            stale = await holder.try_acquire()
            assert stale is not None, f"round {i}: the holder could not take a free lock"
            assert await taker.try_acquire() is None  # held: the taker must wait
            fake.advance((lease_ms + 1) / 1000)  # the holder is paused past its lease
            fresh = await taker.try_acquire()
            assert fresh is not None and fresh > stale
            value = f"taker-{i}".encode()
            assert (await b.set(key, value, fencing_token=fresh)).applied
            accepted, refused = await stale_holder_attempts(a, key, stale, value, b)
            tally.stale_accepted += accepted
            tally.refused += refused
            try:  # the holder's own lock object knows its lease ran out: nothing is even sent
                await a_dict.fenced(holder).set("k", i)
            except LockError:
                tally.client_side_refusals += 1
            else:
                tally.stale_accepted += 1
            assert await taker.release()
            tally.rounds += 1
        await a_dict.close()

    fault_report.load = f"{tally.rounds} rounds, 2 clients, 1 lock, 1 protected key"
    fault_report.writes_lost = "0"
    fault_report.stale_reads = f"stale writes accepted: {tally.stale_accepted}"
    fault_report.recovery = "-"
    fault_report.notes.append(
        f"{tally.refused} stale SET/DEL/VDEL refused by the service (FencingTokenLowerVersionError); "
        f"{tally.client_side_refusals} fenced dict writes refused by the lock itself (LockError)"
    )
    assert tally.stale_accepted == 0
    assert tally.refused == 3 * rounds
    assert tally.client_side_refusals == rounds


@pytest.mark.broker
async def test_paused_lease_holders_never_write_over_the_broker(
    mosquitto: MosquittoBroker, emulator: object, fault_report: FaultRow
) -> None:
    rounds = env_int("SSKV_FAULTS_FENCING_BROKER_ROUNDS", 100)
    lease_s = 0.04
    tally = Tally()
    fault_report.scenario = "d. paused lease holder (broker)"
    fault_report.faults = f"{rounds} holders paused past a {lease_s * 1000:.0f} ms lease"
    address: dict[str, Any] = {"host": mosquitto.host, "port": mosquitto.port, "timeout": 5}
    async with AsyncStateStoreClient(**address) as a, AsyncStateStoreClient(**address) as b:
        name = f"fencebroker{uuid.uuid4().hex[:8]}"
        lock_name, key = f"{name}-lock", f"{name}-protected"
        for i in range(rounds):
            holder = AsyncLeasedLock(a, lock_name, lease=lease_s)
            taker = AsyncLeasedLock(b, lock_name, lease=5)
            stale = await holder.try_acquire()
            assert stale is not None, f"round {i}: the holder could not take a free lock"
            started = time.monotonic()
            fresh = await taker.acquire(timeout=10)  # woken by the expiry's DELETE: the holder "slept" through it
            tally.takeovers.append(time.monotonic() - started)
            assert fresh > stale
            value = f"taker-{i}".encode()
            assert (await b.set(key, value, fencing_token=fresh)).applied
            accepted, refused = await stale_holder_attempts(a, key, stale, value, b)
            tally.stale_accepted += accepted
            tally.refused += refused
            assert await taker.release()
            tally.rounds += 1
        await b.delete(key, fencing_token=fresh)

    median_ms = statistics.median(tally.takeovers) * 1000
    fault_report.load = f"{tally.rounds} rounds, 2 clients, 1 lock, 1 protected key"
    fault_report.writes_lost = "0"
    fault_report.stale_reads = f"stale writes accepted: {tally.stale_accepted}"
    fault_report.recovery = f"takeover {max(tally.takeovers) * 1000:.0f}/{median_ms:.0f} ms"
    fault_report.notes.append(
        f"{tally.refused} stale SET/DEL/VDEL refused by the service; takeover (max/median) waits for the "
        f"{lease_s * 1000:.0f} ms lease to expire"
    )
    assert tally.stale_accepted == 0
    assert tally.refused == 3 * rounds
