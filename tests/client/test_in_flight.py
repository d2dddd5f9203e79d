"""The bound on a client's requests awaiting an answer (``max_in_flight``): past it callers wait their turn, within
their own deadline, and a burst of thousands is all answered by a broker with its default queue limits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping.client._in_flight import DEFAULT_MAX_IN_FLIGHT, InFlightGate
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import ConfigurationError, LockError, RequestTimeoutError
from sskv_mapping.lock import AsyncLeasedLock
from tests._support.broker_stats import FAST_SYS, dropped_messages, log_reports_drops
from tests._support.procs import start_emulator
from tests._support.waiting import eventually

# -- the gate itself --------------------------------------------------------------------------------------


async def test_the_gate_admits_at_most_its_limit_first_come_first_served() -> None:
    gate = InFlightGate(3)
    holding = 0
    peak = 0
    order: list[int] = []
    release = asyncio.Event()

    async def user(i: int) -> None:
        nonlocal holding, peak
        assert await gate.enter(None)
        try:
            holding += 1
            peak = max(peak, holding)
            order.append(i)
            await release.wait()
            holding -= 1
        finally:
            gate.leave()

    tasks = [asyncio.create_task(user(i)) for i in range(10)]
    await eventually(lambda: len(order) == 3)
    assert gate.in_flight == 3 and gate.waiting == 7
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 3
    assert order == list(range(10))
    assert gate.in_flight == 0 and gate.waiting == 0 and gate.waited == 7


async def test_a_waiter_that_times_out_or_is_cancelled_holds_no_slot() -> None:
    gate = InFlightGate(1)
    assert gate.try_enter()
    loop = asyncio.get_running_loop()
    assert await gate.enter(loop.time() + 0.01) is False  # the deadline passed: no slot
    waiter = asyncio.create_task(gate.enter(None))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.waiting == 0
    gate.leave()
    assert gate.in_flight == 0
    assert gate.try_enter()  # nothing lingers in the queue


async def test_a_slot_handed_to_a_waiter_cancelled_at_that_moment_is_passed_on() -> None:
    gate = InFlightGate(1)
    assert gate.try_enter()
    first = asyncio.create_task(gate.enter(None))
    second = asyncio.create_task(gate.enter(None))
    await asyncio.sleep(0)
    gate.leave()  # the slot goes to `first`...
    first.cancel()  # ...which is cancelled before it runs: the slot must reach `second`
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second is True
    assert gate.in_flight == 1
    gate.leave()
    assert gate.in_flight == 0


def test_max_in_flight_is_a_positive_int_with_a_documented_default() -> None:
    assert AsyncStateStoreClient("127.0.0.1", 1).in_flight.limit == DEFAULT_MAX_IN_FLIGHT == 256
    for bad in (0, -1, 1.5, True, "8", None):
        with pytest.raises(ConfigurationError, match="max_in_flight"):
            AsyncStateStoreClient("127.0.0.1", 1, max_in_flight=bad)  # type: ignore[arg-type]


# -- over real processes ----------------------------------------------------------------------------------


async def test_a_call_past_the_bound_waits_and_times_out_naming_its_verb_with_nothing_sent(
    stack: Any, stack_url: tuple[str, int]
) -> None:
    host, port = stack_url
    async with AsyncStateStoreClient(host, port, max_in_flight=2, timeout=30) as client:
        await client.set("k", b"v")
        stack.emulator.pause()  # the two calls below hold both slots, unanswered
        try:
            holders = [asyncio.create_task(client.get("k")) for _ in range(2)]
            await eventually(lambda: client.in_flight.in_flight == 2 and client.requests_sent == 3)
            sent = client.requests_sent
            with pytest.raises(RequestTimeoutError, match=r"SET not sent: no slot within 0\.3 s.*max_in_flight=2"):
                await client.set("k", b"w", timeout=0.3)
            assert client.requests_sent == sent  # the timed-out call sent nothing
            assert client.in_flight.waited == 1
        finally:
            stack.emulator.resume()
        assert [e.value for e in await asyncio.gather(*holders) if e is not None] == [b"v", b"v"]
        assert client.in_flight.in_flight == 0
        entry = await client.get("k")
        assert entry is not None and entry.value == b"v"


async def test_5000_concurrent_gets_are_all_answered_with_nothing_dropped_by_an_untuned_broker() -> None:
    """mosquitto with its default queue limits (20 in flight + 1,000 queued per session): before the bound,
    110-1,021 of these gets were dropped by the broker and failed after their timeout."""
    with MosquittoBroker(extra_config=[FAST_SYS]) as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with AsyncStateStoreClient(broker.host, broker.port, timeout=60) as client:
                await client.set("burst", b"x")
                peak = 0

                async def get(i: int) -> bytes | None:
                    nonlocal peak
                    peak = max(peak, client.in_flight.in_flight)
                    entry = await client.get("burst" if i % 2 else f"absent-{i}")
                    return None if entry is None else entry.value

                results = await asyncio.gather(*(get(i) for i in range(5000)))
                assert results == [b"x" if i % 2 else None for i in range(5000)]
                assert peak <= client.in_flight.limit
                assert client.in_flight.waited > 0  # the bound was reached, and waited on
            assert await dropped_messages(broker) == 0
            assert not log_reports_drops(broker)
        finally:
            with contextlib.suppress(Exception):
                emulator.stop()


# -- honest errors ----------------------------------------------------------------------------------------


async def test_a_lost_request_in_a_lock_acquisition_is_a_request_timeout_naming_its_verb_not_a_lock_timeout(
    stack: Any, stack_url: tuple[str, int]
) -> None:
    """``RequestTimeoutError`` is a ``TimeoutError``: the lock's own timeout must not swallow it as its own."""
    host, port = stack_url
    async with AsyncStateStoreClient(host, port, timeout=0.5) as client:
        lock = AsyncLeasedLock(client, "lost-request-lock", lease=5)
        stack.emulator.pause()  # the SET NX of the acquisition gets no answer
        try:
            with pytest.raises(RequestTimeoutError, match="no response to SET") as caught:
                await lock.acquire(timeout=30)
            assert not isinstance(caught.value, LockError)
        finally:
            stack.emulator.resume()
        await client.wait_connected(10)
        token = await lock.acquire(timeout=10)  # the service is back: the lock works
        assert token is not None
        await lock.release()


async def test_a_failed_keynotify_stop_is_logged_at_warning(
    stack: Any, stack_url: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    host, port = stack_url
    async with AsyncStateStoreClient(host, port, timeout=0.5) as client:
        sub = await client.subscribe_key("watched", lambda event: None)
        stack.emulator.pause()
        try:
            with caplog.at_level(logging.WARNING, "sskv_mapping"):
                await sub.close()
        finally:
            stack.emulator.resume()
    stops = [r for r in caplog.records if "KEYNOTIFY STOP" in r.getMessage()]
    assert stops and all(r.levelno == logging.WARNING for r in stops)
    assert "may linger" in stops[0].getMessage()
