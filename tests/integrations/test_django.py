"""Django's cache contract on ``sskv_mapping.integrations.django.StateStoreCache``, against mosquitto and the
emulator process: what Django's cache documentation promises and its own ``tests/cache/tests.py``
(``BaseCacheTests``) checks, written for this backend, used the way Django code uses a cache
(``django.core.cache.cache`` / ``caches[alias]`` configured through ``CACHES``), plus the async API served
natively, one connection per process, and ``incr`` exact under concurrency.

Each test gets its own namespace (``override_settings(CACHES=...)``). Expiry is observed through the key's
KEYNOTIFY DELETE (the emulator expires keys on a timer), never by sleeping.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("django")

import django
from django.conf import settings

if not settings.configured:
    # Nothing may connect at import time: the real CACHES come per test, with the session broker's URL.
    settings.configure(
        SECRET_KEY="sskv-tests",
        USE_TZ=True,
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    )
    django.setup()

import django.core.cache.backends.base as django_cache_base
from django.core import signals
from django.core.cache import CacheKeyWarning, cache, caches
from django.core.cache.backends.base import BaseCache
from django.core.exceptions import ImproperlyConfigured
from django.test.utils import override_settings

from sskv_mapping import ConfigurationError, ConnectionState, EncodeError, KeyOperation, PickleCodec
from sskv_mapping._blocking import get_loop_thread
from sskv_mapping._protocol.notifications import KeyEvent
from sskv_mapping.cache import StateStoreCache as StoreCache
from sskv_mapping.integrations.django import StateStoreCache, close_all, shared_dict

BACKEND = "sskv_mapping.integrations.django.StateStoreCache"


def custom_key_func(key: str, key_prefix: str, version: int) -> str:
    """A KEY_FUNCTION (Django's test suite uses the same shape)."""
    return f"CUSTOM-{key_prefix}-{version}-{key}"


def f() -> int:
    return 42


class C:
    def m(self, n: int) -> int:
        return 24


@pytest.fixture
def cache_settings(broker_url: str, namespace: str) -> Callable[..., dict[str, Any]]:
    """``cache_settings(**params)``: one CACHES entry on the session broker, in this test's namespace."""

    def make(**params: Any) -> dict[str, Any]:
        options = {"namespace": namespace, **params.pop("OPTIONS", {})}
        return {"BACKEND": BACKEND, "LOCATION": broker_url, "OPTIONS": options, **params}

    return make


@pytest.fixture(autouse=True)
def django_caches(cache_settings: Callable[..., dict[str, Any]], namespace: str) -> Iterator[None]:
    """The aliases Django's own cache tests use, all on the state store (backends are built on first use)."""
    aliases = {
        "default": cache_settings(),
        "json": cache_settings(OPTIONS={"codec": "json"}),
        "prefix": cache_settings(KEY_PREFIX="cacheprefix"),
        "v2": cache_settings(VERSION=2),
        "custom_key": cache_settings(KEY_FUNCTION=custom_key_func),
        "custom_key2": cache_settings(KEY_FUNCTION=f"{__name__}.custom_key_func"),
        "other_ns": cache_settings(OPTIONS={"namespace": f"{namespace}-other"}),
        "pickled": cache_settings(OPTIONS={"codec": "pickle", "allow_pickle": True}),
        "signed": cache_settings(OPTIONS={"codec": "pickle", "pickle_key": "a secret of sixteen+ bytes"}),
        "short": cache_settings(TIMEOUT=1),
        "zero": cache_settings(TIMEOUT=0),
        "forever": cache_settings(TIMEOUT=None),
        "local": cache_settings(OPTIONS={"local_cache_size": 100}),
    }
    with override_settings(CACHES=aliases):
        yield


class Deletions:
    """Notified of a key's DELETE (an expiry, seen through KEYNOTIFY) — registered before the key is written."""

    def __init__(self, backend: Any, key: str, version: int | None = None) -> None:
        self.deleted = threading.Event()
        self._sub = backend.client.subscribe_key(backend._cache().data_key(backend.make_key(key, version)), self)

    def __call__(self, event: KeyEvent) -> None:
        if event.op is KeyOperation.DELETE:
            self.deleted.set()

    def wait(self, timeout: float = 5.0) -> None:
        assert self.deleted.wait(timeout), "no DELETE notification arrived"

    def close(self) -> None:
        get_loop_thread().run(self._sub.close())


@pytest.fixture
def deletions() -> Iterator[Callable[..., Deletions]]:
    made: list[Deletions] = []

    def watch(backend: Any, key: str, version: int | None = None) -> Deletions:
        d = Deletions(backend, key, version)
        made.append(d)
        return d

    yield watch
    for d in made:
        d.close()


# -- basics -----------------------------------------------------------------------------------------------


def test_backend_is_configured_from_caches() -> None:
    assert isinstance(caches["default"], StateStoreCache)
    assert caches["default"].default_timeout == 300
    assert caches["short"].default_timeout == 1 and caches["forever"].default_timeout is None


def test_simple_get_set_in_and_has_key() -> None:
    cache.set("key", "value")
    assert cache.get("key") == "value"
    assert cache.get("missing") is None
    assert cache.get("missing", "default") == "default"
    assert "key" in cache and "missing" not in cache
    assert cache.has_key("key") is True and cache.has_key("missing") is False
    cache.set("no_expiry", "here", None)
    assert cache.has_key("no_expiry") is True


def test_a_value_changed_after_set_is_not_changed_in_the_local_cache() -> None:
    """As Django's own backends (the local-memory one pickles): the process reads what was stored (issue 37)."""
    local = caches["local"]
    local.set("k", "first")
    assert local.get("k") == "first"  # read: watched, so the next set is kept in the local cache
    data = {"items": [1, 2]}
    local.set("k", data)
    data["items"].append(3)
    before = local.client.async_client.requests_sent
    assert local.get("k") == {"items": [1, 2]}
    assert local.client.async_client.requests_sent == before  # served from the local cache


async def test_a_value_changed_after_aset_is_not_changed_in_the_local_cache() -> None:
    local = caches["local"]
    await local.aset("k", "first")
    assert await local.aget("k") == "first"
    data = {"items": [1, 2]}
    await local.aset("k", data)
    data["items"].append(3)
    assert await local.aget("k") == {"items": [1, 2]}


def test_none_is_a_value_not_a_miss() -> None:
    cache.set("null", None)
    assert cache.get("null") is None
    assert cache.get("null", "default") is None  # stored None wins over the default
    assert cache.has_key("null") is True
    assert cache.get_many(["null"]) == {"null": None}


def test_add_only_when_absent() -> None:
    assert cache.add("addkey1", "value") is True
    assert cache.add("addkey1", "newvalue") is False
    assert cache.get("addkey1") == "value"


def test_delete_reports_whether_the_key_existed() -> None:
    cache.set_many({"key1": "spam", "key2": "eggs"})
    assert cache.delete("key1") is True
    assert cache.get("key1") is None and cache.get("key2") == "eggs"
    assert cache.delete("key1") is False
    assert cache.delete("nonexistent") is False


def test_get_many_set_many_delete_many() -> None:
    assert cache.set_many({"a": "a", "b": "b", "c": "c", "d": "d"}) == []
    assert cache.get_many(["a", "c", "d"]) == {"a": "a", "c": "c", "d": "d"}
    assert cache.get_many(["a", "b", "e"]) == {"a": "a", "b": "b"}
    assert cache.get_many(iter(["a", "b", "e"])) == {"a": "a", "b": "b"}  # any iterable of keys
    assert cache.get_many([]) == {} and cache.set_many({}) == []
    assert cache.delete_many(["a", "b", "zz"]) is None
    assert cache.get_many(["a", "b", "c", "d"]) == {"c": "c", "d": "d"}
    cache.delete_many([])
    cache.delete_many(k for k in ["c"])
    assert cache.get_many(["a", "b", "c", "d"]) == {"d": "d"}


def test_set_many_stores_with_the_timeout() -> None:
    cache.set_many({"key1": "spam", "key2": "eggs"}, 60 * 60 * 24 * 30 + 1)  # longer than memcached's 30 days
    assert cache.get_many(["key1", "key2"]) == {"key1": "spam", "key2": "eggs"}
    cache.set_many({"key1": "spam", "key2": "eggs"}, 0)
    assert cache.get_many(["key1", "key2"]) == {}


def test_incr_decr() -> None:
    cache.set("answer", 41)
    assert cache.incr("answer") == 42 and cache.get("answer") == 42
    assert cache.incr("answer", 10) == 52 and cache.get("answer") == 52
    assert cache.incr("answer", -10) == 42
    assert cache.decr("answer") == 41 and cache.get("answer") == 41
    assert cache.decr("answer", 10) == 31
    assert cache.decr("answer", -10) == 41
    with pytest.raises(ValueError, match=r"^Key 'does_not_exist' not found$"):
        cache.incr("does_not_exist")
    with pytest.raises(ValueError, match=r"^Key 'does_not_exist' not found$"):
        cache.decr("does_not_exist")
    with pytest.raises(ValueError):
        cache.incr("does_not_exist", -1)
    cache.set("text", "abc")
    with pytest.raises(TypeError):
        cache.incr("text")


def test_json_values_unicode_keys_and_values() -> None:
    cache = caches["json"]  # the codec by name: values JSON can carry
    stuff = {
        "ascii": "ascii_value",
        "unicode_ascii": "Iñtërnâtiônàlizætiøn1",
        "Iñtërnâtiônàlizætiøn": "Iñtërnâtiônàlizætiøn2",
        "ascii2": {"x": 1},
        "emoji ☃": ["🐍", 1.5, True, None, {"nested": "ß"}],
    }
    for key, value in stuff.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheKeyWarning)  # the space in "emoji ☃" (checked elsewhere)
            cache.set(key, value)
            assert cache.get(key) == value
            cache.delete(key)
            assert cache.add(key, value) is True and cache.get(key) == value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheKeyWarning)
        cache.delete_many(stuff)
        cache.set_many(stuff)
        assert cache.get_many(stuff) == stuff
    cache.set("tuple", (1, 2))
    assert cache.get("tuple") == [1, 2]  # JSON has no tuples (documented): the pickle codec keeps them


def test_values_json_cannot_carry_are_refused_and_nothing_is_stored() -> None:
    cache = caches["json"]
    with pytest.raises(EncodeError):
        cache.set("bytes", b"\x00\x01")
    with pytest.raises(EncodeError):
        cache.add("object", object())
    assert isinstance(EncodeError("x"), ValueError)
    assert cache.get_many(["bytes", "object"]) == {}


def test_pickle_codec_keeps_python_objects() -> None:
    pickled = caches["pickled"]
    stuff = {
        "string": "this is a string",
        "int": 42,
        "bool": True,
        "list": [1, 2, 3, 4],
        "tuple": (1, 2, 3, 4),
        "dict": {"A": 1, "B": 2},
        "set": {1, 2},
        "function": f,
        "class": C,
    }
    pickled.set("stuff", stuff)
    assert pickled.get("stuff") == stuff
    compressed = zlib.compress(b"value to be compressed" * 10)  # Django's test_binary_string
    pickled.set("binary1", compressed)
    assert zlib.decompress(pickled.get("binary1")) == b"value to be compressed" * 10
    assert pickled.add("binary1-add", compressed) is True
    assert pickled.get_many(["binary1", "binary1-add"]) == {"binary1": compressed, "binary1-add": compressed}
    signed = caches["signed"]
    signed.set("stuff", stuff)
    assert signed.get("stuff") == stuff


def test_pickle_is_opt_in(cache_settings: Callable[..., dict[str, Any]]) -> None:
    with (
        override_settings(CACHES={"default": cache_settings(OPTIONS={"codec": "pickle"})}),
        pytest.raises(ImproperlyConfigured, match="allow_pickle"),
    ):
        caches["default"]
    codec = PickleCodec(allow_unsafe=True)
    with override_settings(CACHES={"default": cache_settings(OPTIONS={"codec": codec})}):
        assert caches["default"].state_store_cache.async_cache.codec is codec  # a Codec instance as is
        cache.set("t", (1, 2))
        assert cache.get("t") == (1, 2)


def test_the_default_pickles_anything_signed_with_a_key_from_secret_key() -> None:
    value = {"tuple": (1, 2), "set": {1, 2}, "bytes": b"\x00\x01", "class": C}
    cache.set("v", value)
    assert cache.get("v") == value
    codec = caches["default"].state_store_cache.async_cache.codec
    assert isinstance(codec, PickleCodec) and codec.signed and codec.bind_key


def test_a_rotated_secret_key_still_reads_and_a_replay_under_another_key_is_refused(
    cache_settings: Callable[..., dict[str, Any]],
) -> None:
    with override_settings(SECRET_KEY="the-old-secret-key-of-this-project", CACHES={"default": cache_settings()}):
        caches["default"].set("session", {"user": 1})
        caches["default"].set("other", {"user": 2})
    rotated = {"SECRET_KEY": "the-new-secret-key-of-this-project"}
    with override_settings(
        **rotated, SECRET_KEY_FALLBACKS=["the-old-secret-key-of-this-project"], CACHES={"default": cache_settings()}
    ):
        assert caches["default"].get("session") == {"user": 1}  # signed with the old key: still read
    with override_settings(**rotated, CACHES={"default": cache_settings()}):
        with pytest.raises(ValueError, match="verification"):  # the old key is no longer trusted
            caches["default"].get("session")
        backend = caches["default"]
        stolen = backend.client.get(backend.state_store_cache.data_key(backend.make_key("session")))
        caches["default"].set("victim", "x")
        backend.client.set(backend.state_store_cache.data_key(backend.make_key("victim")), stolen.value)
        with pytest.raises(ValueError, match="verification"):  # a signed payload copied under another key
            caches["default"].get("victim")


def test_no_secret_key_is_a_configuration_error_never_unsigned_pickle(
    cache_settings: Callable[..., dict[str, Any]],
) -> None:
    with (
        override_settings(SECRET_KEY="", CACHES={"default": cache_settings()}),
        pytest.raises(ImproperlyConfigured, match="SECRET_KEY"),
    ):
        caches["default"]


def test_signed_pickle_refuses_unsigned_payloads() -> None:
    caches["pickled"].set("k", {"x": 1})  # same namespace, unsigned pickle
    with pytest.raises(ValueError):  # a DecodeError: the tag is checked before anything is unpickled
        caches["signed"].get("k")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"namesapce": "x"}, "unknown OPTIONS"),
        ({"namespace": "a/b"}, "namespace"),
        ({"codec": "yaml"}, "codec"),
        ({"local_cache_size": -1}, "local_cache_size"),
        ({"timeout": 0}, "timeout"),
        ({"codec": "pickle", "pickle_key": "short"}, "16"),
        ({"tls": {"ca_flie": "x"}}, "ca_flie"),
    ],
)
def test_bad_options_are_improperly_configured(
    cache_settings: Callable[..., dict[str, Any]], options: dict[str, Any], match: str
) -> None:
    with (
        override_settings(CACHES={"default": cache_settings(OPTIONS=options)}),
        pytest.raises(ImproperlyConfigured, match=match),
    ):
        caches["default"]


@pytest.mark.parametrize(
    "bad",
    [
        {"local_cache_size": -1},
        {"max_fanout": 0},
        {"max_fanout": None},
        {"lock_lease": 0},
        {"lock_timeout": -5},
        {"namespace": "a/b"},
        {"namespace": ""},
    ],
)
def test_a_bad_cache_option_is_improperly_configured_with_the_cores_message(
    cache_settings: Callable[..., dict[str, Any]], bad: dict[str, Any]
) -> None:
    """The cache's own options are checked by the core (one message per option, whichever face is
    configured); Django sees that message as ImproperlyConfigured when the backend is built, before any
    request."""
    client = caches["default"].client
    with pytest.raises(ConfigurationError) as core_error:  # the core refuses it before anything is sent
        StoreCache(client, **bad)
    with (
        override_settings(CACHES={"bad": cache_settings(OPTIONS=bad)}),
        pytest.raises(ImproperlyConfigured) as django_error,
    ):
        caches["bad"]
    assert str(django_error.value) == f"sskv_mapping StateStoreCache: {core_error.value}"
    assert isinstance(django_error.value.__cause__, ConfigurationError)


def test_bad_location_is_improperly_configured() -> None:
    with (
        override_settings(CACHES={"default": {"BACKEND": BACKEND, "LOCATION": "http://127.0.0.1:1883"}}),
        pytest.raises(ImproperlyConfigured),
    ):
        caches["default"]


def test_location_env_reads_the_aio_variables(broker_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LOCATION: "env:"``: the connection comes from the AIO_* variables (as Azure IoT Operations sets them);
    OPTIONS' connection options still apply on top."""
    host, port = broker_url.removeprefix("mqtt://").rsplit(":", 1)
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", host)
    monkeypatch.setenv("AIO_BROKER_TCP_PORT", port)
    monkeypatch.setenv("AIO_MQTT_USE_TLS", "false")
    entry = {"BACKEND": BACKEND, "LOCATION": "env:", "OPTIONS": {"namespace": namespace, "client_id": "dj-env"}}
    with override_settings(CACHES={"default": entry}):
        backend = caches["default"]
        assert backend.client.async_client.settings.port == int(port)
        backend.set("from-env", {"ok": 1})
        assert backend.get("from-env") == {"ok": 1}


def test_location_as_a_connection_string(broker_url: str, namespace: str) -> None:
    host, port = broker_url.removeprefix("mqtt://").rsplit(":", 1)
    location = f"HostName={host};TcpPort={port};UseTls=false"
    with override_settings(
        CACHES={"default": {"BACKEND": BACKEND, "LOCATION": location, "OPTIONS": {"namespace": namespace}}}
    ):
        caches["default"].set("from-cs", 7)
        assert caches["default"].get("from-cs") == 7


def test_a_bad_aio_variable_is_improperly_configured_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("AIO_BROKER_TCP_PORT", "eighty")
    with (
        override_settings(CACHES={"default": {"BACKEND": BACKEND, "LOCATION": "env:"}}),
        pytest.raises(ImproperlyConfigured, match="AIO_BROKER_TCP_PORT"),
    ):
        caches["default"]


# -- timeouts ---------------------------------------------------------------------------------------------


def test_zero_timeout_means_do_not_cache() -> None:
    cache.set("key1", "eggs", 0)
    assert cache.get("key1") is None
    assert cache.add("key2", "ham", 0) is True  # the key was absent: Django's add() says True
    assert cache.get("key2") is None
    cache.set_many({"key3": "sausage", "key4": "lobster bisque"}, 0)
    assert cache.get("key3") is None and cache.get("key4") is None
    cache.set("key5", "belgian fries", timeout=60)
    assert cache.touch("key5", timeout=0) is True
    assert cache.get("key5") is None
    cache.set("key6", "present")
    cache.set("key6", "gone", 0)  # setting with 0 removes what was there
    assert cache.has_key("key6") is False


def test_negative_timeout_expires_at_once() -> None:
    cache.set("key1", "eggs", -1)
    assert cache.get("key1") is None
    cache.set("key2", "present")
    cache.set("key2", "gone", -10)
    assert cache.get("key2") is None
    assert cache.add("key3", "x", -1) is True and cache.get("key3") is None


def test_float_and_long_timeouts() -> None:
    cache.set("key1", "spam", 100.2)
    assert cache.get("key1") == "spam"
    assert cache.add("key2", "ham", 60 * 60 * 24 * 365) is True
    assert cache.get("key2") == "ham"


def test_expiration(deletions: Callable[..., Deletions]) -> None:
    expired = deletions(cache, "expire1")
    cache.set("expire1", "very quickly", 0.3)
    assert cache.get("expire1") == "very quickly"
    expired.wait()
    assert cache.get("expire1") is None
    assert cache.has_key("expire1") is False
    assert cache.add("expire1", "newvalue") is True  # an expired key is absent for add()
    assert cache.get("expire1") == "newvalue"


def test_none_timeout_never_expires(deletions: Callable[..., Deletions]) -> None:
    sentinel = deletions(cache, "sentinel")
    cache.set("forever", "value", None)
    cache.set("sentinel", "x", 0.3)  # written after: expires after any 0.3 s expiry "forever" could have had
    assert cache.add("forever", "other", None) is False
    sentinel.wait()
    assert cache.get("forever") == "value"


def test_default_timeout_comes_from_settings(deletions: Callable[..., Deletions]) -> None:
    short = caches["short"]  # TIMEOUT: 1
    expired = deletions(short, "k")
    short.set("k", "v")
    assert short.get("k") == "v"
    expired.wait()
    assert short.get("k") is None

    zero = caches["zero"]  # TIMEOUT: 0 -> nothing stays cached
    zero.set("k", "v")
    assert zero.add("k2", "v") is True
    assert zero.get_many(["k", "k2"]) == {}

    forever = caches["forever"]  # TIMEOUT: None -> never expires
    sentinel = deletions(forever, "sentinel")
    forever.set("k", "v")
    forever.set("sentinel", "x", 0.3)
    sentinel.wait()
    assert forever.get("k") == "v"


def test_touch(deletions: Callable[..., Deletions]) -> None:
    # touch() gives a key that never expired a short life ...
    expired = deletions(cache, "expire1")
    cache.set("expire1", "value", None)
    assert cache.touch("expire1", timeout=0.3) is True
    expired.wait()
    assert cache.has_key("expire1") is False
    # ... and one that was about to expire a long one (here: forever)
    sentinel = deletions(cache, "sentinel")
    cache.set("expire2", "value", timeout=0.3)
    assert cache.touch("expire2", None) is True
    cache.set("sentinel", "x", timeout=0.3)
    sentinel.wait()
    assert cache.get("expire2") == "value"
    # without a timeout: the default one
    cache.set("expire3", "value", timeout=0.3)
    assert cache.touch("expire3") is True
    assert cache.touch("nonexistent") is False
    assert cache.touch("nonexistent", None) is False


# -- keys: prefix, version, key function, warnings ----------------------------------------------------------


def test_key_prefix_isolates() -> None:
    cache.set("somekey", "value")
    assert caches["prefix"].has_key("somekey") is False
    caches["prefix"].set("somekey", "value2")
    assert cache.get("somekey") == "value" and caches["prefix"].get("somekey") == "value2"


def test_versions_isolate() -> None:
    v2 = caches["v2"]
    cache.set("answer1", 42)
    assert cache.get("answer1") == 42 and cache.get("answer1", version=1) == 42
    assert cache.get("answer1", version=2) is None and v2.get("answer1") is None
    assert v2.get("answer1", version=1) == 42
    cache.set("answer2", 42, version=2)
    assert cache.get("answer2") is None and v2.get("answer2") == 42
    assert cache.has_key("answer2", version=2) and not cache.has_key("answer2")
    assert cache.add("answer2", 37, version=1) is True and cache.add("answer2", 37, version=2) is False
    assert cache.get_many(["answer1", "answer2"], version=2) == {"answer2": 42}
    assert v2.get_many(["answer1", "answer2"], version=1) == {"answer1": 42, "answer2": 37}
    cache.set_many({"ford": 1}, version=2)
    assert v2.get("ford") == 1 and cache.get("ford") is None
    assert cache.incr("ford", version=2) == 2 and v2.decr("ford") == 1
    assert cache.delete("answer1", version=2) is False and cache.delete("answer1") is True
    cache.delete_many(["answer2"], version=2)
    assert v2.get("answer2") is None and cache.get("answer2") == 37


def test_incr_version_and_decr_version() -> None:
    cache.set("answer", 42, version=2)
    assert cache.get("answer") is None and cache.get("answer", version=2) == 42
    assert cache.incr_version("answer", version=2) == 3
    assert cache.get("answer", version=2) is None and cache.get("answer", version=3) == 42
    v2 = caches["v2"]
    v2.set("answer2", 42)
    assert v2.incr_version("answer2") == 3
    assert v2.get("answer2") is None and v2.get("answer2", version=3) == 42
    assert v2.incr_version("answer2", version=3, delta=2) == 5
    assert v2.decr_version("answer2", version=5) == 4
    assert v2.get("answer2", version=4) == 42 and v2.get("answer2", version=5) is None
    with pytest.raises(ValueError):
        cache.incr_version("does_not_exist")
    with pytest.raises(ValueError):
        cache.decr_version("does_not_exist")
    cache.set("null", None)
    assert cache.incr_version("null") == 2
    assert cache.has_key("null", version=2) and not cache.has_key("null")


def test_custom_key_function() -> None:
    caches["custom_key"].set("answer1", 42)
    assert cache.get("answer1") is None
    assert caches["custom_key"].get("answer1") == 42
    assert caches["custom_key2"].get("answer1") == 42  # the same function, named by dotted path
    assert caches["custom_key"].make_key("answer1") == "CUSTOM--1-answer1"


def test_cache_key_warnings_like_django_backends() -> None:
    """Keys memcached would refuse work here too, with Django's CacheKeyWarning, on every operation."""
    for key, expected in [
        ("key with spaces and 清", "Cache key contains characters that will cause errors if used with memcached"),
        ("a" * 251, "Cache key will cause errors if used with memcached"),
    ]:
        backend = caches["custom_key"]
        backend.key_func = lambda key, *args: key  # as Django's test does: the key as given
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("add", (key, 1)),
            ("get", (key,)),
            ("set", (key, 1)),
            ("incr", (key,)),
            ("decr", (key,)),
            ("touch", (key,)),
            ("has_key", (key,)),
            ("get_or_set", (key, 1)),
            ("get_many", ([key, "b"],)),
            ("set_many", ({key: 1, "b": 2},)),
            ("delete", (key,)),
            ("delete_many", ([key, "b"],)),
        ]
        for operation, args in operations:
            with pytest.warns(CacheKeyWarning) as record:
                getattr(backend, operation)(*args)
            assert any(str(w.message).startswith(expected) for w in record), operation
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheKeyWarning)
            backend.set(key, "stored")
            assert backend.get(key) == "stored"


# -- get_or_set ---------------------------------------------------------------------------------------------


def test_get_or_set() -> None:
    assert cache.get("projector") is None
    assert cache.get_or_set("projector", 42) == 42
    assert cache.get("projector") == 42
    assert cache.get_or_set("projector", 43) == 42
    assert cache.get_or_set("null", None) is None
    assert cache.has_key("null") is True  # the None was stored
    assert cache.get_or_set("brian", 1979, version=2) == 1979
    assert cache.get("brian") is None and cache.get("brian", version=2) == 1979
    with pytest.raises(TypeError, match=r"get_or_set\(\) missing 1 required positional argument: 'default'"):
        cache.get_or_set("brian")


def test_get_or_set_callable_runs_only_when_missing() -> None:
    calls: list[int] = []

    def my_callable() -> str:
        calls.append(threading.get_ident())
        return "value"

    assert cache.get_or_set("mykey", my_callable) == "value"
    assert cache.get_or_set("mykey", my_callable) == "value"
    assert calls == [threading.get_ident()]  # once, in the calling thread (where a request's DB connection is)
    assert cache.get_or_set("mykey2", my_callable()) == "value"
    assert cache.get_or_set("zero", my_callable, timeout=0) == "value"  # returned, not kept
    assert cache.has_key("zero") is False


# -- namespaces, connection, close --------------------------------------------------------------------------


def test_clear_only_clears_its_namespace() -> None:
    cache.set_many({"key1": "spam", "key2": "eggs"})
    caches["prefix"].set("key3", "same namespace, other prefix")
    caches["other_ns"].set("key1", "elsewhere")
    cache.clear()
    assert cache.get_many(["key1", "key2"]) == {}
    assert caches["prefix"].get("key3") is None  # a namespace is cleared whole, as Redis' FLUSHDB would
    assert caches["other_ns"].get("key1") == "elsewhere"


def test_close_keeps_the_shared_connection() -> None:
    cache.set("k", "v")
    client = caches["default"].client
    cache.close()
    signals.request_finished.send(sender=None)  # what Django does after every request: caches.close_all()
    assert client.state is ConnectionState.CONNECTED
    assert cache.get("k") == "v"
    assert caches["default"].client is client


def test_close_all_closes_and_the_next_use_reconnects() -> None:
    cache.set("k", "v")
    client = caches["default"].client
    close_all()
    assert client.state is ConnectionState.CLOSED
    assert cache.get("k") == "v"  # a new shared connection
    assert caches["default"].client is not client


def test_the_max_fanout_option_bounds_the_fan_out(cache_settings: Callable[..., dict[str, Any]]) -> None:
    with override_settings(CACHES={"bounded": cache_settings(OPTIONS={"max_fanout": 7})}):
        assert caches["bounded"].state_store_cache._core.max_fanout == 7


def test_local_cache_option(cache_settings: Callable[..., dict[str, Any]]) -> None:
    with override_settings(CACHES={"default": cache_settings(OPTIONS={"local_cache_size": 100})}):
        store = caches["default"].state_store_cache
        assert store.local_cache is not None
        cache.set("k", {"v": 1})
        assert cache.get("k") == {"v": 1} and cache.get("k") == {"v": 1}
        cache.set("k", {"v": 2})
        assert cache.get("k") == {"v": 2}  # our own writes are seen at once
        assert cache.add("n", 0) is True and cache.incr("n") == 1
        assert cache.get("n") == 1
        cache.delete("k")
        assert cache.get("k") is None and not cache.has_key("k")


def test_one_connection_and_one_store_cache_per_process() -> None:
    seen: dict[str, Any] = {}

    def in_thread() -> None:
        backend = caches["default"]  # Django builds a backend object per thread
        seen["backend"], seen["store"], seen["client"] = backend, backend.state_store_cache, backend.client

    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    here = caches["default"]
    assert seen["backend"] is not here
    assert seen["store"] is here.state_store_cache and seen["client"] is here.client
    assert caches["prefix"].state_store_cache is here.state_store_cache  # KEY_PREFIX only changes the keys
    assert caches["other_ns"].client is here.client  # another namespace: same connection
    assert caches["other_ns"].state_store_cache is not here.state_store_cache


@pytest.mark.parametrize("connections", ["one connection", "two connections"])
def test_incr_is_exact_across_threads_and_connections(
    cache_settings: Callable[..., dict[str, Any]], connections: str
) -> None:
    second = cache_settings() if connections == "one connection" else cache_settings(OPTIONS={"timeout": 9.5})
    with override_settings(CACHES={"default": cache_settings(), "second": second}):
        cache.set("counter", 0, None)
        if connections == "two connections":  # another request timeout: another shared client
            assert caches["second"].client is not caches["default"].client
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def bump(alias: str) -> None:
            try:
                backend = caches[alias]
                start.wait()
                for _ in range(50):
                    backend.incr("counter")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=bump, args=(a,)) for a in ("default", "second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        assert cache.get("counter") == 100


def test_shared_dict_uses_the_cache_connection(namespace: str) -> None:
    config = shared_dict(f"{namespace}-config")
    assert config is shared_dict(f"{namespace}-config")
    assert config.client is caches["default"].client
    config["feature"] = True
    assert dict(config) == {"feature": True}
    with (
        override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}),
        pytest.raises(ImproperlyConfigured),
    ):
        shared_dict("x")


def test_importing_without_django_names_the_extra() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'django':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "try:\n"
        "    import sskv_mapping.integrations.django\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'sskv-mapping[django]'" in out.stdout, out.stdout + out.stderr


# -- async ----------------------------------------------------------------------------------------------------

ASYNC_METHODS = [
    "aget",
    "aset",
    "aadd",
    "atouch",
    "adelete",
    "ahas_key",
    "aget_many",
    "aset_many",
    "adelete_many",
    "aclear",
    "aincr",
    "adecr",
    "aget_or_set",
    "aclose",
]


def test_async_methods_are_native() -> None:
    for name in ASYNC_METHODS:
        assert getattr(StateStoreCache, name) is not getattr(BaseCache, name), name


@pytest.fixture
def no_thread_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Django's default a* methods go through sync_to_async: make any such hop fail the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("sync_to_async was used")

    monkeypatch.setattr(django_cache_base, "sync_to_async", refuse)


@pytest.mark.usefixtures("no_thread_hop")
async def test_async_api() -> None:
    await cache.aset("key", "value")
    assert await cache.aget("key") == "value"
    assert await cache.aget("missing", "default") == "default"
    assert await cache.ahas_key("key") is True and await cache.ahas_key("missing") is False
    assert await cache.aadd("key", "other") is False and await cache.aadd("key2", "v2") is True
    assert await cache.aset_many({"a": 1, "b": 2}) == []
    assert await cache.aget_many(["a", "b", "zz"]) == {"a": 1, "b": 2}
    assert await cache.aget_many([]) == {}
    await cache.adelete_many(["a", "zz"])
    assert await cache.aget_many(["a", "b"]) == {"b": 2}
    assert await cache.aincr("b", 5) == 7 and await cache.adecr("b", 10) == -3
    with pytest.raises(ValueError, match=r"^Key 'nope' not found$"):
        await cache.aincr("nope")
    with pytest.raises(ValueError, match=r"^Key 'nope' not found$"):
        await cache.adecr("nope")
    assert await cache.atouch("key", None) is True and await cache.atouch("missing") is False
    assert await cache.adelete("key") is True and await cache.adelete("key") is False
    await cache.aset("zero", "x", 0)
    assert await cache.aget("zero") is None
    assert await cache.aincr_version("key2") == 2
    assert await cache.aget("key2", version=2) == "v2" and await cache.aget("key2") is None
    assert await cache.adecr_version("key2", version=2) == 1
    await caches["other_ns"].aset("kept", 1)
    await cache.aclear()
    assert await cache.aget_many(["key2", "b"]) == {}
    assert await caches["other_ns"].aget("kept") == 1
    await cache.aclose()
    assert await cache.aget("gone", "still works") == "still works"


@pytest.mark.usefixtures("no_thread_hop")
async def test_async_get_or_set_runs_the_callable_on_the_callers_loop() -> None:
    ran_in: list[int] = []

    def sync_default() -> str:
        ran_in.append(threading.get_ident())
        return "computed"

    async def async_default() -> str:
        ran_in.append(threading.get_ident())
        return "async computed"

    assert await cache.aget_or_set("k", sync_default) == "computed"
    assert await cache.aget_or_set("k", sync_default) == "computed"
    assert await cache.aget_or_set("k2", async_default) == "async computed"
    assert ran_in == [threading.get_ident()] * 2  # the test's own thread, once per missing key
    assert await cache.aget_or_set("k3", 7) == 7 and await cache.aget("k3") == 7


async def test_async_incr_is_exact_under_concurrency() -> None:
    await cache.aset("counter", 0, None)
    results = await asyncio.gather(*(cache.aincr("counter") for _ in range(50)))
    assert sorted(results) == list(range(1, 51))
    assert await cache.aget("counter") == 50


async def test_async_key_warnings() -> None:
    with pytest.warns(CacheKeyWarning):
        await cache.aset("key with spaces", 1)
    with pytest.warns(CacheKeyWarning):
        assert await cache.aget("key with spaces") == 1
