# A user's test module, copied into a throwaway project by tests/testing/test_plugin_in_a_project.py: it sees
# sskv-mapping only as the wheel installed in its own virtualenv (no conftest, no access to our tests/).
import pytest

import sskv_mapping


def test_the_installed_wheel_is_used():
    assert "site-packages" in sskv_mapping.__file__, sskv_mapping.__file__


def test_a_key_with_px_expires_without_sleeping(statestore):
    statestore.client.set("session", b"1", ttl=30.0)
    statestore.advance(29.5)
    assert statestore.client.get("session") is not None
    statestore.advance(0.5)
    assert statestore.client.get("session") is None


def test_a_lapsed_lease_gives_the_next_holder_a_higher_fencing_token(statestore):
    first = statestore.lock("nightly-job", lease=60.0)
    second = statestore.lock("nightly-job", lease=60.0, client=statestore.new_client())
    token = first.try_acquire()
    assert token is not None and second.try_acquire() is None
    statestore.advance(60.0)
    assert not first.held
    later = second.try_acquire()
    assert later is not None and later > token


def test_the_dict_and_cache_are_in_the_tests_namespace(statestore, statestore_namespace):
    statestore.dict()["feature"] = True
    statestore.cache(default_ttl=10).set("page", "<html>")
    assert statestore.dict(local_cache_size=0)["feature"] is True
    statestore.advance(10.0)
    assert statestore.cache().get("page") is None
    stored = statestore.core.keys()
    assert stored and all(key.startswith(statestore_namespace.encode()) for key in stored)


@pytest.mark.asyncio
async def test_an_async_client_on_the_tests_loop(statestore):
    async with statestore.async_client() as client:
        await client.set("k", b"v", ttl=1.0)
        assert statestore.client.get("k").value == b"v"
        statestore.advance(1.0)
        assert await client.get("k") is None
