"""The ``statestore`` fixture of our pytest plugin, used as a user's suite uses it: time travel without sleeps
(PX expiry, a lock's lease and its fencing tokens, ``max_staleness``), clients of both kinds on one store, and
the faces in the test's own namespace."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from sskv_mapping import KeyOperation
from sskv_mapping.errors import LockError
from sskv_mapping.testing import FakeClock

if TYPE_CHECKING:
    from sskv_mapping.testing import InProcessStore


def test_a_key_with_px_expires_when_the_clock_passes_it(statestore: InProcessStore) -> None:
    client = statestore.client
    client.set("session", b"alive", ttl=2.0)
    statestore.advance(1.999)
    entry = client.get("session")
    assert entry is not None and entry.value == b"alive"
    statestore.advance(0.001)
    assert client.get("session") is None
    assert statestore.core.entry(b"session") is None


def test_expiry_deletes_the_key_from_the_store_itself_not_only_from_reads(statestore: InProcessStore) -> None:
    statestore.client.set("a", b"1", ttl=1.0)
    statestore.client.set("b", b"2")
    due = statestore.core.next_expiry()
    assert due is not None
    statestore.advance(1.0)
    # the server's expiry timer ran on the advanced clock: nothing left to expire, no request needed
    assert statestore.core.next_expiry() is None


def test_a_lapsed_lease_lets_a_second_holder_in_with_a_higher_fencing_token(statestore: InProcessStore) -> None:
    first = statestore.lock("orders", lease=10.0)
    second = statestore.lock("orders", lease=10.0, client=statestore.new_client())
    token_a = first.try_acquire()
    assert token_a is not None and first.held
    assert second.try_acquire() is None  # held, and the lease has not run out
    statestore.advance(9.9)
    assert first.held and second.try_acquire() is None
    statestore.advance(0.1)
    assert not first.held  # by its own clock, the fixture's
    with pytest.raises(LockError):
        _ = first.fencing_token
    token_b = second.try_acquire()
    assert token_b is not None and token_b > token_a
    assert statestore.client.get("orders") is not None


def test_the_dict_revalidates_an_entry_after_max_staleness_on_the_fixture_clock(statestore: InProcessStore) -> None:
    config = statestore.dict(max_staleness=30.0)
    config["flag"] = True
    broker = statestore.broker
    assert config["flag"] is True
    before = broker.published
    assert config["flag"] is True  # a local cache hit: no request
    statestore.advance(29.0)
    assert config["flag"] is True
    assert broker.published == before
    statestore.advance(2.0)
    assert config["flag"] is True  # past max_staleness: asked the store again
    assert broker.published > before


def test_the_faces_use_the_tests_namespace(statestore: InProcessStore, statestore_namespace: str) -> None:
    assert statestore.namespace == statestore_namespace
    statestore.dict()["k"] = "v"
    statestore.cache().set("c", 1)
    assert statestore.client.get(f"{statestore_namespace}/k") is not None
    keys = statestore.core.keys()
    assert len(keys) >= 2 and all(key.startswith(statestore_namespace.encode()) for key in keys), keys


async def test_an_async_client_on_the_tests_loop_shares_the_store_with_blocking_ones(
    statestore: InProcessStore,
) -> None:
    async with statestore.async_client() as client:
        await client.set("from-async", b"1")
        assert statestore.client.get("from-async") is not None
        statestore.client.set("from-blocking", b"2", ttl=5.0)
        entry = await client.get("from-blocking")
        assert entry is not None and entry.value == b"2"
        statestore.advance(5.0)
        assert await client.get("from-blocking") is None


def test_each_test_gets_a_fresh_store(statestore: InProcessStore) -> None:
    # the other tests wrote "from-async", "session", "a"...: none of it is here
    assert statestore.client.get("from-async") is None
    assert statestore.client.get("a") is None


def test_the_clock_only_moves_forward() -> None:
    clock = FakeClock(wall_ms=1_000, monotonic=5.0)
    clock.advance(0.25)
    assert (clock.wall_ms(), clock.monotonic()) == (1_250, 5.25)
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)
    assert (clock.wall_ms(), clock.monotonic()) == (1_250, 5.25)


async def test_a_watch_on_the_tests_loop_hears_a_blocking_write_and_the_expiry(statestore: InProcessStore) -> None:
    async with statestore.async_client() as client, client.watch("job") as watch:
        statestore.client.set("job", b"queued", ttl=3.0)
        written = await asyncio.wait_for(anext(watch), 5)
        assert written.op == KeyOperation.SET and written.value == b"queued"
        statestore.advance(3.0)
        expired = await asyncio.wait_for(anext(watch), 5)  # the store's expiry timer, woken by the jump
        assert expired.op == KeyOperation.DELETE
