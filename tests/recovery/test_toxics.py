"""The toxic matrix (issue 36): each toxic of the fault proxy on the client's link, the emulator's link, or both,
under a concurrent workload of the dict, the cache (get_or_set), a watch, a leased lock renewing and the blocking
twin, on a private mosquitto with the emulator process connected through a proxy of its own.

The bar for each: no call fails (every call's deadline outlasts the toxic); no acknowledged write lost; reads never
go back in time; the watch in order, ending on the last value written; the lock's fencing tokens strictly
increasing, never a second holder; the client back at its steady latency within 2 s once the toxic is removed;
no task or socket that grows with the faults. A fast subset runs by default; ``SSKV_TOXICS=full`` (the nox
session ``toxics``) runs the whole matrix, with the 30 s flapping. Figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sskv_mapping import AsyncLeasedLock, StateStoreClient
from sskv_mapping._transport.factory import chosen_transport
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.testing import FaultProxy
from tests._support.procs import EmulatorProcess, start_emulator

pytestmark = pytest.mark.broker

FULL = os.environ.get("SSKV_TOXICS") == "full"
DEADLINE = 30.0  # every call's timeout: longer than any toxic here, so none may fail
RECOVERY_BOUND = 2.0  # issue 36: back at steady latency within 2 s of the toxic's removal
KEEPALIVE = 3  # seconds: a stall longer than this is a half-open link the client must notice


@dataclass(frozen=True)
class Case:
    """A toxic (or several, one per stream) and how long it stays on."""

    name: str
    toxics: tuple[tuple[str, str, dict[str, float]], ...]  # (type, stream, attributes)
    seconds: float
    fast: bool = False


def _both(type_: str, **attributes: float) -> tuple[tuple[str, str, dict[str, float]], ...]:
    return ((type_, "upstream", attributes), (type_, "downstream", attributes))


CASES = [
    Case("flapping", (("reset_peer", "downstream", {"timeout": 1650, "jitter": 1350}),), 30.0),
    Case("flapping-short", (("reset_peer", "downstream", {"timeout": 700, "jitter": 400}),), 3.0, fast=True),
    Case("latency", _both("latency", latency=50, jitter=40), 3.0, fast=True),
    Case("bandwidth", _both("bandwidth", rate=64), 3.0),
    Case("slicer", _both("slicer", average_size=5, size_variation=4, delay=500), 3.0, fast=True),
    Case("stall", _both("timeout", timeout=0), 2.0, fast=True),
    Case("stall-past-keepalive", _both("timeout", timeout=0), KEEPALIVE * 2.5),
    Case("slow_close", _both("slow_close", delay=500), 3.0),
    Case("limit_data", _both("limit_data", bytes=6000), 3.0, fast=True),
]
WHERE = ("client", "emulator", "both")
FAST = {("flapping-short", "client"), ("latency", "both"), ("stall", "client"), ("slicer", "both")}
#: found by this matrix: limit_data closes every new connection soon after its connect, which the client once took
#: for a session take-over and stopped for good on; it now rides it out (a suspected take-over, said, never fatal).
#: a reset of the emulator's link loses what the emulator was sending: calls wait out their whole deadline
#: (RequestTimeoutError after 30 s) and the watch can miss the last value written
EMULATOR_LOSS = "replies and notifications the emulator sends as its link is cut are lost (not fixed here)"
#: found by this matrix too: a watch missed the last value until the next reconnect (limit_data on the client's link,
#: whose clean closes come every 0.3 s). Not a late 'disconnected' log line, as first thought: in every traced run the
#: emulator read a connection's line before the next one's requests. A KEYNOTIFY applied on a connection that then
#: ended was dropped with it, while its reply came on the next one and was taken for a live registration; the
#: watches now register again when a drop came in between (tests/client/test_watch_register_across_drop.py).
KNOWN: dict[tuple[str, str], tuple[str, bool]] = {}
for _name in ("flapping", "flapping-short", "slow_close", "limit_data"):  # the cases that cut the emulator's link
    for _where in ("emulator", "both"):
        KNOWN[(_name, _where)] = (EMULATOR_LOSS, True)


#: the paho transport fails a call in flight when its connection drops (it resends nothing of the session: the
#: session guarantees are the stream transport's, as test_session_blips.py says)
PAHO_DROPS = "the paho transport fails a call in flight when its connection drops (no session resend)"
DROPPING = {"flapping", "flapping-short", "slow_close", "stall-past-keepalive", "limit_data"}


def _params() -> Iterator[Any]:
    for case in CASES:
        for where in WHERE:
            if FULL or (case.name, where) in FAST:
                marks = [pytest.mark.timeout(120 + 4 * case.seconds)]
                known = KNOWN.get((case.name, where))
                if known is not None:
                    marks.append(pytest.mark.xfail(reason=known[0], strict=False, run=known[1]))
                elif chosen_transport() == "paho" and case.name in DROPPING:
                    marks.append(pytest.mark.xfail(reason=PAHO_DROPS, strict=False))
                yield pytest.param(case, where, id=f"{case.name}-{where}", marks=marks)


@dataclass
class Store:
    broker: MosquittoBroker
    emulator_link: FaultProxy
    emulator: EmulatorProcess


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    broker = MosquittoBroker().start()
    try:
        with FaultProxy((broker.host, broker.port)) as link:
            emulator = start_emulator(link.host, link.port)
            try:
                yield Store(broker, link, emulator)
            finally:
                emulator.stop()
    finally:
        broker.stop()


@dataclass
class Tally:
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    backwards: list[str] = field(default_factory=list)
    two_holders: list[str] = field(default_factory=list)

    def failed(self, what: str, exc: BaseException) -> None:
        self.failures.append(f"{what}: {type(exc).__name__}: {exc}")


class Workload:
    """The concurrent users of one client (behind the client's proxy) and a blocking twin in a thread."""

    def __init__(self, client: AsyncStateStoreClient, direct: AsyncStateStoreClient, url: str, ns: str) -> None:
        self.client, self.direct, self.url, self.ns = client, direct, url, ns
        self.tally = Tally()
        self.stop = asyncio.Event()
        self.thread_stop = threading.Event()
        self.dict_acked = 0
        self.watch_written = 0
        self.watched: list[int] = []
        self.watch_moved = asyncio.Event()
        self.tokens: list[Any] = []
        self.twin_acked = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.thread: threading.Thread | None = None

    async def start(self) -> None:
        d: AsyncStateStoreDict[int] = AsyncStateStoreDict(self.client, namespace=self.ns)
        cache: AsyncStateStoreCache[str] = AsyncStateStoreCache(self.client, namespace=self.ns + "-cache")
        watch = self.client.watch(f"{self.ns}/watched")
        await watch.start()
        self.tasks = [
            asyncio.ensure_future(coro)
            for coro in (
                self._dict_writer(d),
                self._dict_reader(d),
                self._cache(cache),
                self._watch_writer(),
                self._watch(watch),
                self._lock(),
                self._contender(),
            )
        ]
        self.thread = threading.Thread(target=self._twin, daemon=True)
        self.thread.start()

    async def finish(self) -> None:
        self.stop.set()
        self.thread_stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks[:4], *self.tasks[5:], return_exceptions=True), DEADLINE * 2)
        assert self.thread is not None
        await asyncio.to_thread(self.thread.join, DEADLINE * 2)

    async def abandon(self) -> None:
        """Stop everything at once (a failed case): no task or thread outlives the test."""
        self.stop.set()
        self.thread_stop.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        assert self.thread is not None
        await asyncio.to_thread(self.thread.join, DEADLINE * 2)

    async def _dict_writer(self, d: AsyncStateStoreDict[int]) -> None:
        for n in itertools.count(1):
            if self.stop.is_set():
                return
            try:
                await d.set("counter", n)
                self.dict_acked = n
            except Exception as exc:
                self.tally.failed("dict set", exc)
            self.tally.calls += 1

    async def _dict_reader(self, d: AsyncStateStoreDict[int]) -> None:
        last = 0
        while not self.stop.is_set():
            floor = self.dict_acked
            try:
                value = await d.get("counter", 0)
            except Exception as exc:
                self.tally.failed("dict get", exc)
                continue
            finally:
                self.tally.calls += 1
            if value < last or value < floor:
                self.tally.backwards.append(f"dict read {value} after {max(last, floor)}")
            last = max(last, value)
            await asyncio.sleep(0.005)

    async def _cache(self, cache: AsyncStateStoreCache[str]) -> None:
        for n in itertools.count():
            if self.stop.is_set():
                return
            key = f"k{n % 20}"
            try:
                value = await cache.get_or_set(key, lambda key=key: f"value of {key}")
            except Exception as exc:
                self.tally.failed("cache get_or_set", exc)
            else:
                if value != f"value of {key}":
                    self.tally.failures.append(f"cache {key} = {value!r}")
            self.tally.calls += 1
            await asyncio.sleep(0.005)

    async def _watch_writer(self) -> None:
        for n in itertools.count(1):
            if self.stop.is_set():
                return
            try:
                await self.client.set(f"{self.ns}/watched", b"%d" % n)
                self.watch_written = n
            except Exception as exc:
                self.tally.failed("watched set", exc)
            self.tally.calls += 1
            await asyncio.sleep(0.01)

    async def _watch(self, watch: Any) -> None:
        async with watch:
            async for event in watch:
                if event.value is not None:
                    self.watched.append(int(event.value))
                    self.watch_moved.set()

    async def _lock(self) -> None:
        lock = AsyncLeasedLock(self.client, f"{self.ns}/lock", lease=4.0, auto_renew=True)
        last: Any = None
        try:
            await lock.acquire(timeout=DEADLINE)
        except Exception as exc:
            self.tally.failed("lock acquire", exc)
            return
        try:
            while not self.stop.is_set():
                if lock.held:
                    token = lock.fencing_token
                    if last is not None and token < last:
                        self.tally.backwards.append(f"fencing token {token} after {last}")
                    if last is None or token > last:
                        self.tokens.append(token)
                    last = token
                elif not self.stop.is_set():
                    try:  # lost (a lease ran out under a long fault): take it again, with a newer token
                        await lock.acquire(timeout=DEADLINE)
                    except Exception as exc:
                        self.tally.failed("lock re-acquire", exc)
                await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await lock.release()

    async def _contender(self) -> None:
        """Another process's try on the same lock, on a link without toxics: never granted while ours holds."""
        lock = AsyncLeasedLock(self.direct, f"{self.ns}/lock", lease=1.0)
        while not self.stop.is_set():
            try:
                token = await lock.try_acquire()
            except Exception as exc:
                self.tally.failed("contender try_acquire", exc)
                token = None
            if token is not None:
                if self.tokens and token <= self.tokens[-1]:
                    self.tally.two_holders.append(f"contender granted {token} after {self.tokens[-1]}")
                self.tokens.append(token)
                with contextlib.suppress(Exception):
                    await lock.release()
            await asyncio.sleep(0.2)

    def _twin(self) -> None:
        with StateStoreClient.from_url(self.url, timeout=DEADLINE) as twin:
            last = 0
            for n in itertools.count(1):
                if self.thread_stop.is_set():
                    return
                try:
                    twin.set(f"{self.ns}/twin", b"%d" % n)
                    self.twin_acked = n
                    entry = twin.get(f"{self.ns}/twin")
                except Exception as exc:
                    self.tally.failed("blocking twin", exc)
                    continue
                finally:
                    self.tally.calls += 1
                value = int(entry.value) if entry is not None else 0
                if value < last or value < n:
                    self.tally.backwards.append(f"twin read {value} after writing {n}")
                last = value
                time.sleep(0.005)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _latency(client: AsyncStateStoreClient, key: str) -> float:
    start = time.monotonic()
    await client.get(key, timeout=DEADLINE)
    return time.monotonic() - start


async def _steady(client: AsyncStateStoreClient, key: str, samples: int = 30) -> float:
    times = [await _latency(client, key) for _ in range(samples)]
    return statistics.median(times)


async def _recovery(client: AsyncStateStoreClient, key: str, steady: float, removed: float) -> float:
    """Seconds from the toxic's removal until three probes in a row are back at the steady latency."""
    bound = max(steady * 4, 0.02)
    streak = 0
    while True:
        took = await _latency(client, key)
        streak = streak + 1 if took <= bound else 0
        if streak == 3:
            return time.monotonic() - removed
        if time.monotonic() - removed > DEADLINE:
            return float("inf")


@pytest.fixture
async def client_link(store: Store) -> AsyncIterator[FaultProxy]:
    async with FaultProxy((store.broker.host, store.broker.port)) as link:
        yield link


@pytest.mark.parametrize(("case", "where"), list(_params()))
async def test_toxic(case: Case, where: str, store: Store, client_link: FaultProxy) -> None:
    ns = f"tox{uuid.uuid4().hex[:8]}"
    links = {"client": [client_link], "emulator": [store.emulator_link], "both": [client_link, store.emulator_link]}
    url = f"{client_link.url}?keepalive={KEEPALIVE}"
    direct_url = f"mqtt://{store.broker.host}:{store.broker.port}"
    async with (
        AsyncStateStoreClient.from_url(url, timeout=DEADLINE) as client,
        AsyncStateStoreClient.from_url(direct_url, timeout=DEADLINE) as direct,
    ):
        probe = f"{ns}/probe"
        await client.set(probe, b"p")
        work = Workload(client, direct, client_link.url, ns)
        await work.start()
        steady = await _steady(client, probe)
        tasks_before, fds_before = len(asyncio.all_tasks()), _open_fds()
        for link in links[where]:
            for type_, stream, attributes in case.toxics:
                link.add_toxic(type_, stream=stream, name=f"{case.name}-{stream}", **attributes)
        try:
            if case.name == "slow_close":  # it acts on closes: make some, mid-load
                for _ in range(3):
                    await asyncio.sleep(case.seconds / 4)
                    for link in links[where]:
                        link.cut(0.1)
            await asyncio.sleep(case.seconds)
        finally:
            for link in links[where]:
                link.reset()
        removed = time.monotonic()
        if client.state is ConnectionState.FAILED:  # stopped for good: nothing to wait for
            await work.abandon()
            pytest.fail(f"the client stopped for good under {case.name}: {client._keeper.failure!r}")
        recovery = await _recovery(client, probe, steady, removed)
        await asyncio.sleep(0.5)  # a little load on the healed link
        await work.finish()
        await asyncio.sleep(0.2)
        tasks_after, fds_after = len(asyncio.all_tasks()), _open_fds()
        final = work.watch_written
        async with asyncio.timeout(10):
            while not work.watched or work.watched[-1] != final:
                work.watch_moved.clear()
                await work.watch_moved.wait()
        work.tasks[4].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work.tasks[4]
        # every acknowledged write is there
        d: AsyncStateStoreDict[int] = AsyncStateStoreDict(direct, namespace=ns)
        assert await d.get("counter", 0) >= work.dict_acked
        twin = await direct.get(f"{ns}/twin")
        assert twin is not None and int(twin.value) >= work.twin_acked
        tally = work.tally
        print(
            f"\n{case.name} on {where} for {case.seconds:.0f} s: {tally.calls} calls, {len(tally.failures)} failed, "
            f"{len(tally.backwards)} backwards, steady {steady * 1000:.2f} ms, recovery {recovery:.3f} s, "
            f"{client.reconnects} reconnects, watch {len(work.watched)} values ending {work.watched[-1]}, "
            f"{len(work.tokens)} tokens, tasks {tasks_before}->{tasks_after}, fds {fds_before}->{fds_after}"
        )
        assert tally.failures == [], tally.failures[:5]
        assert tally.backwards == [], tally.backwards[:5]
        assert tally.two_holders == [], tally.two_holders[:5]
        assert all(b > a for a, b in itertools.pairwise(work.watched)), "watch values out of order"
        assert all(b > a for a, b in itertools.pairwise(work.tokens)), "fencing tokens not increasing"
        assert recovery <= RECOVERY_BOUND, f"{recovery:.3f} s to steady latency after the toxic was removed"
        assert tasks_after <= tasks_before + 2 and fds_after <= fds_before + 4
