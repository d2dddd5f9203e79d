"""Values larger than the broker's maximum packet size.

mosquitto (``max_packet_size``) drops the connection of a client that sends a bigger packet; the client
only learns it as a dropped connection, and the request itself as a timeout. The transport does not expose
the Maximum Packet Size from CONNACK, so the client has a ``max_payload`` setting: a request above it is
refused with :class:`ConfigurationError` before anything is sent and the connection stays up.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from _support.procs import start_emulator

from sskv_mapping import ConfigurationError, KeyOperation, TransportError
from sskv_mapping.client import DEFAULT_MAX_PAYLOAD, AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker

from .conftest import Guard

pytestmark = pytest.mark.broker

MAX_PACKET_SIZE = 100_000
#: room left for the PUBLISH headers (topic, correlation data, user properties), as the docstring advises
MAX_PAYLOAD = MAX_PACKET_SIZE - 1024


@pytest.fixture(scope="module")
def small_broker() -> Iterator[MosquittoBroker]:
    with (
        MosquittoBroker(extra_config=[f"max_packet_size {MAX_PACKET_SIZE}"]) as broker,
        start_emulator(broker.host, broker.port),
    ):
        yield broker


@pytest.fixture
async def observer(small_broker: MosquittoBroker) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(small_broker.host, small_broker.port, timeout=5) as c:
        yield c


async def test_a_value_over_max_payload_is_refused_before_sending(
    small_broker: MosquittoBroker, observer: AsyncStateStoreClient
) -> None:
    async with AsyncStateStoreClient(
        small_broker.host, small_broker.port, timeout=5, max_payload=MAX_PAYLOAD
    ) as client:
        guard = await Guard(client, observer).arm()
        try:
            for size in (MAX_PAYLOAD, MAX_PACKET_SIZE, 2 * MAX_PACKET_SIZE):
                with pytest.raises(ConfigurationError, match="max_payload"):
                    await client.set(guard.key, b"x" * size)
                with pytest.raises(ConfigurationError, match="max_payload"):
                    await client.vdelete(guard.key, b"x" * size)
                await guard.check()
            # a key can be too large as well (here with an empty value)
            with pytest.raises(ConfigurationError, match="max_payload"):
                await client.get(b"k" * MAX_PACKET_SIZE)
            guard.nothing_sent()
            # the connection was never at risk, and the largest allowed value still goes through
            assert client.state is ConnectionState.CONNECTED and client.reconnects == 0
            largest = b"y" * (MAX_PAYLOAD - 64)
            assert (await client.set(guard.key, largest)).applied
            event = await guard.watch.next(5) if guard.watch is not None else None
            assert event is not None and event.op is KeyOperation.SET and event.value == largest
            assert (entry := await observer.get(guard.key)) is not None and entry.value == largest
            assert client.reconnects == 0
        finally:
            await guard.close()


async def test_without_max_payload_an_oversize_request_fails_typed_and_bounded(
    small_broker: MosquittoBroker, observer: AsyncStateStoreClient
) -> None:
    """What a client whose max_payload is above the broker's limit gets (the default is MQTT's limit):
    the broker drops the connection, the call ends in a TransportError within its timeout (no hang), the
    client reconnects by itself, and nothing was written."""
    async with AsyncStateStoreClient(small_broker.host, small_broker.port, timeout=1) as client:
        assert client.max_payload == DEFAULT_MAX_PAYLOAD
        guard = await Guard(client, observer).arm()
        try:
            started = time.monotonic()
            with pytest.raises(TransportError):
                await client.set(guard.key, b"x" * (2 * MAX_PACKET_SIZE))
            assert time.monotonic() - started < 3
            await client.wait_connected(5)
            assert client.reconnects >= 1
            guard.sent = client.requests_sent  # this call was sent: the broker refused it
            await guard.check()
            assert (await client.set(guard.key, b"small again")).applied
        finally:
            await guard.close()


def test_max_payload_must_be_an_int_or_none() -> None:
    for bad in ("100", 1.5, True):
        with pytest.raises(ConfigurationError):
            AsyncStateStoreClient("127.0.0.1", 1, max_payload=bad)  # type: ignore[arg-type]
    assert AsyncStateStoreClient("127.0.0.1", 1, max_payload=None).max_payload is None
