"""What the local cache keeps on a write: a write never starts a watch; a key is watched once it is read.

Before: every write of a key not yet watched sent a KEYNOTIFY beside its SET, so a write-only fill of a cached dict
cost two requests per key and, past the watch limit (twice the cache size), a KEYNOTIFY STOP for nearly every key
again. Now a write-only burst in SCAN mode is one SET per key and registers nothing; the cache stays current: a
written key that was never read is not cached, and a key read (so watched) sees another process's write.
"""

from __future__ import annotations

from typing import Any

from sskv_mapping.mapping import StateStoreDict
from tests._support import watches_of
from tests._support.waiting import eventually_sync as eventually
from tests.mapping.conftest import DictFactory

KEYS = 200
CACHE_SIZE = 20  # watch limit 40: a fill of 200 keys that watched each written key would cross it


def test_a_write_only_fill_is_one_set_per_key_and_registers_no_watch(make_dict: DictFactory) -> None:
    d: StateStoreDict[Any] = make_dict(local_cache_size=CACHE_SIZE, listing="scan")
    store = d._async._store
    client = store.client
    d["warm"] = 0  # connected, listing mode settled
    before = client.requests_sent
    for i in range(KEYS):
        d[f"k{i}"] = i
    assert client.requests_sent - before == KEYS  # one SET per key, nothing beside it
    assert client.watched_keys == []
    assert watches_of(store).released == 0
    assert store.cache is not None and len(store.cache) == 0  # nothing written unwatched is kept


def test_a_new_key_read_after_its_write_sees_another_process_write(make_dict: DictFactory) -> None:
    d: StateStoreDict[Any] = make_dict(local_cache_size=CACHE_SIZE, listing="scan")
    other: StateStoreDict[Any] = make_dict(local_cache_size=0)
    d["new"] = "mine"
    assert d["new"] == "mine"  # the first read watches the key and caches it
    store = d._async._store
    assert store.data_key("new") in store.client.watched_keys
    other["new"] = "theirs"  # right after: must not be missed
    eventually(lambda: d["new"] == "theirs", timeout=10)
    d["new"] = "mine again"  # a write to a watched key is kept with the written value
    before = store.client.requests_sent
    assert d["new"] == "mine again"
    assert store.client.requests_sent == before  # a hit: the write to a watched key was kept
    other["new"] = "theirs again"
    eventually(lambda: d["new"] == "theirs again", timeout=10)


def test_a_key_written_then_changed_elsewhere_before_any_read_reads_the_change(make_dict: DictFactory) -> None:
    d: StateStoreDict[Any] = make_dict(local_cache_size=CACHE_SIZE, listing="scan")
    other: StateStoreDict[Any] = make_dict(local_cache_size=0)
    d["k"] = 1
    other["k"] = 2  # right after the write, before d ever read it
    assert d["k"] == 2  # nothing of the write was cached unwatched
