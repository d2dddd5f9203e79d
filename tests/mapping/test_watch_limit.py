"""The dict's local cache watches each cached key; watches of keys it no longer holds are released.

Without this a long-lived process that reads many keys through a small cache kept one KEYNOTIFY
registration per key ever read, on the client and in the service, until close().
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sskv_mapping.mapping import StateStoreDict
from sskv_mapping.mapping._listing import NamespaceListing
from tests._support import watches_of
from tests._support.waiting import eventually_sync as eventually

DictFactory = Callable[..., StateStoreDict[Any]]

CACHE_SIZE = 4
KEYS = 60


def test_watches_stay_bounded_by_the_cache_size(make_dict: DictFactory) -> None:
    writer = make_dict()
    writer.update({f"k{i}": i for i in range(KEYS)})
    reader: StateStoreDict[Any] = make_dict(local_cache_size=CACHE_SIZE)
    store = reader._async._store
    client = store.client
    limit = watches_of(store).limit
    assert limit == 2 * CACHE_SIZE
    most = 0
    for i in range(KEYS):
        assert reader[f"k{i}"] == i
        most = max(most, len(watches_of(store)))
    assert most <= limit + 1, f"{most} watches held at once for a cache of {CACHE_SIZE}"
    # the released watches' STOPs go out in the background: the client's registrations follow
    assert isinstance(store.index, NamespaceListing)
    expected = set(watches_of(store)) | store.index.watched_keys()  # the index shards it loaded have theirs
    try:
        eventually(lambda: set(client.watched_keys) == expected, timeout=10)
    except TimeoutError:
        raise AssertionError(f"{sorted(client.watched_keys)} != {sorted(expected)}") from None
    assert watches_of(store).released == KEYS - len(watches_of(store))  # every other key's watch was released


def test_a_key_watched_again_after_its_release_sees_changes(make_dict: DictFactory) -> None:
    writer = make_dict()
    writer.update({f"k{i}": i for i in range(KEYS)})
    reader: StateStoreDict[Any] = make_dict(local_cache_size=CACHE_SIZE)
    assert reader["k0"] == 0
    for i in range(1, KEYS):  # pushes k0 out of the cache and its watch out
        assert reader[f"k{i}"] == i
    store = reader._async._store
    eventually(lambda: store.data_key("k0") not in store.client.watched_keys, timeout=10)
    assert reader["k0"] == 0  # read again: cached and watched again
    writer["k0"] = "new"
    eventually(lambda: reader["k0"] == "new", timeout=10)  # the notification reached the cache
