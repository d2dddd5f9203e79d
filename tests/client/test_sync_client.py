"""The blocking client in real use over the broker (its parity with the async API: tests/test_twins.py)."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from sskv_mapping import ClientStateError, KeyOperation, SetCondition, VDeleteResult
from sskv_mapping._blocking import get_loop_thread
from sskv_mapping.client import StateStoreClient
from sskv_mapping.lock import LeasedLock


@pytest.mark.broker
def test_sync_client_round_trip_and_watch(broker_address: tuple[str, int]) -> None:
    key = f"sync-{uuid.uuid4().hex[:8]}"
    with StateStoreClient(*broker_address) as c:
        assert c.get(key) is None
        assert c.set(key, b"a").applied
        assert not c.set(key, b"b", condition=SetCondition.NX).applied
        entry = c.get(key)
        assert entry is not None and entry.value == b"a"
        with c.watch(key) as w:
            c.set(key, b"c")
            ev = w.next(timeout=5)
            assert ev.op is KeyOperation.SET and ev.value == b"c"
        assert c.vdelete(key, b"zz") is VDeleteResult.VALUE_MISMATCH
        assert c.delete(key) is True
    with pytest.raises(ClientStateError):
        c.get(key)


@pytest.mark.broker
def test_sync_lock(broker_address: tuple[str, int]) -> None:
    name = f"sync-lock-{uuid.uuid4().hex[:8]}"
    with StateStoreClient(*broker_address) as c, LeasedLock(c, name, lease=5) as lock:
        assert lock.held
        assert lock.set(f"{name}-data", b"x").applied
        assert lock.holder_of() == lock.holder


def test_blocking_call_from_the_loop_thread_is_refused() -> None:
    portal = get_loop_thread()
    client = StateStoreClient("127.0.0.1", 1)

    async def inside() -> None:
        with pytest.raises(ClientStateError, match="deadlock"):
            client.get("k")

    asyncio.run_coroutine_threadsafe(inside(), portal.loop).result(5)


def test_loop_thread_is_a_named_daemon_and_shared() -> None:
    a, b = get_loop_thread(), get_loop_thread()
    assert a is b and a.thread.daemon and a.thread.name == "sskv-loop"
    assert a.thread is not threading.current_thread()
