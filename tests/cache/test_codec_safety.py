"""Values are encoded in the caller's thread; pickle failures are a ``pickle.PickleError``; a key-bound signed
pickle refuses a payload replayed under another key and reads one written with a rotated-out secret.

Each runs on the loopback store and on a real mosquitto + the emulator process (the cache conftest).
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.codecs import PickleCodec
from sskv_mapping.errors import DecodeError, EncodeError
from tests._support.store_backend import StoreBackend

CacheFactory = Callable[..., Awaitable[AsyncStateStoreCache[Any]]]
SyncCacheFactory = Callable[..., StateStoreCache[Any]]


OLD = b"an-old-secret-of-32-bytes-length"
NEW = b"the-new-secret-of-32-bytes-lengt"


class ThreadWitness:
    """Records the thread that pickled it (a Django lazy QuerySet may only be evaluated in its own thread)."""

    pickled_in: list[int] = []

    def __reduce__(self) -> Any:
        ThreadWitness.pickled_in.append(threading.get_ident())
        return (ThreadWitness, ())


class Unpicklable:
    def __reduce__(self) -> Any:
        raise pickle.PicklingError("this object refuses to be pickled")


def test_the_blocking_cache_encodes_in_the_calling_thread(make_sync_cache: SyncCacheFactory) -> None:
    cache = make_sync_cache(codec=PickleCodec(allow_unsafe=True))
    ThreadWitness.pickled_in.clear()
    cache.set("a", ThreadWitness())
    cache.add("b", ThreadWitness())
    cache.set_many({"c": ThreadWitness()})
    cache.get_or_set("d", ThreadWitness)
    me = threading.get_ident()
    assert ThreadWitness.pickled_in == [me, me, me, me]  # never the library's loop thread
    assert isinstance(cache.get("a"), ThreadWitness)


def test_the_blocking_dict_encodes_in_the_calling_thread(store_backend: StoreBackend, namespace: str) -> None:
    from sskv_mapping.client import StateStoreClient
    from sskv_mapping.mapping import StateStoreDict

    with StateStoreClient(**store_backend.client_kwargs) as client:
        d: StateStoreDict[Any] = StateStoreDict(client, namespace=namespace, codec=PickleCodec(allow_unsafe=True))
        ThreadWitness.pickled_in.clear()
        d["a"] = ThreadWitness()
        d.update({"b": ThreadWitness()})
        d.setdefault("c", ThreadWitness())
        d.set("e", ThreadWitness(), ttl=60)
        me = threading.get_ident()
        assert ThreadWitness.pickled_in == [me] * 4
        assert isinstance(d["c"], ThreadWitness) and len(d) == 4
        d.close()


async def test_an_unpicklable_value_is_a_pickle_error(make_cache: CacheFactory) -> None:
    cache = await make_cache(codec=PickleCodec(allow_unsafe=True))
    for value in (Unpicklable(), lambda: 1, threading.Lock()):
        with pytest.raises(pickle.PickleError) as info:
            await cache.set("k", value)
        assert isinstance(info.value, EncodeError)  # and still ours
    assert not await cache.exists("k")  # nothing was written


def test_an_unpicklable_value_is_a_pickle_error_in_the_blocking_cache(make_sync_cache: SyncCacheFactory) -> None:
    cache = make_sync_cache(codec=PickleCodec(key=NEW))
    with pytest.raises(pickle.PickleError):
        cache.set("k", Unpicklable())
    with pytest.raises(pickle.PickleError):
        cache.add("k", lambda: 1)


async def test_a_key_bound_signature_refuses_a_payload_replayed_under_another_key(make_cache: CacheFactory) -> None:
    cache: AsyncStateStoreCache[Any] = await make_cache(codec=PickleCodec(key=NEW, bind_key=True))
    await cache.set("admin-flags", {"is_admin": True})
    await cache.set("guest-flags", {"is_admin": False})
    stolen = await cache.client.get(await cache.data_key("admin-flags"))
    assert stolen is not None
    # someone with write access copies the validly signed payload under another key
    await cache.client.set(await cache.data_key("guest-flags"), stolen.value)
    with pytest.raises(DecodeError, match="verification"):
        await cache.get("guest-flags")
    assert await cache.get("admin-flags") == {"is_admin": True}


async def test_a_rotated_secret_still_reads_and_an_unknown_one_does_not(make_cache: CacheFactory) -> None:
    old = await make_cache(codec=PickleCodec(key=OLD, bind_key=True))
    await old.set("k", {"v": 1})
    rotated = await make_cache(codec=PickleCodec(key=NEW, fallback_keys=[OLD], bind_key=True))
    assert await rotated.get("k") == {"v": 1}
    await rotated.set("k2", {"v": 2})  # written with the new secret: a reader that knows only the old refuses it
    with pytest.raises(DecodeError):
        await old.get("k2")
    stranger = await make_cache(codec=PickleCodec(key=NEW, bind_key=True))
    with pytest.raises(DecodeError):
        await stranger.get("k")  # signed with a secret it does not know: never unpickled


def test_a_key_bound_codec_is_not_usable_without_the_key() -> None:
    codec = PickleCodec(key=NEW, bind_key=True)
    with pytest.raises(TypeError):
        codec.dumps(1)
    assert codec.loads_bound(b"ns/k", codec.dumps_bound(b"ns/k", [1])) == [1]
    with pytest.raises(DecodeError):
        codec.loads_bound(b"ns/other", codec.dumps_bound(b"ns/k", [1]))
