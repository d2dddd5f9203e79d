"""No waiting on one's own lock: a lock this process held when its connection dropped is re-taken at once after
the reconnect (``SET NEX``, its holder value, docs/design/protocol.md §6), not waited out -- over a mosquitto that
is restarted under the lock, with the emulator process (which keeps the store) on it.

* the library's own locks (index shards, cache ledger shards, per-key locks: :class:`OwnedLock`): an operation cut
  off by the drop leaves the lock held; the process's next holder gets it within a lock timeout far shorter than
  the lease, with a newer fencing token, while another client still finds it taken;
* a user's auto-renewed :class:`AsyncLeasedLock` stays held across the restart: its renewal re-takes it as soon
  as the connection is back, the new token newer than the old;
* a lock another holder took meanwhile is still waited for (the lock's own tests cover that path).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sskv_mapping._namespace.key_locks import owned_lock
from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import TransportError
from sskv_mapping.lock import AsyncLeasedLock

LEASE = 30.0  # far longer than any wait below: waiting the lease out would fail the test's timeouts


async def _restart_under(client: AsyncStateStoreClient, broker: MosquittoBroker) -> None:
    """Restart the broker and wait (with a deadline) until ``client`` has reconnected."""
    down = asyncio.Event()
    up = asyncio.Event()

    def on_state(state: ConnectionState) -> None:
        if state is ConnectionState.RECONNECTING:
            down.set()
        elif state is ConnectionState.CONNECTED and down.is_set():
            up.set()

    unlisten = client.add_state_listener(on_state)
    try:
        await asyncio.to_thread(broker.restart)
        await asyncio.wait_for(down.wait(), 20)
        await asyncio.wait_for(up.wait(), 30)
    finally:
        unlisten()


async def test_an_owned_lock_cut_off_by_a_drop_is_retaken_at_once(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: object
) -> None:
    client = AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port, timeout=5)
    other = AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port, timeout=5)
    await client.connect()
    name = f"rt{uuid.uuid4().hex[:8]}#index-lock/0001".encode()
    record = owned_lock(client, name, lease=LEASE)
    try:
        with pytest.raises(TransportError):
            async with record.hold(timeout=5) as lock:
                before = lock.fencing_token
                await _restart_under(client, fresh_mosquitto)
                raise TransportError("the write under the lock was cut off")  # as a lost reply would be
        await other.connect()
        async with record.hold(timeout=3) as lock:  # 3 s, against a 30 s lease
            assert lock.fencing_token > before
            assert await AsyncLeasedLock(other, name, lease=LEASE).try_acquire() is None
    finally:
        await other.close()
        await client.close()


async def test_an_auto_renewed_lock_stays_held_across_a_broker_restart(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: object
) -> None:
    client = AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port, timeout=5)
    other = AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port, timeout=5)
    await client.connect()
    lock = AsyncLeasedLock(client, f"user{uuid.uuid4().hex[:8]}", lease=4.0, auto_renew=True, renew_fraction=0.25)
    try:
        first = await lock.acquire(timeout=5)
        await _restart_under(client, fresh_mosquitto)
        await other.connect()
        renewals: asyncio.Queue[KeyEvent] = asyncio.Queue()
        await other.subscribe_key(lock.name, lambda e: None if e.synthetic else renewals.put_nowait(e))
        event = await asyncio.wait_for(renewals.get(), 15)  # the background renewal after the reconnect
        assert event.op is KeyOperation.SET and event.value == lock.holder
        assert event.version is not None and event.version > first
        assert lock.held
        assert await AsyncLeasedLock(other, lock.name, lease=4.0).try_acquire() is None
        assert await lock.renew() > first
    finally:
        await lock.release()
        await other.close()
        await client.close()
