"""Flask-Caching's public cache API through ``Cache(app)`` on the state store backend, against mosquitto and the
emulator process: the calls a Flask app makes (``cache.get/set/...``, ``@cache.cached``, ``@cache.memoize``),
Flask-Caching's timeout rule (``0`` = never expires), one connection per process, namespaces.

Expiry is observed through the key's KEYNOTIFY DELETE (the emulator expires keys on a timer), never by sleeping.
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("flask_caching")

from flask import Flask, Response, make_response
from flask_caching import Cache

from sskv_mapping import KeyOperation, PickleCodec
from sskv_mapping.codecs import MsgpackCodec
from sskv_mapping.integrations.flask_caching import StateStoreCache

BACKEND = "sskv_mapping.integrations.flask_caching.StateStoreCache"

AppFactory = Callable[..., tuple[Flask, Cache]]


@pytest.fixture
def make_app(broker_url: str, namespace: str) -> Iterator[AppFactory]:
    made: list[StateStoreCache] = []

    def make(**config: Any) -> tuple[Flask, Cache]:
        app = Flask(f"test-{len(made)}")
        app.config.update(
            CACHE_TYPE=BACKEND, CACHE_SSKV_URL=broker_url, CACHE_KEY_PREFIX=namespace, CACHE_DEFAULT_TIMEOUT=300
        )
        app.config.update(config)
        cache = Cache(app)
        with app.app_context():
            backend = cache.cache
        assert isinstance(backend, StateStoreCache)
        made.append(backend)
        return app, cache

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def app_cache(make_app: AppFactory) -> Iterator[Cache]:
    app, cache = make_app()
    with app.app_context():
        yield cache


def _backend(cache: Cache) -> StateStoreCache:
    backend = cache.cache
    assert isinstance(backend, StateStoreCache)
    return backend


def _expiry_of(cache: Cache, key: str) -> Any:
    """A started watch on the key's data key: ``.next(timeout)`` gives the next change (an expiry's DELETE)."""
    backend = _backend(cache)
    return backend.sskv_cache.client.watch(backend.sskv_cache.data_key(key)).start()


# -- the factory and the configuration --------------------------------------------------------------------


def test_cache_type_by_dotted_path_builds_our_backend_on_the_configured_namespace(
    make_app: AppFactory, namespace: str
) -> None:
    app, cache = make_app(CACHE_DEFAULT_TIMEOUT=dt.timedelta(minutes=2))
    with app.app_context():
        backend = _backend(cache)
        assert backend.namespace == namespace
        assert backend.sskv_cache.default_ttl == 120.0
        assert backend.default_timeout == 120  # cachelib's whole seconds


def test_one_connection_per_process(make_app: AppFactory) -> None:
    (app_a, cache_a), (app_b, cache_b) = make_app(), make_app(CACHE_KEY_PREFIX="otherns")
    with app_a.app_context():
        client_a = _backend(cache_a).sskv_cache.client
    with app_b.app_context():
        client_b = _backend(cache_b).sskv_cache.client
    assert client_a is client_b


def test_cache_options_reach_the_backend(make_app: AppFactory) -> None:
    app, cache = make_app(CACHE_OPTIONS={"codec": "str", "local_cache_size": 16})
    with app.app_context():
        backend = _backend(cache)
        assert backend.sskv_cache.async_cache.codec.name == "str"
        assert backend.sskv_cache.local_cache is not None
        cache.set("s", "text")
        assert cache.get("s") == "text"


def test_unknown_options_are_refused(make_app: AppFactory) -> None:
    with pytest.raises(TypeError, match="bogus"):
        make_app(CACHE_OPTIONS={"bogus": 1})


def test_a_namespace_with_a_slash_is_refused(make_app: AppFactory) -> None:
    with pytest.raises(ValueError, match="namespace"):
        make_app(CACHE_KEY_PREFIX="a/b")


# -- the cache API ----------------------------------------------------------------------------------------


def test_get_set_has_delete(app_cache: Cache) -> None:
    assert app_cache.get("missing") is None
    assert app_cache.has("missing") is False
    assert app_cache.set("k", {"a": [1, 2]}) is True
    assert app_cache.get("k") == {"a": [1, 2]}
    assert app_cache.has("k") is True
    assert app_cache.delete("k") is True
    assert app_cache.delete("k") is False
    assert app_cache.get("k") is None


def test_add_only_when_absent(app_cache: Cache) -> None:
    assert app_cache.add("k", 1) is True
    assert app_cache.add("k", 2) is False
    assert app_cache.get("k") == 1


def test_many(app_cache: Cache) -> None:
    assert sorted(app_cache.set_many({"a": 1, "b": 2, "c": None})) == ["a", "b", "c"]
    assert app_cache.get_many("a", "missing", "b") == [1, None, 2]
    assert app_cache.get_dict("a", "c", "missing") == {"a": 1, "c": None, "missing": None}
    assert app_cache.has("c") is True  # a stored None is a value
    assert app_cache.delete_many("a", "missing") == ["a", "missing"]  # absent afterwards counts as deleted
    assert app_cache.get_many("a", "b") == [None, 2]


def test_inc_and_dec(app_cache: Cache) -> None:
    backend = _backend(app_cache)
    assert backend.inc("n") == 1  # absent: starts at delta
    assert backend.inc("n", 5) == 6
    assert backend.dec("n", 2) == 4
    assert backend.dec("fresh", 3) == -3
    app_cache.set("text", "abc")
    with pytest.raises(TypeError):
        backend.inc("text")


def test_clear_deletes_only_this_namespace(make_app: AppFactory) -> None:
    app_a, cache_a = make_app()
    app_b, cache_b = make_app(CACHE_KEY_PREFIX=f"other{uuid.uuid4().hex[:8]}")
    with app_a.app_context():
        cache_a.set_many({"x": 1, "y": 2})
    with app_b.app_context():
        cache_b.set("x", "kept")
    with app_a.app_context():
        assert cache_a.clear() is True
        assert cache_a.get_many("x", "y") == [None, None]
    with app_b.app_context():
        assert cache_b.get("x") == "kept"


def test_a_second_app_on_the_namespace_sees_the_first_ones_writes(make_app: AppFactory) -> None:
    app_a, cache_a = make_app()
    app_b, cache_b = make_app()
    with app_a.app_context():
        cache_a.set("shared", "from a")
    with app_b.app_context():
        assert cache_b.get("shared") == "from a"
        cache_b.delete("shared")
    with app_a.app_context():
        assert cache_a.get("shared") is None


# -- timeouts: Flask-Caching's convention -----------------------------------------------------------------


def test_a_positive_timeout_expires_the_key(app_cache: Cache) -> None:
    with _expiry_of(app_cache, "short") as changes:
        app_cache.set("short", "v", timeout=1)
        assert changes.next(timeout=5).op is KeyOperation.SET
        assert app_cache.get("short") == "v"
        assert changes.next(timeout=5).op is KeyOperation.DELETE
    assert app_cache.get("short") is None


def test_none_means_the_configured_default_timeout(make_app: AppFactory) -> None:
    app, cache = make_app(CACHE_DEFAULT_TIMEOUT=1)
    with app.app_context(), _expiry_of(cache, "d") as changes:
        cache.set("d", "v")  # timeout=None: the app's default (1 s)
        assert changes.next(timeout=5).op is KeyOperation.SET
        assert changes.next(timeout=5).op is KeyOperation.DELETE
        assert cache.get("d") is None


def test_zero_means_never_expires(make_app: AppFactory) -> None:
    # 'forever' set with timeout=0 is still there once 'witness' (written after it, 1 s) has expired: the
    # emulator expires keys in deadline order, so 'forever' would have gone first had it a default timeout.
    app, cache = make_app(CACHE_DEFAULT_TIMEOUT=1)
    with app.app_context(), _expiry_of(cache, "witness") as changes:
        cache.set("forever", "v", timeout=0)
        cache.set("witness", "w")
        assert changes.next(timeout=5).op is KeyOperation.SET
        assert changes.next(timeout=5).op is KeyOperation.DELETE
        assert cache.get("forever") == "v"


def test_a_default_timeout_of_zero_never_expires(make_app: AppFactory) -> None:
    app, cache = make_app(CACHE_DEFAULT_TIMEOUT=0)
    with app.app_context():
        assert _backend(cache).sskv_cache.default_ttl is None


def test_a_negative_timeout_expires_at_once(app_cache: Cache) -> None:
    app_cache.set("k", "v")
    app_cache.set("k", "new", timeout=-1)
    assert app_cache.get("k") is None
    assert app_cache.add("gone", "v", timeout=-5) is True
    assert app_cache.has("gone") is False


def test_touch_restarts_the_expiry(app_cache: Cache) -> None:
    backend = _backend(app_cache)
    app_cache.set("k", "v", timeout=1)
    with _expiry_of(app_cache, "witness") as changes:
        assert backend.touch("k", timeout=0) is True  # now never expires
        app_cache.set("witness", "w", timeout=1)
        assert changes.next(timeout=5).op is KeyOperation.SET
        assert changes.next(timeout=5).op is KeyOperation.DELETE
    assert app_cache.get("k") == "v"
    assert backend.touch("missing") is False


# -- the decorators ---------------------------------------------------------------------------------------


def test_cached_view_is_served_from_the_store(make_app: AppFactory) -> None:
    app, cache = make_app()
    calls = itertools.count(1)

    @app.route("/page")
    @cache.cached(timeout=60)
    def page() -> str:
        return f"render #{next(calls)}"

    client = app.test_client()
    assert client.get("/page").get_data(as_text=True) == "render #1"
    assert client.get("/page").get_data(as_text=True) == "render #1"
    with app.app_context():
        cache.delete("view//page")  # Flask-Caching's key for the view
    assert client.get("/page").get_data(as_text=True) == "render #2"


def test_cached_response_objects_with_a_pickle_codec(make_app: AppFactory) -> None:
    codec = PickleCodec(key=b"0123456789abcdef-test-secret")
    app, cache = make_app(CACHE_OPTIONS={"codec": codec})
    calls = itertools.count(1)

    @app.route("/resp")
    @cache.cached(timeout=60)
    def resp() -> Response:
        response = make_response(f"body {next(calls)}", 201)
        response.headers["X-Made"] = "yes"
        return response

    client = app.test_client()
    first, second = client.get("/resp"), client.get("/resp")
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.get_data(as_text=True) == "body 1"
    assert second.headers["X-Made"] == "yes"


def test_memoize_and_delete_memoized(app_cache: Cache) -> None:
    calls: list[int] = []

    @app_cache.memoize(timeout=60)
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    assert (square(3), square(3), square(4)) == (9, 9, 16)
    assert calls == [3, 4]
    app_cache.delete_memoized(square, 3)
    assert square(3) == 9
    assert calls == [3, 4, 3]


def test_the_backend_on_its_own_without_flask(broker_url: str, namespace: str) -> None:
    backend = StateStoreCache(url=broker_url, namespace=namespace, default_timeout=0)
    try:
        assert backend.set("k", [1, 2]) is True
        assert backend.get("k") == [1, 2]
        assert backend.sskv_cache.default_ttl is None
        assert repr(backend) == f"<StateStoreCache namespace={namespace!r}>"
    finally:
        backend.clear()
        backend.close()


def test_the_default_pickles_anything_signed_with_the_apps_secret_key(make_app: AppFactory) -> None:
    app, cache = make_app(SECRET_KEY="a flask app secret")
    codec = _backend(cache).sskv_cache.async_cache.codec
    assert isinstance(codec, PickleCodec) and codec.signed and codec.bind_key
    with app.app_context():
        value = {"t": (1, 2), "b": b"\x00", 3: {4, 5}}
        cache.set("v", value)
        assert cache.get("v") == value


def test_without_a_secret_key_the_default_keeps_bytes_and_int_keys_and_never_unpickles(
    make_app: AppFactory,
) -> None:
    app, cache = make_app()
    codec = _backend(cache).sskv_cache.async_cache.codec
    assert isinstance(codec, MsgpackCodec)
    with app.app_context():
        value = {"b": b"\x00\xff", 1: [1, {2: "two"}], "n": None}
        cache.set("v", value)
        assert cache.get("v") == value
