"""A lock whose key is deleted under it (a dict's ``clear()`` of a namespace its name is in, ``sskv del``) is lost,
not silently re-taken by its renewal; and two clients of one process cannot hold one lock under one holder value."""

from __future__ import annotations

import uuid

import pytest

from sskv_mapping import LockError
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.lock import AsyncLeasedLock
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support.waiting import eventually


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


async def test_a_dict_clear_that_deletes_a_lock_key_makes_its_holder_lose_it(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    ns = unique("cfg")
    lock = AsyncLeasedLock(client, f"{ns}/job-lock", lease=30)
    token = await lock.try_acquire()
    assert token is not None and lock.held
    d: AsyncStateStoreDict[object] = AsyncStateStoreDict(other, namespace=ns, local_cache_size=0)
    await d.set("a", 1)
    await d.clear()  # the lock key is a key of the namespace: cleared with it
    assert await other.get(f"{ns}/job-lock") is None
    with pytest.raises(LockError, match="deleted"):
        await lock.renew()
    assert not lock.held
    with pytest.raises(LockError, match="lost"):
        lock.fencing_token  # noqa: B018 - raises
    assert await other.get(f"{ns}/job-lock") is None  # the renewal did not take it again
    second = AsyncLeasedLock(other, f"{ns}/job-lock", lease=30)
    assert await second.try_acquire() is not None
    with pytest.raises(LockError, match="lost"):
        await lock.renew()  # and later renewals do not take it over
    assert await second.holder_of() == second.holder
    assert await lock.release() is False  # VDEL of our value deletes nothing of the new holder's
    assert await second.release() is True


async def test_an_auto_renewed_lock_notices_the_deletion_at_its_next_renewal(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    name = unique("lostkey") + "/lock"
    lock = AsyncLeasedLock(client, name, lease=3, auto_renew=True, renew_fraction=0.1)
    assert await lock.try_acquire() is not None
    assert await other.delete(name)
    await eventually(lambda: not lock.held, 10)  # within one renewal interval (0.3 s), not the lease (3 s)
    assert await other.get(name) is None
    await lock.release()


async def test_another_value_in_the_key_is_a_loss_at_renewal(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    name = unique("taken") + "/lock"
    lock = AsyncLeasedLock(client, name, lease=30)
    assert await lock.try_acquire() is not None
    await other.set(name, b"someone else")
    with pytest.raises(LockError, match="someone else"):
        await lock.renew()
    assert not lock.held
    entry = await other.get(name)
    assert entry is not None and entry.value == b"someone else"


async def test_two_clients_cannot_hold_one_lock_under_one_holder_value(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    name = unique("shared")
    mine = AsyncLeasedLock(client, name, holder="h", lease=30)
    theirs = AsyncLeasedLock(other, name, holder="h", lease=30)
    assert await mine.try_acquire() is not None
    sent = other.requests_sent
    with pytest.raises(LockError, match="same holder value"):
        await theirs.try_acquire()
    with pytest.raises(LockError, match="same holder value"):
        await theirs.acquire(timeout=5)
    assert other.requests_sent == sent  # refused before sending anything
    assert not theirs.held and mine.held
    assert await mine.release() is True
    assert await theirs.try_acquire() is not None  # free again: the other client may take it
    with pytest.raises(LockError, match="same holder value"):
        await mine.try_acquire()
    assert await theirs.release() is True


async def test_one_client_may_share_a_lease_under_one_holder_value(client: AsyncStateStoreClient) -> None:
    """Lock objects of one client given one value are one holder (SET NEX): the second renews the same lease."""
    name = unique("same")
    first = AsyncLeasedLock(client, name, holder="h", lease=30)
    again = AsyncLeasedLock(client, name, holder="h", lease=30)
    one = await first.try_acquire()
    two = await again.try_acquire()
    assert one is not None and two is not None and two > one
    assert await again.release() is True
