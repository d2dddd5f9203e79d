"""Litestar's ``Store`` protocol on :class:`StateStoreStore` against mosquitto and the emulator process: get/set
(str and bytes, special keys), expiry, ``renew_for``, ``expires_in``, ``exists``, ``delete``, ``delete_all``,
namespaces (isolated, bulk actions go down and never up, also from another process's store), ``StoreRegistry``,
the lifecycle (lifespan on the app's loop), and a Litestar app using it for server-side sessions and the response
cache.

Expiry is observed through the key's KEYNOTIFY DELETE (the emulator expires keys on a timer), never by sleeping.
"""

from __future__ import annotations

import asyncio
import itertools
import string
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("litestar")

from litestar import Litestar, Request, get
from litestar.middleware.session.server_side import ServerSideSessionConfig
from litestar.stores.registry import StoreRegistry
from litestar.testing import TestClient

from sskv_mapping import (
    AsyncStateStoreClient,
    ClientStateError,
    ConfigurationError,
    ConnectionSettings,
    DecodeError,
    KeyOperation,
)
from sskv_mapping.integrations.litestar import StateStoreStore
from tests._support.waiting import Notified, eventually


@pytest.fixture
async def store(broker_url: str, namespace: str) -> AsyncIterator[StateStoreStore]:
    s = StateStoreStore(broker_url, namespace=namespace)
    async with s:
        yield s
        await s.delete_all()


Watch = Callable[[StateStoreStore, str], Awaitable[Notified]]


@pytest.fixture
def watch() -> Watch:
    async def start(store: StateStoreStore, key: str) -> Notified:
        notified = Notified()
        await store.client.subscribe_key(await store._caches()[0].data_key(key), notified)
        return notified

    return start


# -- get / set / delete / exists --------------------------------------------------------------------------


async def test_get_and_set(store: StateStoreStore) -> None:
    assert await store.get("missing") is None
    await store.set("bytes", b"\x00value\xff", 60)
    await store.set("text", "välue")
    assert await store.get("bytes") == b"\x00value\xff"
    assert await store.get("text") == "välue".encode()
    assert await store.get(key="text") == "välue".encode()  # Litestar's response cache passes key=


@pytest.mark.parametrize("key", [*string.punctuation, "foo\xc3\xbc", "..", "a/b/c"])
async def test_special_characters_in_keys(store: StateStoreStore, key: str) -> None:
    await store.set(key, b"value")
    assert await store.get(key) == b"value"


async def test_delete_and_exists(store: StateStoreStore) -> None:
    assert await store.exists("k") is False
    await store.delete("k")  # absent: a no-op
    await store.set("k", b"v")
    assert await store.exists("k") is True
    await store.delete("k")
    assert await store.exists("k") is False
    assert await store.get("k") is None


# -- expiry -----------------------------------------------------------------------------------------------


async def test_an_entry_expires(store: StateStoreStore, watch: Watch) -> None:
    notified = await watch(store, "k")
    await store.set("k", b"v", expires_in=timedelta(milliseconds=300))
    await notified.wait_for(KeyOperation.DELETE)
    assert await store.get("k") is None
    assert await store.expires_in("k") is None


async def test_zero_and_none_never_expire_and_negative_expires_at_once(store: StateStoreStore) -> None:
    await store.set("none", b"v", None)
    await store.set("zero", b"v", 0)
    assert await store.expires_in("none") == -1
    assert await store.expires_in("zero") == -1
    await store.set("gone", b"v", -1)
    assert await store.exists("gone") is False


async def test_expires_in(store: StateStoreStore) -> None:
    assert await store.expires_in("k") is None
    await store.set("k", b"v")
    assert await store.expires_in("k") == -1
    await store.set("k", b"v", expires_in=10)
    assert await store.expires_in("k") == 10
    await store.set("k", b"v", expires_in=timedelta(minutes=2))
    assert await store.expires_in("k") == 120


async def test_expires_in_counts_down_with_the_clock(broker_url: str, namespace: str) -> None:
    now = [1_000_000.0]
    store = StateStoreStore(broker_url, namespace=namespace, wall_clock=lambda: now[0])
    async with store:
        await store.set("k", b"v", expires_in=100)
        now[0] += 30.5
        assert await store.expires_in("k") == 70
        await store.set("later", b"w", expires_in=300)
        now[0] += 69.5  # the envelope's time: expired by this clock, whatever the service's own TTL still says
        assert await store.get("k") is None
        assert await store.get("k", renew_for=60) is None  # an expired entry is not renewed back to life
        assert await store.exists("k") is False
        assert await store.expires_in("k") is None
        assert await store.expires_in("later") == 231  # the other entry's still counts down
        await store.delete_all()


async def test_renew_for_restarts_the_expiry(store: StateStoreStore, watch: Watch) -> None:
    await store.set("renewed", b"v", expires_in=timedelta(milliseconds=300))
    assert await store.get("renewed", renew_for=60) == b"v"
    assert await store.expires_in("renewed") == 60
    notified = await watch(store, "witness")
    await store.set("witness", b"w", expires_in=timedelta(milliseconds=300))
    await notified.wait_for(KeyOperation.DELETE)  # 'renewed' would have gone first without the renewal
    assert await store.get("renewed") == b"v"


async def test_renew_for_leaves_entries_without_expiry_alone(store: StateStoreStore) -> None:
    await store.set("k", b"v")
    assert await store.get("k", renew_for=timedelta(seconds=10)) == b"v"
    assert await store.expires_in("k") == -1


async def test_a_value_not_written_by_the_store_is_reported(store: StateStoreStore) -> None:
    foreign = await store._caches()[0].data_key("foreign")
    await store.client.set(foreign, b"\x07not an envelope")
    with pytest.raises(DecodeError, match="foreign"):
        await store.get("foreign")
    await store.client.delete(foreign)


# -- namespaces and delete_all ----------------------------------------------------------------------------


async def test_delete_all(store: StateStoreStore) -> None:
    keys = [f"key-{i}" for i in range(10)]
    for i, key in enumerate(keys):
        await store.set(key, b"value", expires_in=10 if i % 2 else None)
    await store.delete_all()
    for key in keys:
        assert await store.get(key) is None


async def test_namespaces_are_isolated(store: StateStoreStore) -> None:
    child = store.with_namespace("foo")
    assert child.namespace == f"{store.namespace}.foo"
    assert store.with_namespace("foo") is child
    await store.set("bar", b"parent")
    await child.set("bar", b"child")
    assert await store.get("bar") == b"parent"
    assert await child.get("bar") == b"child"


async def test_delete_all_does_not_propagate_up(store: StateStoreStore) -> None:
    child = store.with_namespace("FOO")
    await child.set("foo", b"foo-value")
    await store.set("bar", b"bar-value")
    await child.delete_all()
    assert await child.get("foo") is None
    assert await store.get("bar") == b"bar-value"


async def test_delete_all_propagates_down_to_every_descendant(store: StateStoreStore) -> None:
    grandchild = store.with_namespace("a").with_namespace("b")
    sibling = store.with_namespace("c")
    await grandchild.set("k", b"deep")
    await sibling.set("k", b"side")
    await store.set("k", b"top")
    await store.delete_all()
    assert [await s.get("k") for s in (store, grandchild, sibling)] == [None, None, None]


async def test_delete_all_reaches_children_another_process_created(
    store: StateStoreStore, broker_url: str, namespace: str
) -> None:
    sessions = store.with_namespace("sessions")
    await sessions.set("sid", b"data")
    before = sessions._caches()[0].generation
    elsewhere = StateStoreStore(broker_url, namespace=namespace)  # its own connection, no children made
    async with elsewhere:
        await elsewhere.delete_all()
    # another connection learns of the clear by KEYNOTIFY, within milliseconds of delete_all returning
    await eventually(lambda: sessions._caches()[0].generation != before)
    assert await sessions.get("sid") is None


def test_namespace_names_are_checked(broker_url: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        StateStoreStore(broker_url, namespace="a.b")
    store = StateStoreStore(broker_url, namespace="ok")
    for bad in ("", "x.y", "x/y", "x#y", "x!y"):
        with pytest.raises(ValueError, match="namespace"):
            store.with_namespace(bad)


def test_store_registry_default_factory(broker_url: str, namespace: str) -> None:
    root = StateStoreStore(broker_url, namespace=namespace)
    registry = StoreRegistry(default_factory=root.with_namespace)
    sessions = registry.get("sessions")
    assert isinstance(sessions, StateStoreStore)
    assert registry.get("sessions") is sessions
    assert sessions.namespace == f"{namespace}.sessions"


# -- lifecycle --------------------------------------------------------------------------------------------


async def test_using_a_store_that_is_not_open_says_how_to_open_it(broker_url: str, namespace: str) -> None:
    store = StateStoreStore(broker_url, namespace=namespace)
    with pytest.raises(ClientStateError, match="lifespan"):
        await store.get("k")
    async with store:
        await store.set("k", b"v")
    with pytest.raises(ClientStateError):
        await store.with_namespace("child").get("k")
    async with store:  # reopened: a new client, the same entries
        assert await store.get("k") == b"v"
        await store.delete_all()


async def test_a_given_client_is_used_and_left_open(broker_url: str, namespace: str) -> None:
    client = AsyncStateStoreClient(settings=ConnectionSettings.from_url(broker_url))
    await client.connect()
    try:
        store = StateStoreStore(namespace=namespace, client=client)
        async with store:
            assert store.client is client
            await store.set("k", b"v")
            assert await store.get("k") == b"v"
            await store.delete_all()
        assert client.state.value == "connected"
    finally:
        await client.close()


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TypeError, match="bogus"):
        StateStoreStore(bogus=1)


@pytest.mark.parametrize(
    ("option", "bad"),
    [("local_cache_size", -1), ("local_cache_size", "10"), ("local_cache_size", True), ("max_staleness", 0)],
)
def test_bad_local_cache_options_are_refused_at_once(option: str, bad: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        StateStoreStore(**{option: bad})  # type: ignore[arg-type]  # bad values on purpose


# -- with a local cache ------------------------------------------------------------------------------------


async def _until(read: Callable[[], Awaitable[object]], wanted: object) -> None:
    """Wait (5 s at most) until ``read()`` answers ``wanted``: a notification's invalidation arrives after the write."""
    async with asyncio.timeout(5):
        while await read() != wanted:  # noqa: ASYNC110 - the local cache offers no event for an applied invalidation
            await asyncio.sleep(0.005)


async def test_a_local_cache_serves_hot_entries_and_follows_other_writers(broker_url: str, namespace: str) -> None:
    local = StateStoreStore(broker_url, namespace=namespace, local_cache_size=100)
    other = StateStoreStore(broker_url, namespace=namespace)
    async with local, other:
        await other.set("k", b"one", expires_in=60)
        assert await local.get("k") == b"one"
        sent = local.client.requests_sent
        assert await local.get("k") == b"one"
        assert await local.exists("k")
        assert await local.expires_in("k") == 60
        assert local.client.requests_sent == sent  # answered in process
        await other.set("k", b"two", expires_in=60)
        await _until(lambda: local.get("k"), b"two")
        await other.delete("k")
        await _until(lambda: local.exists("k"), False)
        await local.delete_all()


async def test_a_local_entry_expires_by_the_wall_clock_too(broker_url: str, namespace: str) -> None:
    now = [1_000_000.0]
    store = StateStoreStore(broker_url, namespace=namespace, local_cache_size=100, wall_clock=lambda: now[0])
    async with store:
        await store.set("k", b"v", expires_in=100)
        assert await store.get("k") == b"v"
        sent = store.client.requests_sent
        now[0] += 100
        assert await store.get("k") is None
        assert store.client.requests_sent == sent  # the local entry's envelope said so, not the service
        await store.delete_all()


# -- in a Litestar app ------------------------------------------------------------------------------------


def _app(broker_url: str, namespace: str, renders: itertools.count[int]) -> Litestar:
    store = StateStoreStore(broker_url, namespace=namespace)

    @get("/count")
    async def count(request: Request[Any, Any, Any]) -> dict[str, int]:
        n = int(request.session.get("n", 0)) + 1
        request.set_session({"n": n})
        return {"n": n}

    @get("/cached", cache=60)
    async def cached() -> str:
        return f"render {next(renders)}"

    return Litestar(
        route_handlers=[count, cached],
        stores=StoreRegistry(default_factory=store.with_namespace),
        lifespan=[store.lifespan],
        middleware=[ServerSideSessionConfig(renew_on_access=True).middleware],
    )


def test_sessions_and_response_cache_in_an_app_shared_by_two_instances(broker_url: str, namespace: str) -> None:
    renders = itertools.count(1)
    app_a, app_b = _app(broker_url, namespace, renders), _app(broker_url, namespace, renders)
    with TestClient(app_a) as a, TestClient(app_b) as b:
        assert a.get("/count").json() == {"n": 1}
        assert a.get("/count").json() == {"n": 2}
        b.cookies = a.cookies  # the same browser reaching the other instance
        assert b.get("/count").json() == {"n": 3}
        assert a.get("/cached").text == "render 1"
        assert b.get("/cached").text == "render 1"  # cached by instance a, served by instance b
        sessions = app_a.stores.get("sessions")
        assert isinstance(sessions, StateStoreStore)
        assert sessions.namespace == f"{namespace}.sessions"
        root = app_a.stores.get("response_cache")
        assert isinstance(root, StateStoreStore)
    # the lifespan closed the clients: a fresh store on the namespace clears everything
    cleanup = StateStoreStore(broker_url, namespace=namespace)

    async def clear() -> None:
        async with cleanup:
            await cleanup.delete_all()

    asyncio.run(clear())


# -- one store from two event loops (a Litestar test client's app runs on a loop of its own thread) --------------


class _LoopThread:
    """An event loop running in a thread of its own, as a Litestar ``TestClient`` runs the app."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.start()

    def start(self) -> None:
        import threading

        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


async def _round(store: StateStoreStore, key: str) -> list[object]:
    """One of each call on ``key``, and what each answered."""
    await store.set(key, b"v", expires_in=60)
    answers: list[object] = [await store.get(key), await store.exists(key), await store.expires_in(key)]
    await store.delete(key)
    return [*answers, await store.get(key)]


async def test_a_store_opened_on_another_loop_answers_from_this_one(broker_url: str, namespace: str) -> None:
    # the stall this replaced lasted the whole request timeout: with a small one it would raise RequestTimeoutError
    other = _LoopThread()
    store = StateStoreStore(broker_url, namespace=namespace, request_timeout=3)
    try:
        other.run(store.__aenter__())
        other.run(_round(store, "warm-up"))  # the namespace's first-use requests (its generation), once
        sent = store.client.requests_sent
        assert other.run(_round(store, "there")) == [b"v", True, 60, None]
        at_home = store.client.requests_sent - sent
        sent = store.client.requests_sent
        for n in range(10):  # from the test's loop: the same answers, and the same requests, none sent again
            assert await _round(store, f"here{n}") == [b"v", True, 60, None]
        assert store.client.requests_sent - sent == 10 * at_home
        other.run(store.set("made-there", b"1", expires_in=60))
        await store.with_namespace("child").set("c", b"3")
        assert await store.get("made-there") == b"1"
        await store.delete_all()
        assert await store.with_namespace("child").get("c") is None
        assert other.run(store.get("made-there")) is None
    finally:
        other.run(store.__aexit__(None, None, None))
        other.stop()
        other.loop.close()


async def test_a_store_whose_loop_stopped_fails_at_once(broker_url: str, namespace: str) -> None:
    other = _LoopThread()
    store = StateStoreStore(broker_url, namespace=namespace)
    other.run(store.__aenter__())
    other.stop()
    try:
        with pytest.raises(ClientStateError, match="no longer running"):
            await store.get("k")
    finally:
        other.start()  # its loop again, to close the store where it lives
        other.run(store.__aexit__(None, None, None))
        other.stop()
        other.loop.close()
