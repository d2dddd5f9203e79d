"""django-redis's extras on the Django backend, modelled on django-redis's own ``tests/test_backend.py`` (its
``test_keys``, ``test_iter_keys``, ``test_delete_pattern*``, ``test_ttl``/``test_pttl``, ``test_persist``,
``test_expire``/``test_expire_at``, ``test_lock``, ``test_touch`` and the IGNORE_EXCEPTIONS and compressor cases),
against mosquitto and the emulator process, used through ``django.core.cache.caches`` as an app does; then what
the store adds: the fencing token, ``delete_pattern`` over 100k keys with memory and requests in flight counted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("django")

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        SECRET_KEY="sskv-tests",
        USE_TZ=True,
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    )
    django.setup()

from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.test.utils import override_settings

from sskv_mapping import LockError
from sskv_mapping.integrations._django_redis import CompressedCodec
from sskv_mapping.integrations.django import StateStoreCache

BACKEND = "sskv_mapping.integrations.django.StateStoreCache"
pytestmark = pytest.mark.broker


@pytest.fixture
def settings_for(broker_url: str) -> Callable[..., dict[str, Any]]:
    namespace = f"djr{uuid.uuid4().hex[:10]}"

    def make(location: str = broker_url, **params: Any) -> dict[str, Any]:
        options = {"namespace": namespace, **params.pop("OPTIONS", {})}
        return {"BACKEND": BACKEND, "LOCATION": location, "OPTIONS": options, **params}

    return make


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def django_caches(settings_for: Callable[..., dict[str, Any]]) -> Iterator[None]:
    unreachable = f"mqtt://127.0.0.1:{_closed_port()}"
    aliases = {
        "default": settings_for(),
        "prefix": settings_for(KEY_PREFIX="pre", VERSION=3),
        "zlib": settings_for(OPTIONS={"COMPRESSOR": "django_redis.compressors.zlib.ZlibCompressor"}),
        "lzma": settings_for(OPTIONS={"COMPRESSOR": "lzma", "codec": "json"}),
        "ignore": settings_for(unreachable, OPTIONS={"IGNORE_EXCEPTIONS": True, "connect_timeout": 2}),
        "strict": settings_for(unreachable, OPTIONS={"connect_timeout": 2}),
    }
    with override_settings(CACHES=aliases):
        yield


@pytest.fixture
def cache() -> StateStoreCache:
    backend = caches["default"]
    assert isinstance(backend, StateStoreCache)
    return backend


# -- keys, iter_keys, delete_pattern (theirs: test_keys, test_iter_keys, test_delete_pattern) ----------------


def test_keys(cache: StateStoreCache) -> None:
    cache.set("foo", 1)
    cache.set("a", 2)
    cache.set("user:1", 3)
    assert sorted(cache.keys("*")) == ["a", "foo", "user:1"]
    assert sorted(cache.keys("user:*")) == ["user:1"]
    assert cache.keys("nothing*") == []


def test_keys_apply_the_prefix_and_version_and_escape_them() -> None:
    backend = caches["prefix"]
    other = caches["default"]
    backend.set("k[1]", 1)
    other.set("k[1]", 2)  # same namespace, no prefix: not listed by the prefixed backend
    assert backend.keys("k*") == ["k[1]"]
    assert other.keys("*") == ["k[1]"]  # its ":1:k[1]"; the prefixed backend's "pre:3:k[1]" is not its key
    assert backend.get("k[1]") == 1


def test_iter_keys(cache: StateStoreCache) -> None:
    cache.set_many({f"it{i}": i for i in range(30)})
    found = cache.iter_keys("it*", itersize=5)
    assert not isinstance(found, list)
    assert sorted(found) == sorted(f"it{i}" for i in range(30))


def test_delete_pattern(cache: StateStoreCache) -> None:
    for key in ["foo-aa", "foo-ab", "foo-bb", "foo-bc"]:
        cache.set(key, "foo")
    assert cache.delete_pattern("*foo-a*") == 2
    assert sorted(cache.keys("foo*")) == ["foo-bb", "foo-bc"]
    assert cache.delete_pattern("*foo-a*") == 0


def test_delete_pattern_with_itersize_counts_progress(cache: StateStoreCache) -> None:
    cache.set_many({f"p{i}": i for i in range(25)})
    steps: list[tuple[int, int]] = []
    assert cache.delete_pattern("p*", itersize=4, progress=lambda s, d: steps.append((s, d))) == 25
    assert steps[-1] == (25, 25)
    assert all(b[0] - a[0] <= 4 for a, b in zip([(0, 0), *steps], steps, strict=False))
    assert cache.keys("p*") == []


def test_delete_pattern_refuses_a_prefix_and_a_bad_itersize(cache: StateStoreCache) -> None:
    from sskv_mapping import ConfigurationError

    with pytest.raises(ConfigurationError):
        cache.delete_pattern("*", prefix="other")
    with pytest.raises(ConfigurationError):
        cache.delete_pattern("*", itersize=0)
    with pytest.raises(ConfigurationError):
        cache.keys("")


# -- expiry (theirs: test_ttl, test_pttl, test_persist, test_expire, test_expire_at, test_touch) -----------


def test_ttl(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", 10)
    ttl = cache.ttl("foo")
    assert ttl is not None and 9 <= ttl <= 10
    cache.set("foo", "bar", timeout=None)
    assert cache.ttl("foo") is None
    cache.delete("foo")
    assert cache.ttl("foo") == 0  # absent
    assert cache.ttl("never-set") == 0


def test_pttl(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", 10)
    pttl = cache.pttl("foo")
    assert pttl is not None and 9_000 <= pttl <= 10_000
    cache.set("foo", "bar", 5.5)
    pttl = cache.pttl("foo")
    assert pttl is not None and 5_000 <= pttl <= 5_500


def test_ttl_of_a_key_another_process_wrote_is_not_known(cache: StateStoreCache) -> None:
    # the store does not report a key's remaining TTL: a key written by another writer (here the core cache
    # under the same name, as another process would) reports None, as the docstring says
    cache._cache().set(cache.make_key("elsewhere"), "v", 100)
    assert cache.ttl("elsewhere") is None


def test_persist(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", timeout=20)
    assert cache.persist("foo")
    assert cache.ttl("foo") is None
    assert cache.get("foo") == "bar"
    assert not cache.persist("absent")


def test_expire(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", timeout=None)
    assert cache.expire("foo", 20)
    ttl = cache.ttl("foo")
    assert ttl is not None and 19 <= ttl <= 20
    assert cache.pexpire("foo", 20_500)
    pttl = cache.pttl("foo")
    assert pttl is not None and 20_000 <= pttl <= 20_500
    assert cache.expire("foo", 0)  # now: deleted
    assert cache.get("foo") is None
    assert not cache.expire("absent", 10)


def test_expire_at(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", timeout=None)
    assert cache.expire_at("foo", dt.datetime.now() + dt.timedelta(hours=1))
    ttl = cache.ttl("foo")
    assert ttl is not None and 3590 <= ttl <= 3600
    assert cache.expire_at("foo", dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))  # in the past: deleted
    assert cache.get("foo") is None


def test_expire_with_default_timeout(cache: StateStoreCache) -> None:
    from sskv_mapping.integrations.django import DEFAULT_TIMEOUT

    cache.set("foo", "bar", timeout=None)
    assert cache.expire("foo", DEFAULT_TIMEOUT) is True  # type: ignore[arg-type]  # django's sentinel, typed object
    ttl = cache.ttl("foo")
    assert ttl is not None and 299 <= ttl <= 300  # TIMEOUT's default
    assert cache.pexpire("foo", DEFAULT_TIMEOUT) is True  # type: ignore[arg-type]  # django's sentinel, typed object
    assert cache.expire("not-existent-key", DEFAULT_TIMEOUT) is False  # type: ignore[arg-type]  # django's sentinel, typed object


def test_pexpire_at(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", timeout=None)
    assert cache.pexpire_at("foo", dt.datetime.now() + dt.timedelta(hours=1))
    pttl = cache.pttl("foo")
    assert pttl is not None and abs(pttl - 3_600_000) < 10_000
    at = (dt.datetime.now() + dt.timedelta(hours=2)).timestamp() * 1000
    assert cache.pexpire_at("foo", int(at))  # a Unix time in milliseconds
    pttl = cache.pttl("foo")
    assert pttl is not None and abs(pttl - 7_200_000) < 10_000
    assert cache.pexpire_at("foo", dt.datetime.now() - dt.timedelta(hours=2))
    assert cache.get("foo") is None
    assert not cache.pexpire_at("not-existent-key", dt.datetime.now() + dt.timedelta(hours=2))


def test_touch(cache: StateStoreCache) -> None:
    cache.set("foo", "bar", timeout=None)
    assert cache.touch("foo", 20)
    ttl = cache.ttl("foo")
    assert ttl is not None and 19 <= ttl <= 20
    assert not cache.touch("absent", 20)


# -- locks (theirs: test_lock, test_lock_released_by_thread) --------------------------------------------


def test_lock(cache: StateStoreCache) -> None:
    lock = cache.lock("foobar")
    assert lock.acquire(blocking=True)
    first = lock.fencing_token
    assert cache.keys("*") == []  # a lock is not a cache key
    assert lock.locked() and lock.owned()
    other = cache.lock("foobar", blocking_timeout=0.2)
    assert not other.acquire(blocking=False)
    assert not other.acquire()  # waited 0.2 s
    lock.release()
    assert not lock.locked()
    with other:
        assert other.fencing_token > first
    with pytest.raises(LockError):
        other.release()  # not ours any more


def test_lock_fencing_tokens_increase(cache: StateStoreCache) -> None:
    tokens = []
    for _ in range(3):
        with cache.lock("fenced", timeout=5) as lock:
            tokens.append(lock.fencing_token)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


def test_lock_context_manager_raises_when_not_acquired(cache: StateStoreCache) -> None:
    held = cache.lock("busy")
    assert held.acquire()
    try:
        with pytest.raises(LockError), cache.lock("busy", blocking_timeout=0.1):
            pass
    finally:
        held.release()


# -- async twins -------------------------------------------------------------------------------------------


async def test_async_twins(cache: StateStoreCache) -> None:
    await cache.aset_many({"ak1": 1, "ak2": 2, "bk": 3}, timeout=30)
    assert sorted(await cache.akeys("ak*")) == ["ak1", "ak2"]
    assert sorted([k async for k in cache.aiter_keys("*")]) == ["ak1", "ak2", "bk"]
    ttl = await cache.attl("ak1")
    assert ttl is not None and 29 <= ttl <= 30
    assert await cache.apersist("ak1")
    assert await cache.attl("ak1") is None
    assert await cache.aexpire("ak1", 10)
    pttl = await cache.apttl("ak1")
    assert pttl is not None and 9_000 <= pttl <= 10_000
    assert await cache.apexpire("ak1", 20_500)  # milliseconds, as pexpire
    pttl = await cache.apttl("ak1")
    assert pttl is not None and 20_000 <= pttl <= 20_500
    assert await cache.aexpire_at("ak2", dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1))
    assert await cache.adelete_pattern("ak*") == 2
    assert await cache.akeys("ak*") == []
    lock = cache.alock("alock", timeout=5)
    async with lock:
        assert await lock.locked()
        assert not await cache.alock("alock").acquire(blocking=False)
    assert not await lock.locked()


# -- OPTIONS: IGNORE_EXCEPTIONS, COMPRESSOR ----------------------------------------------------------------


def test_ignore_exceptions_answers_defaults_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    backend = caches["ignore"]
    assert backend.get("k", "default") == "default"
    assert backend.set("k", 1) is None
    assert backend.add("k", 1) is False
    assert backend.get_many(["a", "b"]) == {}
    assert backend.set_many({"a": 1}) == ["a"]
    assert backend.delete("k") is False
    assert backend.keys("*") == []
    assert backend.delete_pattern("*") == 0
    assert backend.ttl("k") is None
    assert backend.incr("k") is None
    assert backend.get_or_set("k", lambda: 7) == 7
    assert "IGNORE_EXCEPTIONS" in caplog.text and "unreachable" in caplog.text


async def test_ignore_exceptions_async() -> None:
    backend = caches["ignore"]
    assert await backend.aget("k", "d") == "d"
    assert await backend.aadd("k", 1) is False
    assert await backend.akeys("*") == []


def test_without_ignore_exceptions_an_outage_raises() -> None:
    from sskv_mapping import TransportError

    with pytest.raises(TransportError):
        caches["strict"].get("k")


def test_a_bad_option_is_improperly_configured(settings_for: Callable[..., dict[str, Any]]) -> None:
    from django.core.cache import CacheHandler

    for options in ({"IGNORE_EXCEPTIONS": "yes"}, {"COMPRESSOR": "snappy"}, {"COMPRESS_MIN_LENGTH": -1}):
        with pytest.raises(ImproperlyConfigured):
            CacheHandler({"x": settings_for(OPTIONS=options)})["x"]


@pytest.mark.parametrize("alias", ["zlib", "lzma"])
def test_compressor(alias: str) -> None:
    backend = caches[alias]
    big = {"text": "x" * 10_000}
    backend.set("big", big)
    backend.set("small", {"a": 1})
    assert backend.get("big") == big and backend.get("small") == {"a": 1}
    raw = backend.client.get(backend._cache().data_key(backend.make_key("big")))
    assert raw is not None and raw.value[:1] == b"\x01" and len(raw.value) < 1_000  # stored compressed
    assert isinstance(backend._cache().async_cache.codec, CompressedCodec)


def test_a_compression_bomb_is_refused_not_inflated() -> None:
    from sskv_mapping import JsonCodec
    from sskv_mapping.errors import DecodeError

    codec = CompressedCodec(JsonCodec(), "zlib")
    import zlib

    bomb = b"\x01" + zlib.compress(b"[" + b"0," * (40 * 1024 * 1024) + b"0]", 9)
    with pytest.raises(DecodeError):
        codec.loads(bomb)


# -- delete_pattern: memory and requests in flight bounded, by counting (100k keys: bench_delete_pattern.py) --


def count_deletes(client: Any) -> dict[str, int]:
    """Wrap ``client.delete`` (the instance's): how many calls, and the most in flight at once."""
    counts = {"calls": 0, "in_flight": 0, "peak": 0}
    original = client.delete

    async def counted(*args: Any, **kwargs: Any) -> Any:
        counts["calls"] += 1
        counts["in_flight"] += 1
        counts["peak"] = max(counts["peak"], counts["in_flight"])
        try:
            return await original(*args, **kwargs)
        finally:
            counts["in_flight"] -= 1

    client.delete = counted
    return counts


def test_delete_pattern_is_bounded_in_memory_and_in_flight(cache: StateStoreCache) -> None:
    core = cache._cache()
    n = 5_000
    for start in range(0, n, 1_000):
        assert core.set_many({cache.make_key(f"bulk:{i}"): i for i in range(start, start + 1_000)}, 600) == []
    client = core.async_cache.client
    counts = count_deletes(client)
    batches: list[int] = []
    last = [0]

    def progress(scanned: int, deleted: int) -> None:
        batches.append(scanned - last[0])
        last[0] = scanned

    try:
        assert cache.delete_pattern("bulk:*", itersize=200, progress=progress) == n
    finally:
        del client.delete
    assert counts["calls"] == n
    assert max(batches) <= 200  # at most one batch of keys held at a time
    assert 1 < counts["peak"] <= 200  # deletes run concurrently, never more than one batch in flight
    assert cache.keys("bulk:*") == []


def test_the_loop_of_the_caller_is_not_blocked_by_aiter_keys(cache: StateStoreCache) -> None:
    async def main() -> list[str]:
        cache.set("x1", 1)
        return [k async for k in cache.aiter_keys("x*")]

    assert asyncio.run(main()) == ["x1"]
