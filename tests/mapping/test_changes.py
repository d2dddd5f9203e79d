"""``d.changes()`` / ``d.on_change(fn)``: decoded changes of every key of a namespace, on both listing modes.

On the loopback and on mosquitto + the emulator process (``store_backend``); a concurrent writer process and a broker
restart: tests/mapping/test_changes_faults.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreDict, Change, StateStoreDict
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.mapping._listing import ListingMode
from tests._support.store_backend import StoreBackend
from tests._support.waiting import eventually

pytestmark = pytest.mark.parametrize("listing", ["scan", "index"])

FAST_SCAN = 0.05  # seconds: SCAN mode finds another process's new key within about this


@pytest.fixture
async def dicts(store_backend: StoreBackend, namespace: str, listing: ListingMode) -> AsyncIterator[tuple[Any, Any]]:
    """Two dicts on the namespace, each on its own client: ``mine`` reads the changes, ``theirs`` makes them."""
    mine = await AsyncStateStoreDict[Any](
        await store_backend.async_client(), namespace=namespace, listing=listing
    ).open()
    theirs = await AsyncStateStoreDict[Any](
        await store_backend.async_client(), namespace=namespace, listing=listing
    ).open()
    yield mine, theirs
    await mine.close()
    await theirs.close()


async def test_changes_of_known_and_new_keys_written_elsewhere(dicts: tuple[Any, Any]) -> None:
    mine, theirs = dicts
    await theirs.set("known", {"n": 1})
    async with mine.changes(scan_interval=FAST_SCAN) as changes:
        await theirs.set("known", {"n": 2})
        first = await changes.next(timeout=10)
        assert (first.key, first.value, first.deleted) == ("known", {"n": 2}, False)
        assert first.version is not None

        await theirs.set("added", [1, 2])  # a key the stream did not list when it started
        added = await changes.next(timeout=10)
        assert (added.key, added.value) == ("added", [1, 2])

        await theirs.delitem("known")
        gone = await changes.next(timeout=10)
        assert (gone.key, gone.value, gone.deleted) == ("known", None, True)
        assert gone.version is not None and gone.version > first.version

        await mine.set("mine", "x")  # this process's own writes are changes too
        own = await changes.next(timeout=10)
        assert (own.key, own.value) == ("mine", "x")
        assert changes.pending() == 0 and changes.dropped == 0


async def test_a_change_is_reported_once_in_version_order(dicts: tuple[Any, Any]) -> None:
    mine, theirs = dicts
    await theirs.update({"a": 0, "b": 0})
    async with mine.changes(scan_interval=FAST_SCAN) as changes:
        for i in range(1, 21):
            await theirs.set("a", i)
            await theirs.set("b", -i)
        seen: dict[str, list[Any]] = {"a": [], "b": []}
        while seen["a"][-1:] != [20] or seen["b"][-1:] != [-20]:
            change = await changes.next(timeout=10)
            seen[change.key].append(change.value)
        assert seen == {"a": list(range(1, 21)), "b": [-i for i in range(1, 21)]}
        with pytest.raises(TimeoutError):
            await changes.next(timeout=0.2)  # nothing more: each change once


async def test_a_slow_consumer_is_bounded_coalesced_and_told(dicts: tuple[Any, Any]) -> None:
    mine, theirs = dicts
    keys = ["k0", "k1", "k2"]
    await theirs.update(dict.fromkeys(keys, 0))
    async with (
        mine.changes(maxsize=2, scan_interval=FAST_SCAN) as changes,
        mine.changes(maxsize=1000, scan_interval=FAST_SCAN) as witness,
    ):
        for i in range(1, 11):
            for k in keys:
                await theirs.set(k, i)
        total = 10 * len(keys)
        # the feed hands each change to every stream at once: when the roomy one has them all, so has the other
        witnessed = [await witness.next(timeout=10) for _ in range(total)]
        assert [c.value for c in witnessed[-len(keys) :]] == [10] * len(keys)
        assert changes.pending() + changes.dropped == total  # every change queued, waiting or skipped
        assert changes.pending() == 2 + len(keys)  # the queue's two, then one per key: bounded by the keys
        assert changes.overflows == 1 and changes.dropped == total - changes.pending()
        got = [await changes.next(timeout=1) for _ in range(changes.pending())]
        assert [(c.key, c.value, c.coalesced) for c in got[:2]] == [("k0", 1, False), ("k1", 1, False)]
        latest = {c.key: c for c in got[2:]}
        assert {k: c.value for k, c in latest.items()} == dict.fromkeys(keys, 10)
        assert all(c.coalesced for c in latest.values())
        await theirs.set("k0", 11)  # drained: queued again
        after = await changes.next(timeout=10)
        assert (after.key, after.value, after.coalesced) == ("k0", 11, False)


async def test_on_change_calls_a_coroutine_function_and_stops_on_close(dicts: tuple[Any, Any], namespace: str) -> None:
    mine, theirs = dicts
    heard: asyncio.Queue[Change[Any]] = asyncio.Queue()

    async def hear(change: Change[Any]) -> None:
        await heard.put(change)

    stream = await mine.on_change(hear, scan_interval=FAST_SCAN)
    await theirs.set("flag", True)
    change = await asyncio.wait_for(heard.get(), 10)
    assert (change.key, change.value) == ("flag", True)
    await stream.aclose()
    assert [k for k in mine.client.watched_keys if k.startswith(namespace.encode() + b"/")] == []


async def test_bad_arguments_are_refused(dicts: tuple[Any, Any]) -> None:
    mine = dicts[0]
    with pytest.raises(ConfigurationError):
        mine.changes(maxsize=0)
    with pytest.raises(ConfigurationError):
        mine.changes(scan_interval=0)


def test_the_blocking_twin_iterates_and_calls_back_on_its_own_thread(
    store_backend: StoreBackend, namespace: str, listing: ListingMode
) -> None:
    with (
        StateStoreDict[Any](store_backend.client(), namespace=namespace, listing=listing) as mine,
        StateStoreDict[Any](store_backend.client(), namespace=namespace, listing=listing) as theirs,
    ):
        theirs["a"] = 1
        heard: list[tuple[str, Any, Any]] = []
        done = threading.Event()

        def hear(change: Change[Any]) -> None:
            heard.append((change.key, change.value, mine.get(change.key)))  # the blocking API works in here
            done.set()

        with mine.changes(scan_interval=FAST_SCAN) as changes:
            listener = mine.on_change(hear, scan_interval=FAST_SCAN)
            theirs["a"] = 2
            change = changes.next(timeout=10)
            assert (change.key, change.value) == ("a", 2)
            assert done.wait(10)
            assert heard == [("a", 2, 2)]
            listener.close()


async def test_closing_the_dict_ends_its_streams_and_releases_their_watches(
    dicts: tuple[Any, Any], namespace: str
) -> None:
    mine, theirs = dicts
    await theirs.set("k", 1)
    stream = await mine.changes(scan_interval=FAST_SCAN).start()
    assert namespace.encode() + b"/k" in mine.client.watched_keys
    await mine.close()
    with pytest.raises(StopAsyncIteration):
        await stream.next(timeout=5)
    assert [k for k in mine.client.watched_keys if k.startswith(namespace.encode() + b"/")] == []


async def test_deleted_keys_keep_their_watches_only_up_to_a_bound_and_come_back_when_set_again(
    store_backend: StoreBackend, namespace: str, listing: ListingMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sskv_mapping.mapping import _changes

    monkeypatch.setattr(_changes, "_GONE_KEPT", 3)
    mine: AsyncStateStoreDict[object] = await AsyncStateStoreDict(
        await store_backend.async_client(), namespace=namespace, listing=listing, local_cache_size=0
    ).open()
    theirs: AsyncStateStoreDict[object] = await AsyncStateStoreDict(
        await store_backend.async_client(), namespace=namespace, listing=listing
    ).open()
    prefix = namespace.encode() + b"/"

    def watched() -> set[bytes]:
        return {k for k in mine.client.watched_keys if k.startswith(prefix) and b"/" not in k[len(prefix) :]}

    try:
        await theirs.update({f"k{i}": i for i in range(10)})
        async with mine.changes(scan_interval=FAST_SCAN) as changes:
            assert {prefix + f"k{i}".encode() for i in range(10)} <= watched()
            for i in range(10):
                await theirs.delitem(f"k{i}")
            gone = [await changes.next(timeout=10) for _ in range(10)]
            assert [(c.key, c.deleted) for c in gone] == [(f"k{i}", True) for i in range(10)]
            # the watches of the 3 keys deleted last are kept; the other 7 are released
            await eventually(
                lambda: (
                    {k for k in watched() if k.startswith(prefix + b"k")}
                    == {prefix + b"k7", prefix + b"k8", prefix + b"k9"}
                )
            )
            await theirs.set("k9", "kept")  # heard through its kept watch
            await theirs.set("k0", "back")  # found again by the listing, then reported
            back = {(c.key, c.value) for c in [await changes.next(timeout=10), await changes.next(timeout=10)]}
            assert back == {("k9", "kept"), ("k0", "back")}
            assert changes.dropped == 0
    finally:
        await mine.close()
        await theirs.close()
