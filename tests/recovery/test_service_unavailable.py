"""PUBACK 0x10 ("no matching subscribers") is a definite "not delivered": resent until the service is back,
and said at once on a broker where the state store never answered. Real mosquitto, the emulator as a process.

* a bare broker (no emulator): ``ServiceUnavailableError`` in about a second with the ``sskv emulator`` hint,
  for the client and for ``sskv get``, which exits 3;
* a call made while the service is down completes as soon as it is back (no wait for its timeout);
* a broker restart racing the emulator's re-subscribe: the first calls after the reconnect succeed;
* a watch is restored, and a lock renewed, across a service restart.

Synchronisation is on observable state (``undelivered_resends``, connection states, watch ``active``), never a
sleep. The bounds asserted are the issue's reliability bounds, with a margin for a loaded CI machine.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from sskv_mapping import AsyncLeasedLock
from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import LockError, ServiceUnavailableError
from tests._support.procs import EmulatorProcess, start_emulator
from tests._support.waiting import eventually

pytestmark = pytest.mark.broker

MARGIN = 1.0  # seconds a loaded CI machine may add to a bound


@pytest.fixture
async def bare(fresh_mosquitto: MosquittoBroker) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:  # default timeout
        yield client


async def test_a_bare_broker_says_so_in_about_a_second(bare: AsyncStateStoreClient) -> None:
    started = time.monotonic()
    with pytest.raises(ServiceUnavailableError, match="sskv emulator") as info:
        await bare.get("foo")
    elapsed = time.monotonic() - started
    assert elapsed < 1.0 + MARGIN, f"{elapsed:.2f} s: the 10 s timeout was waited out"
    assert "nothing was written" in str(info.value)
    assert bare.undelivered_resends >= 1
    assert bare.state is ConnectionState.CONNECTED  # the broker is fine; only the service is missing


def test_sskv_get_on_a_bare_broker_exits_3_quickly(fresh_mosquitto: MosquittoBroker) -> None:
    # A request timeout far longer than the fail-fast: a CLI that waited it out would take 30 s, one that said
    # so at once takes its start-up plus about a second. The bound sits between the two, so that a loaded
    # machine's slow interpreter start-up cannot fail it while waiting out the timeout still does.
    url = f"mqtt://{fresh_mosquitto.host}:{fresh_mosquitto.port}"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sskv_mapping.cli", "get", "foo", "--url", url, "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 3, proc.stderr
    assert "sskv emulator" in proc.stderr and "ServiceUnavailableError" in proc.stderr
    assert elapsed < 15, f"{elapsed:.2f} s: the 30 s request timeout was waited out"


async def test_a_call_made_while_the_service_is_down_completes_when_it_is_back(
    fresh_mosquitto: MosquittoBroker,
) -> None:
    emulator = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port)
    try:
        async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:
            assert await client.get("warm") is None  # the service answered this client once
            emulator.kill()
            key = f"during-{uuid.uuid4().hex[:6]}"
            call = asyncio.ensure_future(client.set(key, b"v"))
            await eventually(lambda: client.undelivered_resends >= 2, timeout=10)  # refused, resent, refused
            assert not call.done()
            emulator = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port)
            ready = time.monotonic()
            result = await asyncio.wait_for(call, 10)
            done = time.monotonic()
            assert result.applied
            assert done - ready < 0.5 + MARGIN, f"completed {done - ready:.2f} s after the service was back"
            assert (await client.get(key)) is not None
    finally:
        emulator.kill()


async def test_calls_right_after_a_broker_restart_do_not_wait_for_their_timeout(
    fresh_mosquitto: MosquittoBroker,
) -> None:
    emulator = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port)
    try:
        async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:
            await client.set("k", b"0")
            reconnected = asyncio.Event()

            def on_state(state: ConnectionState) -> None:
                if state is ConnectionState.CONNECTED:
                    reconnected.set()

            client.add_state_listener(on_state)
            longest = 0.0
            for round_ in range(3):
                reconnected.clear()
                fresh_mosquitto.restart()
                await asyncio.wait_for(reconnected.wait(), 20)
                started = time.monotonic()  # at once: the emulator may not have re-subscribed yet
                await client.set("k", str(round_).encode())
                longest = max(longest, time.monotonic() - started)
            assert longest < 2.0 + MARGIN, f"a call took {longest:.2f} s after a broker restart"
            assert (await client.get("k")) is not None
    finally:
        emulator.kill()


async def test_a_watch_and_a_lock_survive_a_service_restart(fresh_mosquitto: MosquittoBroker) -> None:
    emulator: EmulatorProcess = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port)
    try:
        async with (
            AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client,
            AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as writer,
        ):
            events: asyncio.Queue[KeyEvent] = asyncio.Queue()
            sub = await client.subscribe_key("watched", events.put_nowait)
            lock = AsyncLeasedLock(client, f"lock-{uuid.uuid4().hex[:6]}", lease=3.0, auto_renew=True)
            await lock.acquire(timeout=5)
            first_token = lock.fencing_token

            # the broker and the service go down; the broker comes back first, the service later
            emulator.kill()
            fresh_mosquitto.restart()
            await eventually(lambda: client.state is ConnectionState.CONNECTED, timeout=20)
            await eventually(lambda: client.undelivered_resends >= 1, timeout=10)  # the restore was refused
            assert not sub.active
            emulator = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port)
            ready = time.monotonic()
            await eventually(lambda: sub.active, timeout=10)
            restored = time.monotonic() - ready
            assert restored < 0.5 + MARGIN, f"the watch came back {restored:.2f} s after the service"

            await writer.set("watched", b"after")
            event = await asyncio.wait_for(events.get(), 10)
            while event.synthetic:  # the restore's own re-read
                event = await asyncio.wait_for(events.get(), 10)
            assert (event.op, event.value) == (KeyOperation.SET, b"after")

            # the restarted service kept no data (no --persist-file): the lock key is gone, so the renewal (re-sent
            # until answered) finds it gone and the lock is lost -- said, never re-created as if still held, since
            # another client could have taken it meanwhile
            await eventually(lambda: not lock.held, timeout=10)
            with pytest.raises(LockError, match="was lost"):
                _ = lock.fencing_token
            assert (await writer.get(lock.name)) is None
            await lock.acquire(timeout=5)  # taken again, with a newer token
            assert lock.fencing_token != first_token
            await lock.release()
            await sub.close()
    finally:
        emulator.kill()
