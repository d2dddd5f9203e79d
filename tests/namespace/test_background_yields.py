"""Background work yields to the client's calls: watch releases (KEYNOTIFY STOPs past the watch limit),
revalidations and sweeps take a bounded share of the request window while foreground calls are in flight or
waiting, a foreground call never queues behind them, and they still finish (never starved).

Counters, not clocks: the gate records the most background requests there were as one was let through while
foreground calls were in flight or waiting (``busy_background_peak``)."""

from __future__ import annotations

import asyncio
from typing import Any

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client._in_flight import (
    BACKGROUND_BUSY,
    BACKGROUND_IDLE,
    BACKGROUND_RATIO,
    InFlightGate,
    background,
    foreground,
)
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support import watches_of
from tests._support.waiting import eventually

# -- the gate itself --------------------------------------------------------------------------------------


class _Holders:
    """Tasks that take a slot of ``gate`` (in the background or not) and hold it until released."""

    def __init__(self, gate: InFlightGate) -> None:
        self.gate = gate
        self.holding: list[str] = []
        self._release: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, name: str, *, in_background: bool) -> None:
        release = self._release[name] = asyncio.Event()

        async def hold() -> None:
            if in_background:
                with background():
                    await self._hold(name, release)
            else:
                await self._hold(name, release)

        self.tasks.append(asyncio.create_task(hold()))

    async def _hold(self, name: str, release: asyncio.Event) -> None:
        assert await self.gate.enter(None)
        self.holding.append(name)
        try:
            await release.wait()
        finally:
            self.holding.remove(name)
            self.gate.leave()

    def release(self, name: str) -> None:
        self._release[name].set()


NO_TICK = 3600.0  # a gate whose quiet period never ends within a test: only the calls' share lets background in


async def test_while_calls_are_made_background_gets_one_request_per_ratio_calls_and_never_two_at_once() -> None:
    gate = InFlightGate(64, quiet=NO_TICK)
    h = _Holders(gate)
    h.start("fg", in_background=False)  # a call in flight: busy
    await eventually(lambda: h.holding == ["fg"])
    for i in range(3):
        h.start(f"bg{i}", in_background=True)
    await eventually(lambda: gate.background_waiting == 3)
    assert gate.background == 0  # one call so far: its share is not due
    for _ in range(BACKGROUND_RATIO - 2):  # calls made one after the other, beside "fg"
        assert gate.try_enter()
        gate.leave()
    assert gate.background == 0 and gate.background_waiting == 3  # one call short of its share
    assert gate.try_enter()
    gate.leave()  # the RATIO-th call: one background request goes, and only one
    await eventually(lambda: h.holding == ["fg", "bg0"])
    for _ in range(BACKGROUND_RATIO):
        assert gate.try_enter()
        gate.leave()
    assert gate.background == 1 and gate.background_waiting == 2  # due, but one is in flight already
    h.release("bg0")  # its share was due: the next one goes at once
    await eventually(lambda: "bg1" in h.holding)
    assert gate.background == 1 and gate.busy_background_peak == BACKGROUND_BUSY
    h.release("fg")
    h.release("bg1")
    for _ in range(BACKGROUND_RATIO):
        assert gate.try_enter()
        gate.leave()
    await eventually(lambda: "bg2" in h.holding)
    h.release("bg2")
    await asyncio.gather(*h.tasks)
    assert gate.in_flight == gate.background == 0 and gate.background_sent == 3


async def test_once_the_client_is_quiet_background_gets_more_and_a_stuck_call_does_not_starve_it() -> None:
    gate = InFlightGate(64, quiet=0.001)
    h = _Holders(gate)
    h.start("fg", in_background=False)  # a call that does not end (a service slow to answer): busy throughout
    await eventually(lambda: h.holding == ["fg"])
    for i in range(3):
        h.start(f"bg{i}", in_background=True)
    # no other call is made: a quiet period's tick lets one through at a time, beside the call
    for i in range(3):
        await eventually(lambda i=i: f"bg{i}" in h.holding)  # type: ignore[misc]
        assert gate.background == 1
        h.release(f"bg{i}")
    assert gate.busy_background_peak == BACKGROUND_BUSY
    h.release("fg")
    await eventually(lambda: not h.holding)
    for i in range(3, BACKGROUND_IDLE + 4):  # no call any more: quiet after a tick, IDLE at once
        h.start(f"bg{i}", in_background=True)
    await eventually(lambda: gate.background == BACKGROUND_IDLE)
    assert gate.background_waiting == 1
    assert gate.busy_background_peak == BACKGROUND_BUSY  # never more while a call was in flight
    for i in range(3, BACKGROUND_IDLE + 4):
        h.release(f"bg{i}")
    await asyncio.gather(*h.tasks)
    assert gate.in_flight == gate.background == 0


async def test_a_freed_slot_goes_to_a_waiting_call_before_background_which_is_never_starved() -> None:
    gate = InFlightGate(2, quiet=NO_TICK)
    h = _Holders(gate)
    holders = ["fgA", "fgB"]
    for name in holders:
        h.start(name, in_background=False)
    await eventually(lambda: h.holding == holders)
    h.start("bg", in_background=True)  # the window is full of calls: background waits, first
    await eventually(lambda: gate.background_waiting == 1)
    calls = 2
    while calls < BACKGROUND_RATIO:  # each freed slot goes to the call waiting, although background came first
        name = f"fg{calls}"
        h.start(name, in_background=False)
        await eventually(lambda: gate.waiting == 1)
        h.release(holders.pop(0))
        await eventually(lambda name=name: name in h.holding)  # type: ignore[misc]
        holders.append(name)
        calls += 1
        assert "bg" not in h.holding
    h.start("last", in_background=False)
    await eventually(lambda: gate.waiting == 1)
    h.release(holders.pop(0))  # RATIO calls went and background has nothing in flight: its share goes first
    await eventually(lambda: "bg" in h.holding)
    assert "last" not in h.holding and gate.background == 1
    h.release(holders.pop(0))
    await eventually(lambda: "last" in h.holding)
    for name in ("bg", "last"):
        h.release(name)
    await asyncio.gather(*h.tasks)
    assert gate.in_flight == gate.background == 0 and gate.waiting == gate.background_waiting == 0


# -- over real processes ----------------------------------------------------------------------------------

CACHE = 8
KEYS = 400


async def test_watch_releases_yield_to_callers_finish_under_their_load_and_the_cache_stays_current(
    broker_address: tuple[str, int], namespace: str
) -> None:
    host, port = broker_address
    async with (
        AsyncStateStoreClient(host, port, timeout=30) as client,
        AsyncStateStoreClient(host, port, timeout=30) as writer,
    ):
        w: AsyncStateStoreDict[Any] = AsyncStateStoreDict(writer, namespace=namespace, listing="scan")
        await w.update({f"k{i}": i for i in range(KEYS)})
        d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(
            client, namespace=namespace, listing="scan", local_cache_size=CACHE
        )
        store = d._store
        gate = client.in_flight
        done = asyncio.Event()
        calls = 0

        async def caller() -> None:  # foreground load until the background work is over
            nonlocal calls
            while not done.is_set():
                await client.get("not-there")
                calls += 1

        callers = [asyncio.create_task(caller()) for _ in range(4)]
        try:
            for i in range(KEYS):  # past the watch limit (2 x 8) the idle watches are released in the background
                assert await d.get(f"k{i}") == i
            released = watches_of(store).released
            assert released >= KEYS - 2 * watches_of(store).limit
            await eventually(lambda: watches_of(store).releasing.done == watches_of(store).released, timeout=60)
        finally:
            done.set()
            await asyncio.gather(*callers)
        assert calls > 0
        assert gate.background_sent >= released  # each STOP went through the background's share...
        assert gate.background_waited > 0  # ...which made some of them wait
        assert gate.busy_background_peak == BACKGROUND_BUSY  # and never took more beside a caller's request
        assert gate.in_flight == gate.background == 0
        # the STOPs reached the service: the client watches only what the dict still does
        assert set(client.watched_keys) == set(watches_of(store))
        # the cache stays current: a cached key changed elsewhere is seen, and so is a released one read again
        last = f"k{KEYS - 1}"
        assert store.cache is not None and store.cache.holds(store.data_key(last))
        await w.set(last, "new")
        await eventually(lambda: d._store.peek(last) is not None and d._store.peek(last).value == "new", timeout=10)  # type: ignore[union-attr]
        await w.set("k0", "changed")
        assert await d.get("k0") == "changed"
        await d.close()


async def test_revalidations_are_background_work(broker_address: tuple[str, int], namespace: str) -> None:
    host, port = broker_address
    async with AsyncStateStoreClient(host, port, timeout=30) as client:
        d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(
            client, namespace=namespace, listing="scan", max_staleness=0.5
        )
        await d.update({f"k{i}": i for i in range(20)})
        for i in range(20):
            assert await d.get(f"k{i}") == i
        sent = client.in_flight.background_sent
        await eventually(lambda: watches_of(d._store).revalidations >= 20, timeout=20)
        assert client.in_flight.background_sent - sent >= 20
        await d.close()


async def test_a_clears_sweep_is_background_work(broker_address: tuple[str, int], namespace: str) -> None:
    host, port = broker_address
    async with AsyncStateStoreClient(host, port, timeout=30) as client:
        cache: AsyncStateStoreCache[Any] = AsyncStateStoreCache(client, namespace=namespace)
        async with cache:
            await cache.set_many({f"k{i}": i for i in range(40)}, ttl=None)
            old = cache.generation
            sent = client.in_flight.background_sent
            await cache.clear()  # starts the sweep in the background
            await cache.sweep()  # waits for it
            assert client.in_flight.background_sent - sent >= 40  # a DEL per entry, each as background
            assert [k async for k in client.scan(f"{namespace}#g.{old}/*")] == []


async def test_foreground_inside_background_is_a_call_again() -> None:
    """What a sweep's fenced delete does around the key's lock: its requests and renewals are the foreground's."""
    gate = InFlightGate(4)
    with background():
        assert gate.try_enter()
        with foreground():
            assert gate.try_enter()
            assert gate.background == 1 and gate.in_flight == 2
            gate.leave()
        gate.leave()
    assert gate.in_flight == gate.background == 0 and gate.background_sent == 1


async def test_the_generation_lock_is_never_background_work(broker_address: tuple[str, int], namespace: str) -> None:
    """A sweep marks its work as background, but the namespace's generation lock it takes to record the sweep is
    the lock a clear() waits for: held at the background share, a clear() took 12 ms instead of 2-4 ms
    (bench_scale). Its requests, inside a background context, still go as calls."""
    host, port = broker_address
    async with AsyncStateStoreClient(host, port, timeout=30) as client:
        cache: AsyncStateStoreCache[Any] = AsyncStateStoreCache(client, namespace=namespace)
        async with cache:
            generation = cache._generation  # the object sweep_retired calls swept() on
            sent = client.in_flight.background_sent
            with background():
                async with generation._locked():
                    await client.get(f"{namespace}#probe")
                await client.get(f"{namespace}#probe")  # after the lock: background again
            assert client.in_flight.background_sent - sent == 1
