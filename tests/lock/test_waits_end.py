"""Every wait ends (issue 27, point 2): a closed client ends each wait that only a notification would end -- a lock's,
an election's, ``get_or_set``'s, a watch's -- with ``ClientStateError`` at once, with or without a timeout.

Over a real mosquitto and the emulator process. The blocking cases close the client from another thread than the
waiter's, as an application shutting down does; each waits on the waiter's outcome with a generous deadline.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sskv_mapping import (
    AsyncLeaderElection,
    AsyncStateStoreCache,
    AsyncStateStoreClient,
    ClientStateError,
    ConnectionLostError,
    ConnectionState,
    LeaderElection,
    LeasedLock,
    StateStoreClient,
)
from sskv_mapping.lock import AsyncLeasedLock
from tests._support.miniclient import MiniClient
from tests._support.waiting import eventually, eventually_sync

#: how long a waiter may take to notice its client closed: generous (a loaded machine), not a measurement
DEADLINE = 10.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def parked(client: AsyncStateStoreClient, sent_before: int, requests: int = 3) -> Callable[[], bool]:
    """True once a waiter has sent its ``requests`` (SET NEX, KEYNOTIFY, SET NEX) and had every answer: from
    then on it waits for a notification alone (the loop runs its step to that wait before anything else)."""
    return lambda: client.requests_sent >= sent_before + requests and client.in_flight.in_flight == 0


class Outcome:
    """What a call made in its own thread ended with, waited for with a deadline (never a sleep)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:
            self.error = exc
        finally:
            self._done.set()

    def wait(self) -> BaseException | None:
        assert self._done.wait(DEADLINE), f"the call still waits {DEADLINE} s after its client was closed"
        self._thread.join(DEADLINE)
        return self.error


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["no-timeout", "timeout"])
def test_blocking_acquire_ends_when_its_client_is_closed_from_another_thread(
    broker_address: tuple[str, int], timeout: float | None
) -> None:
    name = unique("lock")
    with StateStoreClient(*broker_address) as holder_client:
        holder = LeasedLock(holder_client, name, lease=30)
        assert holder.try_acquire() is not None
        waiter_client = StateStoreClient(*broker_address)
        waiter_client.connect()
        waiter = LeasedLock(waiter_client, name, lease=30)
        sent = waiter_client.async_client.requests_sent
        outcome = Outcome(lambda: waiter.acquire(timeout=timeout))
        eventually_sync(parked(waiter_client.async_client, sent), timeout=DEADLINE)
        waiter_client.close()
        error = outcome.wait()
        assert isinstance(error, ClientStateError), repr(error)
        assert "closed" in str(error) and "timed out" not in str(error)
        assert holder.held and holder.release()


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["no-timeout", "timeout"])
def test_blocking_campaign_ends_when_its_client_is_closed_from_another_thread(
    broker_address: tuple[str, int], timeout: float | None
) -> None:
    name = unique("election")
    with StateStoreClient(*broker_address) as leader_client:
        leader = LeaderElection(leader_client, name, candidate="leader", term=30)
        leader.campaign(timeout=DEADLINE)
        candidate_client = StateStoreClient(*broker_address)
        candidate_client.connect()
        candidate = LeaderElection(candidate_client, name, candidate="candidate", term=30)
        sent = candidate_client.async_client.requests_sent
        outcome = Outcome(lambda: candidate.campaign(timeout=timeout))
        eventually_sync(parked(candidate_client.async_client, sent), timeout=DEADLINE)
        candidate_client.close()
        error = outcome.wait()
        assert isinstance(error, ClientStateError), repr(error)
        assert leader.is_leader and leader.resign()


async def test_async_acquire_and_campaign_end_when_the_client_closes(broker_address: tuple[str, int]) -> None:
    lock_name, election_name = unique("lock"), unique("election")
    async with AsyncStateStoreClient(*broker_address) as holder_client:
        await AsyncLeasedLock(holder_client, lock_name, lease=30).acquire(timeout=DEADLINE)
        await AsyncLeaderElection(holder_client, election_name, candidate="leader", term=30).campaign(DEADLINE)
        waiter_client = AsyncStateStoreClient(*broker_address)
        await waiter_client.connect()
        sent = waiter_client.requests_sent
        acquiring = asyncio.ensure_future(AsyncLeasedLock(waiter_client, lock_name, lease=30).acquire())
        campaigning = asyncio.ensure_future(
            AsyncLeaderElection(waiter_client, election_name, candidate="c", term=30).campaign(timeout=600)
        )
        await eventually(parked(waiter_client, sent, requests=6), DEADLINE)
        await waiter_client.close()
        async with asyncio.timeout(DEADLINE):
            results = await asyncio.gather(acquiring, campaigning, return_exceptions=True)
        assert [type(r) for r in results] == [ClientStateError, ClientStateError], results
        # an acquire begun on a client already closed ends at once too
        with pytest.raises(ClientStateError):
            async with asyncio.timeout(DEADLINE):
                await AsyncLeasedLock(waiter_client, lock_name, lease=30).acquire()


async def test_acquire_ends_when_the_connection_is_lost_for_good(broker_address: tuple[str, int]) -> None:
    """With ``reconnect=False`` a dropped connection is final: no notification will come, so the wait ends with
    ConnectionLostError. The drop is real: another connection takes our client id at the broker."""
    host, port = broker_address
    name = unique("lock")
    async with AsyncStateStoreClient(host, port) as holder_client:
        await AsyncLeasedLock(holder_client, name, lease=30).acquire(timeout=DEADLINE)
        client = AsyncStateStoreClient(host, port, reconnect=False)
        await client.connect()
        try:
            sent = client.requests_sent
            acquiring = asyncio.ensure_future(AsyncLeasedLock(client, name, lease=30).acquire())
            await eventually(parked(client, sent), DEADLINE)
            async with MiniClient(host, port, client_id=client.client_id):  # the broker drops our connection
                async with asyncio.timeout(DEADLINE):
                    with pytest.raises(ConnectionLostError, match="for good"):
                        await acquiring
            assert client.state is ConnectionState.DISCONNECTED
        finally:
            await client.close()


async def test_a_watch_iteration_ends_with_client_state_error_when_the_client_closes(
    broker_address: tuple[str, int],
) -> None:
    key = unique("watched")
    client = AsyncStateStoreClient(*broker_address)
    await client.connect()
    watch = await client.watch(key).start()

    async def first_event() -> object:
        return await watch.__anext__()

    waiting = asyncio.ensure_future(first_event())
    await client.close()
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(ClientStateError, match="closed"):
            await waiting
    with pytest.raises(ClientStateError):  # and every later call says so, it does not wait
        async with asyncio.timeout(DEADLINE):
            await watch.__anext__()


async def test_a_watch_iteration_ends_when_the_connection_is_lost_for_good(broker_address: tuple[str, int]) -> None:
    host, port = broker_address
    key = unique("watched")
    client = AsyncStateStoreClient(host, port, reconnect=False)
    await client.connect()
    try:
        watch = await client.watch(key).start()
        waiting = asyncio.ensure_future(watch.__anext__())
        async with MiniClient(host, port, client_id=client.client_id):  # the broker drops our connection
            async with asyncio.timeout(DEADLINE):
                with pytest.raises(ConnectionLostError, match="for good"):
                    await waiting
        with pytest.raises(ConnectionLostError):  # and every later call says so, it does not wait
            async with asyncio.timeout(DEADLINE):
                await watch.__anext__()
    finally:
        await client.close()


async def test_observe_ends_with_client_state_error_when_the_client_closes(broker_address: tuple[str, int]) -> None:
    client = AsyncStateStoreClient(*broker_address)
    await client.connect()
    election = AsyncLeaderElection(client, unique("election"), candidate="c", term=30)
    with pytest.raises(ClientStateError):
        async with asyncio.timeout(DEADLINE), election.observe() as changes:
            async for change in changes:
                assert change.leader is None  # the first reading; then the client closes under the wait
                await client.close()


async def test_a_get_or_set_waiter_ends_when_the_client_closes_under_it(broker_address: tuple[str, int]) -> None:
    """One caller computes a key's value (its builder waits on a gate); a second waits on that flight. Closing the
    client ends the second's wait at once, with ClientStateError, though the builder is still running."""
    client = AsyncStateStoreClient(*broker_address)
    await client.connect()
    cache: AsyncStateStoreCache[str] = AsyncStateStoreCache(client, namespace=unique("c"))
    await cache.open()
    gate = asyncio.Event()
    building = asyncio.Event()

    async def build() -> str:
        building.set()
        await gate.wait()
        return "built"

    leader = asyncio.ensure_future(cache.get_or_set("k", build))
    await asyncio.wait_for(building.wait(), DEADLINE)
    misses = cache.stats().misses
    follower = asyncio.ensure_future(cache.get_or_set("k", lambda: "follower's"))
    await eventually(lambda: cache.stats().misses > misses, DEADLINE)  # it found the flight and waits on it
    await client.close()
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(ClientStateError):
            await follower
    gate.set()
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(ClientStateError):  # the leader cannot store its value on a closed client
            await leader
