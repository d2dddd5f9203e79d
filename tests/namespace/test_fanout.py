"""The one bounded fan-out (``sskv_mapping._namespace.fanout.gather_bounded``): results in order, never more
than ``limit`` in flight, the first failure raised as itself and the rest cancelled; and ``SharedLoads``, one load
per key that concurrent callers wait for."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Iterator

import pytest

from sskv_mapping._namespace.fanout import BoundedWork, SharedLoads, gather_bounded
from tests._support.waiting import eventually


@pytest.mark.parametrize(("n", "limit"), [(0, 1), (1, 1), (10, 1), (10, 3), (100, 64), (5, 64)])
async def test_order_and_bound(n: int, limit: int) -> None:
    running = 0
    peak = 0
    gate = asyncio.Event()

    async def one(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running >= min(n, limit):
            gate.set()
        await gate.wait()
        running -= 1
        return i * i

    assert await gather_bounded((one(i) for i in range(n)), limit) == [i * i for i in range(n)]
    assert peak == min(n, limit)


async def test_first_failure_is_raised_and_the_rest_cancelled() -> None:
    cancelled = 0
    never = asyncio.Event()

    async def ok() -> int:
        nonlocal cancelled
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return 1

    async def bad() -> int:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await gather_bounded([ok(), ok(), bad()], 8)
    assert cancelled == 2


async def test_a_generator_is_consumed_lazily_by_limit_workers() -> None:
    """10,000 items cost ``limit`` tasks: an awaitable is made only when a worker is free for it."""
    made = 0
    alive = 0
    peak_alive = 0
    tasks_before = len(asyncio.all_tasks())
    peak_tasks = 0

    async def one(i: int) -> int:
        nonlocal alive, peak_alive, peak_tasks
        alive += 1
        peak_alive = max(peak_alive, alive)
        peak_tasks = max(peak_tasks, len(asyncio.all_tasks()) - tasks_before)
        await asyncio.sleep(0)
        alive -= 1
        return i

    def items() -> Iterator[Awaitable[int]]:
        nonlocal made
        for i in range(10_000):
            made += 1
            yield one(i)

    assert await gather_bounded(items(), 8) == list(range(10_000))
    assert made == 10_000
    assert peak_alive <= 8
    assert peak_tasks <= 8


async def test_on_failure_the_items_not_started_are_closed_unawaited() -> None:
    started: list[int] = []

    async def one(i: int) -> None:
        started.append(i)
        if i == 3:
            raise KeyError(i)
        await asyncio.sleep(0)

    pending = [one(i) for i in range(100)]
    with pytest.raises(KeyError):
        await gather_bounded(pending, 4)
    assert len(started) < 100
    # each ran to its end or was closed: no "never awaited"
    assert all(inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in pending)


async def test_bounded_work_runs_a_burst_as_one_task_with_a_bounded_fan_out(caplog: pytest.LogCaptureFixture) -> None:
    running = 0
    peak = 0
    done: list[int] = []
    release = asyncio.Event()

    async def run(i: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await release.wait()
            if i == 7:
                raise RuntimeError("one item fails")
            done.append(i)
        finally:
            running -= 1

    work: BoundedWork[int] = BoundedWork(run, 16, name="test-work")
    tasks_before = len(asyncio.all_tasks())
    work.submit(range(1000))
    work.submit(range(1000, 1010))  # joins the same drain
    await eventually(lambda: running == 16)
    assert len(asyncio.all_tasks()) - tasks_before <= 1 + 16  # the drainer and its workers, not 1,010 tasks
    release.set()
    with caplog.at_level(logging.ERROR, "sskv_mapping"):
        await work.wait()
    assert sorted(done) == [i for i in range(1010) if i != 7]  # a failing item does not stop the rest
    assert peak == 16 and work.done == 1010 and work.pending == 0
    assert "background work on an item failed" in caplog.text
    work.submit([2000])  # a new burst starts a new drain
    await work.wait()
    assert 2000 in done


async def test_bounded_work_cancel_drops_what_is_queued() -> None:
    started: list[int] = []
    never = asyncio.Event()

    async def run(i: int) -> None:
        started.append(i)
        await never.wait()

    work: BoundedWork[int] = BoundedWork(run, 2, name="test-work")
    work.submit(range(100))
    await eventually(lambda: len(started) == 2)
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work.wait()
    assert work.pending == 0 and len(started) == 2


class _Load:
    """A load that counts its runs and waits for ``release`` (set, or given an exception to raise) to end."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.release: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def __call__(self, key: str) -> str:
        self.runs += 1
        self.started.set()
        return f"{key}:{await self.release}"


async def _waiting(loads: SharedLoads[str], key: str, load: _Load, n: int) -> list[asyncio.Task[str | None]]:
    """The first of ``n`` callers of ``key`` is loading and the others wait for it (each ran up to its first wait
    before the load's start wakes this caller: they were queued first)."""
    tasks = [asyncio.ensure_future(loads.run(key, load)) for _ in range(n)]
    await load.started.wait()
    assert not any(t.done() for t in tasks)
    return tasks


async def test_concurrent_callers_share_one_load_and_only_its_caller_gets_the_result() -> None:
    loads: SharedLoads[str] = SharedLoads()
    load = _Load()
    tasks = await _waiting(loads, "k", load, 5)
    assert "k" in loads and "other" not in loads
    load.release.set_result("v")
    assert await asyncio.gather(*tasks) == ["k:v", None, None, None, None]
    assert load.runs == 1
    assert "k" not in loads
    assert await loads.run("k", _ready("again")) == "k:again"  # ended: the next call loads anew


def _ready(value: str) -> _Load:
    load = _Load()
    load.release.set_result(value)
    return load


async def test_a_failed_load_is_raised_to_every_waiter_and_the_next_call_loads_again() -> None:
    loads: SharedLoads[str] = SharedLoads()
    load = _Load()
    tasks = await _waiting(loads, "k", load, 3)
    load.release.set_exception(KeyError("boom"))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(r) for r in results] == [KeyError] * 3
    assert load.runs == 1
    assert await loads.run("k", _ready("v")) == "k:v"


async def test_a_cancelled_load_hands_over_to_one_waiter_and_the_others_wait_for_it() -> None:
    loads: SharedLoads[str] = SharedLoads()
    load = _Load()
    leader, *waiters = await _waiting(loads, "k", load, 3)
    first_release = load.release
    load.release = asyncio.get_running_loop().create_future()  # what the second run waits for
    load.started.clear()
    leader.cancel()
    await load.started.wait()  # a waiter took over: not cancelled itself
    assert first_release.cancelled() and leader.cancelled()
    assert all(not w.done() for w in waiters)
    load.release.set_result("v")
    assert sorted(await asyncio.gather(*waiters), key=str) == [None, "k:v"]
    assert load.runs == 2


async def test_a_cancelled_waiter_leaves_the_load_running() -> None:
    loads: SharedLoads[str] = SharedLoads()
    load = _Load()
    leader, waiter = await _waiting(loads, "k", load, 2)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not leader.done() and "k" in loads
    load.release.set_result("v")
    assert await leader == "k:v"
    assert load.runs == 1
