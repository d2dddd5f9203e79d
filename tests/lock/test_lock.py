"""Leased locks and fencing tokens (docs/design/protocol.md §6), on the loopback store and over a broker + emulator."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sskv_mapping import (
    FencingTokenLowerVersionError,
    FencingTokenRequiredError,
    LockError,
)
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.lock import AsyncLeasedLock
from tests._support.waiting import eventually


def unique(prefix: str = "lock") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_try_acquire_contention_and_release(client: AsyncStateStoreClient, other: AsyncStateStoreClient) -> None:
    name = unique()
    mine = AsyncLeasedLock(client, name, lease=10)
    theirs = AsyncLeasedLock(other, name, lease=10)
    token = await mine.try_acquire()
    assert token is not None and mine.held and mine.fencing_token == token
    assert await theirs.try_acquire() is None
    assert await theirs.holder_of() == mine.holder
    assert await theirs.release() is False  # VDEL with the wrong holder value deletes nothing
    assert await mine.release() is True
    assert not mine.held
    token2 = await theirs.try_acquire()
    assert token2 is not None and token2 > token  # every grant is strictly newer


async def test_renew_keeps_the_lock_and_gives_a_newer_token(client: AsyncStateStoreClient) -> None:
    lock = AsyncLeasedLock(client, unique(), lease=5)
    first = await lock.try_acquire()
    assert first is not None
    renewed = await lock.renew()
    assert renewed > first and lock.fencing_token == renewed
    await lock.release()


async def test_blocking_acquire_wakes_on_release_not_polling(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    name = unique()
    holder = AsyncLeasedLock(client, name, lease=30)
    waiter = AsyncLeasedLock(other, name, lease=30)
    await holder.try_acquire()
    sent_before = other.requests_sent
    acquiring = asyncio.ensure_future(waiter.acquire(timeout=10))
    # the waiter tries (SET NEX), registers its watch (KEYNOTIFY) and tries again (SET NEX)...
    await eventually(lambda: other.requests_sent >= sent_before + 3)
    # ...then sends nothing while the lock stays held: time passing is the point of this sleep
    await asyncio.sleep(0.3)
    assert other.requests_sent == sent_before + 3
    assert not acquiring.done()
    await holder.release()
    token = await acquiring
    assert waiter.held and token == waiter.fencing_token
    await waiter.release()


async def test_an_uncontended_acquire_is_one_round_trip(client: AsyncStateStoreClient) -> None:
    lock = AsyncLeasedLock(client, unique(), lease=30)
    sent_before = client.requests_sent
    await lock.acquire(timeout=10)
    assert client.requests_sent == sent_before + 1  # SET NEX only: no watch for a lock nobody holds
    assert lock.name not in client.watched_keys
    await lock.release()


async def test_acquire_times_out_with_lock_error(client: AsyncStateStoreClient, other: AsyncStateStoreClient) -> None:
    name = unique()
    await AsyncLeasedLock(client, name, lease=30).try_acquire()
    with pytest.raises(LockError):
        await AsyncLeasedLock(other, name, lease=30).acquire(timeout=0.3)
    assert name.encode() not in other.watched_keys  # the watch was cleaned up


async def test_lease_expiry_lets_the_next_holder_in(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    name = unique()
    short = AsyncLeasedLock(client, name, lease=0.3)
    await short.try_acquire()
    waiter = AsyncLeasedLock(other, name, lease=5)
    token = await waiter.acquire(timeout=10)  # woken by the expiry's DELETE notification
    assert token is not None and waiter.held
    await waiter.release()


async def test_paused_former_holder_is_fenced_out(client: AsyncStateStoreClient, other: AsyncStateStoreClient) -> None:
    """A holder that was paused past its lease writes with its old token and is rejected."""
    name, protected = unique(), unique("protected")
    now = [0.0]
    stale = AsyncLeasedLock(client, name, lease=0.3, monotonic=lambda: now[0])
    await stale.try_acquire()
    old_token = stale.fencing_token
    await stale.set(protected, b"from the first holder")
    # ...the first holder is paused; its lease runs out; another client takes over and writes
    fresh = AsyncLeasedLock(other, name, lease=10)
    await fresh.acquire(timeout=10)
    await fresh.set(protected, b"from the second holder")
    # the paused holder wakes up believing (by its stopped clock) it still holds the lock
    assert stale.held
    with pytest.raises(FencingTokenLowerVersionError):
        await client.set(protected, b"stale write", fencing_token=old_token)
    with pytest.raises(FencingTokenLowerVersionError):
        await stale.set(protected, b"stale write via the lock")
    with pytest.raises(FencingTokenRequiredError):
        await client.set(protected, b"unfenced write")
    entry = await client.get(protected)
    assert entry is not None and entry.value == b"from the second holder"
    await fresh.release()


async def test_lock_never_fails_open(client: AsyncStateStoreClient) -> None:
    now = [100.0]
    lock = AsyncLeasedLock(client, unique(), lease=1, monotonic=lambda: now[0])
    with pytest.raises(LockError):
        _ = lock.fencing_token  # never acquired
    await lock.try_acquire()
    now[0] += 1.5  # our own clock says the lease ran out
    assert not lock.held
    with pytest.raises(LockError):
        await lock.set(unique(), b"x")
    await lock.release()


async def test_auto_renew_keeps_the_lock_past_its_lease(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    name = unique()
    lock = AsyncLeasedLock(client, name, lease=0.4, auto_renew=True)
    first = await lock.try_acquire()
    assert first is not None
    renewed = asyncio.Event()
    # watch the lock key: each renewal is a SET; seeing two proves it is renewed past one lease
    sets: list[object] = []

    def on_event(ev: object) -> None:
        sets.append(ev)
        if len(sets) >= 2:
            renewed.set()

    sub = await other.subscribe_key(name, on_event)
    try:
        await asyncio.wait_for(renewed.wait(), 5)
        assert await AsyncLeasedLock(other, name, lease=1).try_acquire() is None
        assert lock.held and lock.fencing_token > first
    finally:
        await sub.close()
        await lock.release()


async def test_context_manager_acquires_and_releases(client: AsyncStateStoreClient) -> None:
    name = unique()
    async with AsyncLeasedLock(client, name, lease=5) as lock:
        assert lock.held
        assert await lock.holder_of() == lock.holder
    assert await client.get(name) is None
