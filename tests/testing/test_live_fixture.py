"""The plugin's real store: ``statestore_server`` (a private mosquitto and the emulator process, once per
session), ``statestore_url``, and ``statestore_live`` (the test's namespace on it: clients, faces, and each
framework adapter's settings pointing at it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sskv_mapping.testing import StateStoreServer, StateStoreStartError

if TYPE_CHECKING:
    from sskv_mapping.testing import LiveStore


def test_the_url_is_the_session_servers(statestore_url: str, statestore_server: StateStoreServer) -> None:
    assert statestore_url == statestore_server.url == f"mqtt://127.0.0.1:{statestore_server.port}"
    assert "serving state store on" in statestore_server.output


def test_the_faces_share_the_store_in_the_tests_namespace(statestore_live: LiveStore) -> None:
    config = statestore_live.dict()
    config["greeting"] = "hello"
    assert statestore_live.dict(local_cache_size=0)["greeting"] == "hello"  # read back from the store
    entry = statestore_live.new_client().get(f"{statestore_live.namespace}/greeting")
    assert entry is not None
    cache = statestore_live.cache(default_ttl=60)
    cache.set("page", "<html>")
    assert cache.get("page") == "<html>"


def test_a_lock_on_the_real_store_fences(statestore_live: LiveStore) -> None:
    first = statestore_live.lock("job", lease=30.0)
    second = statestore_live.lock("job", lease=30.0, client=statestore_live.new_client())
    token = first.try_acquire()
    assert token is not None
    assert second.try_acquire() is None
    assert first.release()
    later = second.try_acquire()
    assert later is not None and later > token


def test_each_test_has_a_namespace_of_its_own(statestore_live: LiveStore, statestore_namespace: str) -> None:
    assert statestore_live.namespace == statestore_namespace
    assert statestore_live.dict().get("greeting") is None  # the other test's key is in another namespace


def test_the_django_settings_point_at_the_server_and_namespace(statestore_live: LiveStore) -> None:
    # used for real by the throwaway project (tests/testing/test_plugin_in_a_project.py)
    assert statestore_live.django_caches("pages", max_staleness=5.0) == {
        "pages": {
            "BACKEND": "sskv_mapping.integrations.django.StateStoreCache",
            "LOCATION": statestore_live.url,
            "OPTIONS": {"namespace": statestore_live.namespace, "max_staleness": 5.0},
        }
    }


def test_the_flask_and_aiocache_settings_name_the_backend_url_and_namespace(statestore_live: LiveStore) -> None:
    flask = statestore_live.flask_config(local_cache_size=100)
    assert flask == {
        "CACHE_TYPE": "sskv_mapping.integrations.flask_caching.StateStoreCache",
        "CACHE_SSKV_URL": statestore_live.url,
        "CACHE_KEY_PREFIX": statestore_live.namespace,
        "CACHE_OPTIONS": {"local_cache_size": 100},
    }
    config = statestore_live.aiocache_config(ttl=5)["default"]
    assert (config["url"], config["sskv_namespace"], config["ttl"]) == (
        statestore_live.url,
        statestore_live.namespace,
        5,
    )


def test_a_missing_mosquitto_is_one_error_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("sskv_mapping.emulator.broker.FALLBACK_LOCATIONS", ())
    with pytest.raises(StateStoreStartError, match=r"apt-get install mosquitto"):
        StateStoreServer().start()
