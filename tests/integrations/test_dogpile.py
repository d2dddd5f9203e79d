"""The dogpile.cache backend beyond dogpile's own suites (tests/integrations/test_dogpile_suite.py): our codecs
under dogpile's metadata, the mutex across two connections with its fencing token, the store's own expiry,
bad arguments, and a store that cannot be reached (an error, never a miss); on mosquitto and the emulator."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

pytest.importorskip("dogpile.cache")

from dogpile.cache import make_region
from dogpile.cache.api import NO_VALUE
from dogpile.cache.region import CacheRegion

from sskv_mapping import ClientStateError, ConfigurationError, KeyOperation, StateStoreClient
from sskv_mapping.integrations.dogpile import StateStoreBackend, StateStoreMutex

pytestmark = pytest.mark.broker

KEY = b"0123456789abcdef-dogpile-test-key"


@pytest.fixture
def ns() -> str:
    return f"dogpile-{uuid.uuid4().hex[:10]}"


def connected(url: str) -> StateStoreClient:
    client = StateStoreClient.from_url(url)
    client.connect()
    return client


def region(broker_url: str, ns: str, **arguments: Any) -> CacheRegion:
    return make_region().configure("sskv", arguments={"url": broker_url, "namespace": ns, **arguments})


def test_the_entry_point_names_the_backend(broker_url: str, ns: str) -> None:
    assert isinstance(region(broker_url, ns).backend, StateStoreBackend)


def test_json_by_default_and_dogpiles_metadata_around_it(broker_url: str, ns: str) -> None:
    reg = region(broker_url, ns)
    reg.set("k", {"a": [1, 2]})
    raw = reg.backend.get_serialized("k")
    assert isinstance(raw, bytes)
    assert raw.endswith(b'|{"a":[1,2]}')  # dogpile's JSON metadata, "|", then our codec's bytes
    assert reg.get("k") == {"a": [1, 2]}


def test_a_value_json_cannot_hold_is_a_typed_error(broker_url: str, ns: str) -> None:
    from sskv_mapping import EncodeError

    with pytest.raises((EncodeError, TypeError)):
        region(broker_url, ns).set("k", {1, 2})


def test_signed_pickle_holds_any_value_and_refuses_a_foreign_signature(broker_url: str, ns: str) -> None:
    signed = region(broker_url, ns, pickle_key=KEY)
    signed.set("k", {1, 2, 3})
    assert signed.get("k") == {1, 2, 3}
    other = region(broker_url, ns, pickle_key=b"another-secret-of-16-bytes-or-more")
    assert other.get("k") is NO_VALUE  # a miss (logged), as dogpile's CantDeserializeException means
    assert other.get_or_create("k", lambda: {4}) == {4}  # regenerated and overwritten under its own key


def test_the_mutex_excludes_another_connection_and_carries_a_fencing_token(broker_url: str, ns: str) -> None:
    clients = [connected(broker_url) for _ in range(2)]
    try:
        one, two = (StateStoreBackend({"client": c, "namespace": ns}) for c in clients)
        first, second = one.get_mutex("report"), two.get_mutex("report")
        assert isinstance(first, StateStoreMutex)
        assert first.acquire(wait=False)
        token = first.lock.fencing_token
        assert second.locked() and not second.acquire(wait=False)
        first.release()
        assert not second.locked()
        assert second.acquire(wait=False)
        assert second.lock.fencing_token > token  # the next holder's token is higher
        second.release()
    finally:
        for c in clients:
            c.close()


def test_one_mutex_object_is_not_reentrant_between_threads(broker_url: str, ns: str) -> None:
    # dogpile shares one mutex object per key between a process's threads: the holder value is the same, so
    # only the in-process lock keeps the second out
    mutex = region(broker_url, ns).backend.get_mutex("k")
    assert mutex.acquire()
    assert not mutex.acquire(wait=False)
    mutex.release()


def test_a_lock_timeout_is_a_lock_error(broker_url: str, ns: str) -> None:
    from sskv_mapping import LockError

    backend = region(broker_url, ns, lock_timeout=0.2).backend
    held = backend.get_mutex("k")
    assert held.acquire()
    try:
        with pytest.raises(LockError):
            backend.get_mutex("k").acquire()
    finally:
        held.release()


def test_expiration_time_is_the_stores_own_expiry(broker_url: str, ns: str) -> None:
    backend = region(broker_url, ns, expiration_time=0.3).backend
    assert isinstance(backend, StateStoreBackend)
    watch = backend.client.watch(backend.sskv_cache.data_key("k")).start()
    try:
        backend.set_serialized("k", b"v")
        assert watch.next(timeout=5).op is KeyOperation.SET
        assert watch.next(timeout=5).op is KeyOperation.DELETE  # the emulator expired it
    finally:
        watch.close()
    assert backend.get_serialized("k") is NO_VALUE


@pytest.mark.parametrize(
    "arguments",
    [
        {"codec": "json", "pickle_key": KEY},
        {"expiration_time": 0},
        {"expiration_time": -1},
        {"lock_lease": 0},
        {"lock_timeout": "soon"},
        {"pickle_key": b"short"},
        {"codec": "no-such-codec"},
        {"client": "not a client"},
    ],
)
def test_bad_arguments_are_configuration_errors(broker_url: str, ns: str, arguments: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        StateStoreBackend({"url": broker_url, "namespace": ns, **arguments})


def test_unknown_arguments_are_logged_and_the_dict_left_alone(
    broker_url: str, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    arguments = {"url": broker_url, "namespace": ns, "redis_expiration_time": 60}
    with caplog.at_level(logging.WARNING, "sskv_mapping.integrations.dogpile"):
        StateStoreBackend(arguments)
    assert "redis_expiration_time" in caplog.text
    assert arguments == {"url": broker_url, "namespace": ns, "redis_expiration_time": 60}


def test_a_store_that_cannot_be_reached_raises_never_a_miss(broker_url: str, ns: str) -> None:
    client = connected(broker_url)
    backend = StateStoreBackend({"client": client, "namespace": ns})
    backend.set_serialized("k", b"v")
    client.close()
    with pytest.raises(ClientStateError):
        backend.get_serialized("k")
