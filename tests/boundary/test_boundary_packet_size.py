"""Values larger than the broker's maximum packet size (a mosquitto started with ``max_packet_size``).

mosquitto drops the whole connection of a client that sends a bigger packet, and MQTT 5 says a client must not
send one [MQTT-3.2.2-15]. The client takes the limit from CONNACK: a request whose PUBLISH would be over it
raises :class:`ValueTooLargeError` (size and limit named) before anything is sent, the connection stays up and
the calls in flight are untouched. An explicit ``max_payload`` is a limit of the client's own on the command,
checked the same way. The dict and cache faces raise the same error, with nothing half-written. The emulator
never sends a packet over the limit either: a response that would be too large becomes an error reply
(:class:`ResponseTooLargeError`), a notification that would be is dropped and logged, and it stays connected.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from sskv_mapping import (
    AsyncStateStoreDict,
    ConfigurationError,
    KeyOperation,
    ResponseTooLargeError,
    ValueTooLargeError,
)
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import EmulatorProcess, start_emulator

from .conftest import Guard

pytestmark = pytest.mark.broker

MAX_PACKET_SIZE = 100_000
#: a limit of the client's own, below the broker's
MAX_PAYLOAD = MAX_PACKET_SIZE - 1024
WAIT = 10.0


@pytest.fixture(scope="module")
def small_broker() -> Iterator[tuple[MosquittoBroker, EmulatorProcess]]:
    with (
        MosquittoBroker(extra_config=[f"max_packet_size {MAX_PACKET_SIZE}"]) as broker,
        start_emulator(broker.host, broker.port) as emulator,
    ):
        yield broker, emulator


@pytest.fixture
def broker(small_broker: tuple[MosquittoBroker, EmulatorProcess]) -> MosquittoBroker:
    return small_broker[0]


@pytest.fixture
async def observer(broker: MosquittoBroker) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as c:
        yield c


def emulator_stayed(emulator: EmulatorProcess) -> None:
    assert emulator.running
    assert "lost the connection" not in emulator.output and "reconnected" not in emulator.output, emulator.output


async def test_a_too_large_set_fails_locally_while_a_concurrent_get_succeeds(
    broker: MosquittoBroker, observer: AsyncStateStoreClient
) -> None:
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
        assert client.max_payload is None  # the default: the broker's limit
        guard = await Guard(client, observer).arm()
        try:
            other = f"other-{uuid.uuid4().hex}".encode()
            await observer.set(other, b"still here")
            big = client.set(guard.key, b"x" * MAX_PACKET_SIZE)
            get = client.get(other)
            too_large, entry = await asyncio.gather(big, get, return_exceptions=True)
            assert isinstance(too_large, ValueTooLargeError), too_large
            assert isinstance(too_large, ConfigurationError)  # and a ValueError: bad input, nothing sent
            assert too_large.limit == MAX_PACKET_SIZE and too_large.size > MAX_PACKET_SIZE
            assert f"{MAX_PACKET_SIZE:,}" in str(too_large)  # the message names the limit
            assert not isinstance(entry, BaseException) and entry is not None and entry.value == b"still here"
            guard.sent += 1  # the GET was sent; the SET was not
            await guard.check()  # nothing written
            assert client.state is ConnectionState.CONNECTED and client.reconnects == 0
            # the whole packet counts: a value a few hundred bytes under the limit is still too large
            with pytest.raises(ValueTooLargeError):
                await client.set(guard.key, b"x" * (MAX_PACKET_SIZE - 100))
            # and a value that fits with its headers goes through, on the same connection
            fits = b"y" * (MAX_PACKET_SIZE - 1000)
            assert (await client.set(guard.key, fits)).applied
            assert guard.watch is not None
            event = await guard.watch.next(WAIT)
            assert (event.op, event.value) == (KeyOperation.SET, fits)
            assert client.reconnects == 0
        finally:
            await guard.close()


async def test_check_set_is_an_upper_bound_within_a_few_bytes(broker: MosquittoBroker) -> None:
    """What the dict uses before writing an index entry: it never lets through a SET the transport refuses, and
    refuses at most a few bytes (its slack for the timestamp) that would have fit."""
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
        key = f"edge-{uuid.uuid4().hex[:8]}".encode()

        def passes(n: int) -> bool:
            try:
                client.check_set(key, b"z" * n)
            except ValueTooLargeError:
                return False
            return True

        low, high = 0, MAX_PACKET_SIZE  # passes(low), not passes(high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if passes(mid) else (low, mid)
        assert (await client.set(key, b"z" * low)).applied  # check_set's yes is the transport's yes
        with pytest.raises(ValueTooLargeError):
            await client.set(key, b"z" * (low + 16))  # and its no is wrong by less than 16 bytes
        assert client.reconnects == 0
        await client.delete(key)


async def test_an_explicit_max_payload_is_checked_on_the_command(
    broker: MosquittoBroker, observer: AsyncStateStoreClient
) -> None:
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=5, max_payload=MAX_PAYLOAD) as client:
        guard = await Guard(client, observer).arm()
        try:
            for size in (MAX_PAYLOAD, MAX_PACKET_SIZE, 2 * MAX_PACKET_SIZE):
                with pytest.raises(ValueTooLargeError, match="max_payload") as caught:
                    await client.set(guard.key, b"x" * size)
                assert caught.value.limit == MAX_PAYLOAD and caught.value.size > MAX_PAYLOAD
                with pytest.raises(ValueTooLargeError, match="max_payload"):
                    await client.vdelete(guard.key, b"x" * size)
                await guard.check()
            with pytest.raises(ValueTooLargeError, match="max_payload"):  # a key can be too large as well
                await client.get(b"k" * MAX_PACKET_SIZE)
            guard.nothing_sent()
            largest = b"y" * (MAX_PAYLOAD - 64)
            assert (await client.set(guard.key, largest)).applied
            assert client.state is ConnectionState.CONNECTED and client.reconnects == 0
        finally:
            await guard.close()


async def test_the_dict_writes_neither_data_nor_index_entry_for_a_too_large_new_key(broker: MosquittoBroker) -> None:
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
        d: AsyncStateStoreDict[bytes] = AsyncStateStoreDict(client, namespace=f"big{uuid.uuid4().hex[:8]}", codec="raw")
        await d.open()
        try:
            await d.set("small", b"ok")
            sent = client.requests_sent
            with pytest.raises(ValueTooLargeError):
                await d.set("huge", b"x" * MAX_PACKET_SIZE)
            assert client.requests_sent == sent  # refused before the index write, not only before the SET
            assert await d.keys() == ["small"]
            assert await d.get("huge") is None
            assert await client.get(d._store.data_key("huge")) is None
            assert client.reconnects == 0
        finally:
            await d.close()


async def test_the_cache_face_raises_it_unchanged(broker: MosquittoBroker) -> None:
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
        cache: AsyncStateStoreCache[bytes] = AsyncStateStoreCache(
            client, namespace=f"bigc{uuid.uuid4().hex[:8]}", codec="raw"
        )
        await cache.open()
        try:
            with pytest.raises(ValueTooLargeError):
                await cache.set("huge", b"x" * MAX_PACKET_SIZE)
            assert await cache.get("huge") is None
            await cache.set("fine", b"ok")
            assert await cache.get("fine") == b"ok"
            assert client.reconnects == 0
        finally:
            await cache.close()


async def test_a_framework_set_of_a_too_large_value_raises_it(broker: MosquittoBroker) -> None:
    pytest.importorskip("litestar")
    from sskv_mapping.integrations.litestar import StateStoreStore

    store = StateStoreStore(broker.url, namespace=f"bigls{uuid.uuid4().hex[:8]}")
    async with store:
        with pytest.raises(ValueTooLargeError):
            await store.set("huge", b"x" * MAX_PACKET_SIZE)
        assert await store.get("huge") is None
        await store.delete_all()


async def test_the_emulator_never_sends_over_the_limit_and_stays_connected(
    small_broker: tuple[MosquittoBroker, EmulatorProcess], observer: AsyncStateStoreClient
) -> None:
    """A value near the limit, set by a client with a short id: its request fits, but the notification to a
    watcher with a very long client id (its notification topic) and the GET response to a reader with one
    (its response topic) would not. The emulator drops the one (logged), answers the other with an error the
    reader gets typed, and keeps serving on the same connection."""
    broker, emulator = small_broker
    long_id = "long-" + "i" * 4000 + uuid.uuid4().hex[:8]
    key = f"near-{uuid.uuid4().hex[:8]}".encode()
    near = b"v" * (MAX_PACKET_SIZE - 2000)
    async with (
        AsyncStateStoreClient(broker.host, broker.port, client_id=long_id, timeout=5) as long_client,
        AsyncStateStoreClient(broker.host, broker.port, timeout=5) as writer,
    ):
        watch = await long_client.watch(key).start()
        short_watch = await observer.watch(key).start()
        try:
            assert (await writer.set(key, near)).applied
            event = await short_watch.next(WAIT)  # the short-id watcher's notification fits: delivered
            assert (event.op, event.value) == (KeyOperation.SET, near)
            assert emulator.wait_for_output("a notification to", WAIT)  # the long one's is dropped, logged
            with pytest.raises(ResponseTooLargeError) as caught:
                await long_client.get(key)  # the response would be over the limit: an error reply instead
            assert "maximum packet size" in str(caught.value)
            # everyone is still served, nobody reconnected
            await writer.set(key, b"small")
            small = await watch.next(WAIT)  # the long-id watcher gets the changes that fit
            assert (small.op, small.value) == (KeyOperation.SET, b"small")
            entry = await long_client.get(key)
            assert entry is not None and entry.value == b"small"
            assert long_client.reconnects == 0 and writer.reconnects == 0
            emulator_stayed(emulator)
        finally:
            await watch.aclose()
            await short_watch.aclose()


def test_max_payload_must_be_an_int_or_none() -> None:
    for bad in ("100", 1.5, True):
        with pytest.raises(ConfigurationError):
            AsyncStateStoreClient("127.0.0.1", 1, max_payload=bad)  # type: ignore[arg-type]
    assert AsyncStateStoreClient("127.0.0.1", 1, max_payload=None).max_payload is None
