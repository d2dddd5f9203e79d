"""The dict's names deprecated by the renaming step (issue 29), kept one release: each warns, at its caller's line,
and still does what it did. Delete this file with the names.

* ``clock=`` on the dict is ``monotonic=`` (a client's is ``wall_clock_ms=``);
* ``peek``, ``hit_reader``, ``encoded`` and ``pairs`` served only the blocking twin, which now shares the dict's
  private core instead.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from sskv_mapping.mapping import AsyncStateStoreDict, StateStoreDict
from tests._support.store_backend import StoreBackend


def _warned_here(record: pytest.WarningsRecorder, *names: str) -> None:
    """Exactly one DeprecationWarning per name, each naming it and pointing at this file (the caller's line)."""
    deprecations = [w for w in record if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == len(names), [str(w.message) for w in deprecations]
    for warning, name in zip(deprecations, names, strict=True):
        assert name in str(warning.message)
        assert warning.filename == __file__


async def test_clock_is_monotonic(store_backend: StoreBackend, namespace: str) -> None:
    client = await store_backend.async_client()
    now = [10.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name warns nothing
        new: AsyncStateStoreDict[int] = AsyncStateStoreDict(client, namespace=namespace, monotonic=lambda: now[0])
    with pytest.warns(DeprecationWarning) as record:
        old: AsyncStateStoreDict[int] = AsyncStateStoreDict(client, namespace=namespace, clock=lambda: now[0])
    _warned_here(record, "monotonic=")
    for d in (new, old):  # the local cache reads the injected clock
        assert d.local_cache is not None and d.local_cache.deadline(2.0) == 12.0
    async with old, new:
        await old.set("k", 1, ttl=60)
        assert await new.get("k") == 1


def test_the_blocking_twin_takes_the_new_name_and_warns_for_the_old(
    store_backend: StoreBackend, namespace: str
) -> None:
    now = [7.0]
    with pytest.warns(DeprecationWarning) as record:
        old: StateStoreDict[int] = StateStoreDict(store_backend.client(), namespace=namespace, clock=lambda: now[0])
    _warned_here(record, "monotonic=")  # once, at this line: not again from the async twin
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new: StateStoreDict[int] = StateStoreDict(store_backend.client(), namespace=namespace, monotonic=lambda: now[0])
    try:
        for d in (old, new):
            assert d.local_cache is not None and d.local_cache.deadline(1.0) == 8.0
        old["k"] = 3
        assert new["k"] == 3
    finally:
        old.close()
        new.close()


async def test_the_twin_only_members_warn_and_still_work(store_backend: StoreBackend, namespace: str) -> None:
    d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(await store_backend.async_client(), namespace=namespace)
    async with d:
        with pytest.warns(DeprecationWarning) as record:
            encoded = d.encoded("k", {"a": 1})
            pairs = AsyncStateStoreDict.pairs({"x": 1}, {"y": 2})
            listed = d.pairs([("z", 3)], {})
        _warned_here(record, "encoded()", "pairs()", "pairs()")
        assert pairs == [("x", 1), ("y", 2)] and listed == [("z", 3)]
        await d.set("k", encoded)  # what the blocking twin did with it: still stores the value
        assert await d.get("k") == {"a": 1}  # and caches it (read through the local cache)

        with pytest.warns(DeprecationWarning) as record:
            hit = d.peek("k")
            miss = d.peek("never-read")
            reader = d.hit_reader()
        _warned_here(record, "peek()", "peek()", "hit_reader()")
        assert hit is not None and hit.value == {"a": 1}
        assert miss is None
        reached = reader("k")
        assert reached is not None and reached.value == {"a": 1}
        assert reader("never-read") is None
