"""Leader election: one leader at a time, fencing against a former leader, renewal, loss detection by the
leader's own clock, observing, the lock's update helper, and the blocking twin over the broker (its parity with
the async API: tests/test_twins.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from sskv_mapping import AsyncLeaderElection, AsyncLeasedLock, LeaderElection
from sskv_mapping.errors import FencingTokenLowerVersionError, LockError
from tests._support.store_backend import StoreBackend


def position() -> str:
    return f"leader-{uuid.uuid4().hex[:8]}"


async def test_one_leader_and_a_successor_with_a_newer_token(store_backend: StoreBackend) -> None:
    name = position()
    a = AsyncLeaderElection(await store_backend.async_client(), name, term=30, candidate="a")
    b = AsyncLeaderElection(await store_backend.async_client(), name, term=30, candidate="b")
    token_a = await a.campaign(timeout=10)
    assert a.is_leader and a.fencing_token == token_a
    assert await b.try_campaign() is None and not b.is_leader
    assert await b.leader() == "a"
    waiting = asyncio.ensure_future(b.campaign(timeout=10))  # waits on KEYNOTIFY for the resign
    assert await a.resign() is True and not a.is_leader
    token_b = await waiting
    assert b.is_leader and token_b > token_a and await a.leader() == "b"
    await b.resign()
    assert await b.leader() is None


async def test_a_former_leader_is_fenced_out_and_knows_it_lost(store_backend: StoreBackend) -> None:
    name, protected = position(), f"protected-{uuid.uuid4().hex[:8]}"
    now = [0.0]
    lost: list[str] = []
    client_a = await store_backend.async_client()
    a = AsyncLeaderElection(client_a, name, term=0.3, candidate="a", auto_renew=False, monotonic=lambda: now[0])
    a.add_lost_listener(lost.append)
    token_a = await a.campaign(timeout=10)
    await client_a.set(protected, b"from a", fencing_token=token_a)
    now[0] += 0.3  # a's own clock says its term is over (it was paused and did not renew)
    assert not a.is_leader
    with pytest.raises(LockError):
        _ = a.fencing_token
    await asyncio.wait_for(a.lost.wait(), 10)  # the watchdog fired on the term's end
    assert lost and "term" in lost[0]
    b_client = await store_backend.async_client()
    b = AsyncLeaderElection(b_client, name, term=30, candidate="b")
    token_b = await b.campaign(timeout=10)  # the store expired a's lease: b is elected
    await b_client.set(protected, b"from b", fencing_token=token_b)
    with pytest.raises(FencingTokenLowerVersionError):  # a, writing late with its old token, is refused
        await client_a.set(protected, b"late from a", fencing_token=token_a)
    entry = await b_client.get(protected)
    assert entry is not None and entry.value == b"from b"
    await b.resign()


async def test_renewal_keeps_the_leadership_past_the_term(store_backend: StoreBackend) -> None:
    name = position()
    a = AsyncLeaderElection(await store_backend.async_client(), name, term=0.4, candidate="a")
    b = AsyncLeaderElection(await store_backend.async_client(), name, term=0.4, candidate="b")
    first = await a.campaign(timeout=10)
    await asyncio.sleep(1.2)  # three terms: time passing is the point of this test
    assert a.is_leader and a.fencing_token > first  # renewed, each renewal a newer token
    assert await b.try_campaign() is None
    await a.resign()


async def test_a_leader_whose_position_is_taken_reports_the_loss(store_backend: StoreBackend) -> None:
    name = position()
    client = await store_backend.async_client()
    reasons: list[str] = []
    a = AsyncLeaderElection(client, name, term=0.6, candidate="a", on_lost=reasons.append)
    await a.campaign(timeout=10)
    intruder = await store_backend.async_client()
    await intruder.delete(name)  # an operator (or a bug) removes the lease, and another holder takes it
    await intruder.set(name, b"intruder", ttl=30)
    await asyncio.wait_for(a.lost.wait(), 10)  # the next renewal finds another holder
    assert not a.is_leader and reasons and "someone else" in reasons[0]
    await intruder.delete(name)


async def test_observe_reports_each_change_of_leader(store_backend: StoreBackend) -> None:
    name = position()
    a = AsyncLeaderElection(await store_backend.async_client(), name, term=30, candidate="a")
    follower = AsyncLeaderElection(await store_backend.async_client(), name, term=30, candidate="f")
    async with follower.observe() as changes:
        seen = changes.__aiter__()
        assert (await asyncio.wait_for(seen.__anext__(), 10)).leader is None
        await a.campaign(timeout=10)
        assert (await asyncio.wait_for(seen.__anext__(), 10)).leader == "a"
        await a.resign()
        assert (await asyncio.wait_for(seen.__anext__(), 10)).leader is None
        async with follower:
            change = await asyncio.wait_for(seen.__anext__(), 10)
            assert change.leader == "f" and change.version == follower.fencing_token


async def test_lock_update_is_exact_across_clients(store_backend: StoreBackend) -> None:
    name, key = position(), f"counter-{uuid.uuid4().hex[:8]}"

    def plus_one(old: bytes | None) -> bytes:
        return str(int(old or b"0") + 1).encode()

    async def worker() -> None:
        client = await store_backend.async_client()
        for _ in range(5):
            await AsyncLeasedLock(client, name, lease=5).update(key, plus_one, timeout=20)

    await asyncio.gather(*(worker() for _ in range(3)))
    checker = await store_backend.async_client()
    entry = await checker.get(key)
    assert entry is not None and entry.value == b"15"
    lock = AsyncLeasedLock(checker, name, lease=5)
    assert await lock.update(key, lambda old: None, timeout=10) is None  # None deletes the key
    assert await checker.get(key) is None and not lock.held  # and the lock was released


async def test_update_needs_the_leadership(store_backend: StoreBackend) -> None:
    election = AsyncLeaderElection(await store_backend.async_client(), position(), term=30)
    with pytest.raises(LockError):
        await election.update("k", lambda old: b"v")


def test_the_blocking_twin_over_the_broker(mosquitto: Any, emulator: Any) -> None:
    from sskv_mapping import StateStoreClient

    name = position()
    with (
        StateStoreClient(mosquitto.host, mosquitto.port) as ca,
        StateStoreClient(mosquitto.host, mosquitto.port) as cb,
    ):
        with LeaderElection(ca, name, term=30, candidate="a") as a:
            assert a.is_leader and a.leader() == "a"
            b = LeaderElection(cb, name, term=30, candidate="b")
            assert b.try_campaign() is None
            with b.observe() as changes:
                assert next(changes).leader == "a"
                a.resign()
                assert next(changes).leader is None
        b.campaign(timeout=10)
        assert b.is_leader and b.leader() == "b"
        b.resign()
