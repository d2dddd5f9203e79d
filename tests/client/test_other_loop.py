"""An async client used from another event loop than the one it connected on (issue 37, finding 4): each call
fails at once with a ClientStateError saying what to do, and ``close()`` works from anywhere. Over a real broker."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from sskv_mapping import AsyncStateStoreDict, ClientStateError
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState

pytestmark = pytest.mark.broker

#: the client's own request timeout: far longer than the deadline below, so a call that waits for it fails the test
CLIENT_TIMEOUT = 60.0
DEADLINE = 10.0
T = TypeVar("T")


class LoopInThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(DEADLINE)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(DEADLINE)
        self.loop.close()


@pytest.fixture
def other_thread() -> Iterator[LoopInThread]:
    t = LoopInThread()
    yield t
    t.stop()


def test_calls_from_another_threads_loop_fail_at_once(
    other_thread: LoopInThread, broker_address: tuple[str, int]
) -> None:
    client = AsyncStateStoreClient(*broker_address, timeout=CLIENT_TIMEOUT)
    key = f"loop-{uuid.uuid4().hex[:10]}"
    other_thread.run(client.connect())
    other_thread.run(client.set(key, b"v"))  # on its own loop it works

    async def from_here() -> list[str]:
        said = []
        for call in (client.get(key), client.set(key, b"w"), client.delete(key)):
            with pytest.raises(ClientStateError) as caught:
                await asyncio.wait_for(call, DEADLINE)  # at once, not when the client's 60 s timeout fires
            said.append(str(caught.value))
        await client.close()  # close() from here: done on the client's own loop
        return said

    said = asyncio.run(from_here())
    assert all("another event loop" in s and "StateStoreClient" in s for s in said), said
    assert client.state is ConnectionState.CLOSED
    assert other_thread.loop.is_running()  # the other loop was not disturbed


def test_a_client_from_an_earlier_asyncio_run_fails_typed_and_closes(broker_address: tuple[str, int]) -> None:
    key = f"loop-{uuid.uuid4().hex[:10]}"
    namespace = f"t{uuid.uuid4().hex[:10]}"

    async def first() -> tuple[AsyncStateStoreClient, AsyncStateStoreDict[str]]:
        client = AsyncStateStoreClient(*broker_address, timeout=CLIENT_TIMEOUT)
        await client.connect()
        await client.set(key, b"v")
        d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=namespace, local_cache_size=0)
        await d.set("a", "1")
        return client, d

    client, d = asyncio.run(first())  # the loop closes with the client still connected

    async def second() -> list[str]:
        said = []
        for call in (client.get(key), d.get("a")):
            with pytest.raises(ClientStateError) as caught:
                await asyncio.wait_for(call, DEADLINE)
            said.append(str(caught.value))
        await client.close()  # no "Event loop is closed": the dead loop's connection is given up
        await client.close()  # and again: a no-op
        return said

    said = asyncio.run(second())
    assert all("earlier event loop" in s and "create the client in the event loop" in s for s in said), said
    assert client.state is ConnectionState.CLOSED

    async def check() -> bytes | None:  # the value written from the first loop is there, for a new client
        async with AsyncStateStoreClient(*broker_address) as fresh:
            entry = await fresh.get(key)
            return None if entry is None else entry.value

    assert asyncio.run(check()) == b"v"
