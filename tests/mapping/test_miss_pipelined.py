"""A local-cache miss on a key not watched yet is one round trip: its KEYNOTIFY and its GET go out back to back.

Over a real mosquitto and the emulator process: the fault proxy stalls every reply (buffers them, loses none) and the
GET must leave anyway; later changes reach the cache; a failed KEYNOTIFY leaves the GET's value returned, not kept;
and against a stand-in service that answers the GET first, the value is not kept either.
"""

from __future__ import annotations

import asyncio
import uuid

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping._protocol.topics import REQUEST_TOPIC
from sskv_mapping._transport.base import InboundMessage, OutgoingMessage
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.testing import FaultProxy
from tests._support.waiting import eventually

WAIT = 10.0


class ReorderingService:
    """A stand-in state store on the real broker that answers a KEYNOTIFY only after the GET that follows it: the
    order the protocol does not rule out (it promises no in-order handling). Every key's value is ``VALUE``."""

    VALUE = b'"stored"'

    def __init__(self, host: str, port: int) -> None:
        settings = ConnectionSettings(host=host, port=port, client_id=f"reorder-{uuid.uuid4().hex[:8]}")
        self._conn = PahoConnection(settings, self._on)
        self.reorder = True
        self.received: list[bytes] = []
        self.replied: list[bytes] = []
        self._held: list[InboundMessage] = []

    async def start(self) -> None:
        await self._conn.connect()
        await self._conn.subscribe([REQUEST_TOPIC], qos=1)

    async def close(self) -> None:
        await self._conn.close()

    def _on(self, message: InboundMessage) -> None:
        verb = message.payload.split(b"\r\n")[2]
        self.received.append(verb)
        if verb == b"KEYNOTIFY" and self.reorder and b"STOP" not in message.payload:
            self._held.append(message)  # answered after the next GET
            return
        self._reply(message, verb)
        if verb == b"GET":
            for held in self._held:
                self._reply(held, b"KEYNOTIFY")
            self._held.clear()

    def _reply(self, request: InboundMessage, verb: bytes) -> None:
        props = [("__stat", "200"), ("__protVer", "1.0")]
        payload = b"+OK\r\n"
        if verb == b"GET":
            props.append(("__ts", "001700000000000:00001:StateStore"))
            payload = b"$%d\r\n%s\r\n" % (len(self.VALUE), self.VALUE)
        assert request.response_topic is not None
        self.replied.append(verb)
        self._conn.publish_nowait(
            OutgoingMessage(
                request.response_topic,
                payload,
                qos=1,
                correlation_data=request.correlation_data,
                user_properties=props,
            )
        )


def _namespace() -> str:
    return f"pipe{uuid.uuid4().hex[:10]}"


async def test_a_miss_sends_its_get_before_the_keynotify_is_answered(broker_address: tuple[str, int]) -> None:
    ns = _namespace()
    async with (
        FaultProxy(broker_address) as relay,
        AsyncStateStoreClient(*broker_address, timeout=WAIT) as writer,
        AsyncStateStoreClient(relay.host, relay.port, timeout=WAIT) as client,
    ):
        await writer.set(f"{ns}/k".encode(), b'"stored"')
        d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=ns, listing="scan")
        await d.set("warm", "up")  # connected, listing mode settled: the read below sends only its own requests
        store = d._store
        before = client.requests_sent
        relay.add_toxic("timeout", stream="downstream", timeout=0)  # no reply reaches the client from now on
        read = asyncio.create_task(d.get("k"))
        # both requests leave although the KEYNOTIFY's answer is held back (sequential: only the KEYNOTIFY)
        await eventually(lambda: client.requests_sent - before == 2, timeout=WAIT)
        assert not read.done()
        relay.remove_toxic("timeout_downstream")  # what was held flows, in order
        assert await read == "stored"
        assert client.requests_sent - before == 2
        assert store.data_key("k") in client.watched_keys
        assert store.cache is not None and store.cache.holds(store.data_key("k"))
        before = client.requests_sent
        assert await d.get("k") == "stored"  # a hit now: kept, since the watch was confirmed
        assert client.requests_sent == before
        await d.close()


async def test_a_change_right_after_a_pipelined_miss_is_seen(broker_address: tuple[str, int]) -> None:
    ns = _namespace()
    keys = [f"k{i}" for i in range(20)]
    async with (
        AsyncStateStoreClient(*broker_address, timeout=WAIT) as writer,
        AsyncStateStoreClient(*broker_address, timeout=WAIT) as client,
    ):
        d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=ns, listing="scan", max_staleness=None)
        for k in keys:
            await writer.set(f"{ns}/{k}".encode(), b'"old"')

        async def miss_then_change(k: str) -> str | None:
            got = await d.get(k)  # the pipelined miss ...
            await writer.set(f"{ns}/{k}".encode(), b'"new"')  # ... and another client's write right after it
            return got

        assert await asyncio.gather(*(miss_then_change(k) for k in keys[:10])) == ["old"] * 10

        # the other half: the write races the miss itself (sent while its KEYNOTIFY and GET are in flight)
        async def change(k: str) -> None:
            await writer.set(f"{ns}/{k}".encode(), b'"new"')

        for k in keys[10:]:
            got, _ = await asyncio.gather(d.get(k), change(k))
            assert got in ("old", "new")

        store = d._store

        def all_new_in_cache() -> bool:
            entries = [store.peek(k) for k in keys]
            return all(e is not None and e.value == "new" for e in entries)

        # the cache turns "new" only by the notifications (no revalidation: max_staleness=None)
        await eventually(all_new_in_cache, timeout=WAIT)
        assert all(store.data_key(k) in client.watched_keys for k in keys)
        before = client.requests_sent
        assert [await d.get(k) for k in keys] == ["new"] * len(keys)
        assert client.requests_sent == before  # every key is a hit: cached, and current by its notification
        await d.close()


async def test_a_failed_keynotify_still_returns_the_get_and_keeps_nothing(broker_address: tuple[str, int]) -> None:
    """A client id over 256 bytes and a key near the key limit: the KEYNOTIFY is refused (its notifications could
    never be sent), the GET beside it is answered."""
    ns = _namespace()
    key = "k" * 32_000
    long_id = "long-" + "i" * 1000 + uuid.uuid4().hex[:8]
    async with (
        AsyncStateStoreClient(*broker_address, timeout=WAIT) as writer,
        AsyncStateStoreClient(*broker_address, client_id=long_id, timeout=WAIT) as client,
    ):
        d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=ns, listing="scan")
        await d.set("warm", "up")
        await writer.set(f"{ns}/{key}".encode(), b'"v1"')
        store = d._store
        for expected in ("v1", "v2"):
            before = client.requests_sent
            assert await d.get(key) == expected
            assert client.requests_sent - before == 1  # the GET; the KEYNOTIFY was refused before sending
            assert store.data_key(key) not in client.watched_keys
            assert store.cache is not None and not store.cache.holds(store.data_key(key))
            await writer.set(f"{ns}/{key}".encode(), b'"v2"')  # not cached: the next read reads it
        await d.close()


async def test_a_get_answered_before_its_keynotify_is_returned_and_not_kept(fresh_mosquitto: MosquittoBroker) -> None:
    """The GET's answer came first: the service may have read the key before registering it, so a change in between
    could go unnoticed. The value is returned but not kept; the next read (the key watched now) keeps it."""
    service = ReorderingService(fresh_mosquitto.host, fresh_mosquitto.port)
    await service.start()
    try:
        async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port, timeout=WAIT) as client:
            d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=_namespace(), listing="scan")
            store = d._store
            assert store.cache is not None
            data_key = store.data_key("k")
            assert await d.get("k") == "stored"
            assert service.received == [b"KEYNOTIFY", b"GET"]
            assert service.replied == [b"GET", b"KEYNOTIFY"]
            assert data_key in client.watched_keys  # the watch was confirmed ...
            assert not store.cache.holds(data_key)  # ... after the GET's answer: not kept
            service.reorder = False
            before = client.requests_sent
            assert await d.get("k") == "stored"
            assert client.requests_sent - before == 1  # watched now: the GET alone, and kept
            assert store.cache.holds(data_key)
            await d.close()
    finally:
        await service.close()
