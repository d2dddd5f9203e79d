"""The key and value limits (docs/reliability.md, "Limits"), over real processes: mosquitto on its default settings
and the emulator as a process.

* a key over 32,474 bytes (its notification topic would pass MQTT's 65,535 bytes) or a value over
  ``min(Maximum Packet Size, 16 MiB) - 768 - 2 * len(key)`` is refused with :class:`ValueTooLargeError` before
  anything is sent; a batch (``update``, ``set_many``) checks every item first: all or nothing;
* the emulator refuses such a SET from any other MQTT client (``-ERR``, :class:`RequestTooLargeError`), answers a
  reply it could never send with :class:`ResponseTooLargeError` at once (not a timeout), and waits for room rather
  than dropping a reply within its bound;
* its read-only inspector never renders a huge value whole.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sskv_mapping import (
    AsyncStateStoreDict,
    KeyOperation,
    RequestTooLargeError,
    ResponseTooLargeError,
    ValueTooLargeError,
)
from sskv_mapping._protocol import limits
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._transport import stream
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.miniclient import MiniClient
from tests._support.procs import EmulatorProcess, start_emulator

from .conftest import Guard

pytestmark = pytest.mark.broker

MIB = 1 << 20
WAIT = 10.0
#: large values take a while to cross loopback on a shared machine: the clients' request timeout
SLOW = 60.0


def _key(tag: str) -> bytes:
    return f"{tag}-{uuid.uuid4().hex[:12]}".encode()


def test_the_limits_are_what_the_docs_say() -> None:
    assert limits.WRITE_BOUND == stream.WRITE_BOUND  # the client's and the emulator's write bound
    assert limits.MAX_KEY_BYTES == 32_474
    assert limits.max_value_bytes(16, None) == 16 * MIB - 768 - 32
    assert limits.max_value_bytes(16, 100_000) == 100_000 - 768 - 32
    # the longest key's topic, for the longest watcher id accounted for, is exactly within MQTT's limit
    from sskv_mapping._protocol.topics import notification_topic

    longest = notification_topic("i" * limits.MAX_WATCHER_ID_BYTES, b"k" * limits.MAX_KEY_BYTES)
    assert len(longest) <= 65_535 < len(longest) + 2


# -- the client refuses before sending ------------------------------------------------------------------------------


async def test_a_50_mb_set_is_refused_before_anything_is_sent(
    client: AsyncStateStoreClient, observer: AsyncStateStoreClient
) -> None:
    guard = await Guard(client, observer).arm()
    try:
        with pytest.raises(ValueTooLargeError) as caught:
            await client.set(guard.key, b"x" * (50 * 1000 * 1000))
        assert "value limit" in str(caught.value) and f"{limits.max_value_bytes(len(guard.key), None):,}" in str(
            caught.value
        )
        assert caught.value.limit == limits.WRITE_BOUND and caught.value.size > limits.WRITE_BOUND
        await guard.check()  # no request sent, nothing stored, no change notified
        # just under the limit goes through, on the same connection
        largest = b"y" * limits.max_value_bytes(len(guard.key), None)
        async with AsyncStateStoreClient(client.settings.host, client.settings.port, timeout=SLOW) as big:
            assert (await big.set(guard.key, largest)).applied
            entry = await big.get(guard.key)
            assert entry is not None and entry.value == largest
        assert client.reconnects == 0
    finally:
        await guard.close()


async def test_update_and_set_many_write_all_or_nothing(
    client: AsyncStateStoreClient, observer: AsyncStateStoreClient
) -> None:
    ns = f"lim{uuid.uuid4().hex[:8]}"
    d: AsyncStateStoreDict[bytes] = AsyncStateStoreDict(client, namespace=ns, codec="raw")
    cache: AsyncStateStoreCache[bytes] = AsyncStateStoreCache(client, namespace=ns + "c", codec="raw")
    await d.open()
    await cache.open()
    try:
        items = {f"k{i}": b"small %d" % i for i in range(4)}
        over = {**items, "huge": b"x" * (17 * MIB)}
        sent = client.requests_sent
        with pytest.raises(ValueTooLargeError):
            await d.update(over)
        with pytest.raises(ValueTooLargeError):
            await cache.set_many(over)
        assert client.requests_sent == sent  # checked before anything was sent: not even an index entry
        for key in over:
            assert await observer.get(d._store.data_key(key)) is None
            assert await observer.get(cache._store.data_key(key)) is None
        assert await d.keys() == []
        # the same items without the huge one: all written
        await d.update(items)
        assert sorted(await d.keys()) == sorted(items)
        assert await cache.set_many(items) == []
        assert await cache.get_many(list(items)) == items
    finally:
        await cache.close()
        await d.close()


async def test_update_of_four_6_mib_values_writes_all_four(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess
) -> None:
    """Within the limit, a batch larger than the write bound together waits for room: nothing is dropped."""
    async with AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=SLOW) as c:
        d: AsyncStateStoreDict[bytes] = AsyncStateStoreDict(c, namespace=f"six{uuid.uuid4().hex[:8]}", codec="raw")
        await d.open()
        try:
            values = {f"v{i}": bytes([65 + i]) * (6 * MIB) for i in range(4)}
            await d.update(values)
            for key, value in values.items():
                entry = await c.get(d._store.data_key(key))
                assert entry is not None and entry.value == value
        finally:
            await d.clear()
            await d.close()


async def test_a_40_kb_key_is_refused_by_the_dict_and_the_cache_naming_the_limit(
    client: AsyncStateStoreClient,
) -> None:
    d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=f"lk{uuid.uuid4().hex[:8]}")
    cache: AsyncStateStoreCache[str] = AsyncStateStoreCache(client, namespace=f"lkc{uuid.uuid4().hex[:8]}")
    await d.open()
    await cache.open()
    try:
        long_key = "k" * 40_000
        sent = client.requests_sent
        for write in (d.set(long_key, "v"), cache.set(long_key, "v"), d.update({"ok": "v", long_key: "v"})):
            with pytest.raises(ValueTooLargeError, match="key limit of 32,474 bytes") as caught:
                await write
            assert caught.value.limit == limits.MAX_KEY_BYTES
        assert client.requests_sent == sent
        assert await d.keys() == [] and await d.get("ok") is None
    finally:
        await cache.close()
        await d.close()


async def test_a_30_kb_key_change_reaches_another_client_through_its_notification(
    client: AsyncStateStoreClient, observer: AsyncStateStoreClient
) -> None:
    d: AsyncStateStoreDict[str] = AsyncStateStoreDict(client, namespace=f"lk{uuid.uuid4().hex[:8]}")
    await d.open()
    try:
        key = "k" * 30_000
        watch = await observer.watch(d._store.data_key(key)).start()
        try:
            await d.set(key, "first")
            event = await watch.next(WAIT)
            assert event.op is KeyOperation.SET and event.value == b'"first"'
            await d.set(key, "second")
            event = await watch.next(WAIT)
            assert event.value == b'"second"'
        finally:
            await watch.aclose()
        await d.delitem(key)
    finally:
        await d.close()


# -- the emulator ------------------------------------------------------------------------------------------------


async def test_six_concurrent_readers_of_a_6_mib_value_are_all_answered(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess
) -> None:
    """Their replies together pass the emulator's 16 MiB write bound: the ones without room wait for it."""
    key, value = _key("six"), bytes(range(256)) * (6 * MIB // 256)
    readers = [AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=SLOW) for _ in range(6)]
    try:
        for reader in readers:
            await reader.connect()
        assert (await readers[0].set(key, value)).applied
        entries = await asyncio.gather(*(reader.get(key) for reader in readers), return_exceptions=True)
        for entry in entries:
            assert not isinstance(entry, BaseException), entry
            assert entry is not None and entry.value == value
        await readers[0].delete(key)
    finally:
        for reader in readers:
            await reader.close()


async def test_a_20_mb_set_from_a_raw_client_is_refused_by_the_emulator(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess, client: AsyncStateStoreClient
) -> None:
    key = _key("raw20")
    async with MiniClient(mosquitto.host, mosquitto.port) as raw:
        response = await raw.request(b"SET", key, b"z" * (20 * 1000 * 1000), timeout=SLOW)
        assert response.payload == f"-ERR {RequestTooLargeError.TEXT}\r\n".encode()
        # a key too long to be notified is refused as well
        response = await raw.request(b"SET", b"k" * (limits.MAX_KEY_BYTES + 1), b"v")
        assert response.payload == f"-ERR {RequestTooLargeError.TEXT}\r\n".encode()
        # and the longest key is not
        response = await raw.request(b"SET", b"k" * limits.MAX_KEY_BYTES, b"v")
        assert response.payload == b"+OK\r\n"
        await raw.request(b"DEL", b"k" * limits.MAX_KEY_BYTES)
    assert await client.get(key) is None  # nothing stored


# -- values stored past the limits (a persistence file): typed errors at once, an inspector that keeps up -----------


def _persisted(path: Path, entries: dict[bytes, bytes]) -> Path:
    version = str(HybridLogicalClock(int(time.time() * 1000), 0, "StateStore"))
    doc = {
        "format": 1,
        "clock": version,
        "entries": [
            {
                "key": base64.b64encode(k).decode(),
                "value": base64.b64encode(v).decode(),
                "version": version,
                "expires_at_ms": None,
                "fencing_token": None,
            }
            for k, v in entries.items()
        ],
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def oversized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MosquittoBroker, EmulatorProcess]]:
    """An emulator (with the read-only inspector) whose store holds a 20 MB and a 60 MB value, loaded from its
    persistence file: what no SET may write any more, but an older file or another emulator could hold."""
    pytest.importorskip("aiohttp", reason="the inspector needs the 'inspect' extra (aiohttp)")
    path = _persisted(
        tmp_path_factory.mktemp("oversized") / "store.json",
        {b"big20": b"t" * (20 * 1000 * 1000), b"big60": b"u" * (60 * 1000 * 1000), b"small": b"fine"},
    )
    with (
        MosquittoBroker() as broker,
        start_emulator(broker.host, broker.port, "--persist-file", str(path), "--inspect", "0", timeout=60) as proc,
    ):
        yield broker, proc


@pytest.fixture
async def reader(oversized: tuple[MosquittoBroker, EmulatorProcess]) -> AsyncIterator[AsyncStateStoreClient]:
    broker = oversized[0]
    async with AsyncStateStoreClient(broker.host, broker.port, timeout=SLOW) as c:
        yield c


async def test_a_stored_value_past_the_limits_is_read_as_a_typed_error_not_a_timeout(
    reader: AsyncStateStoreClient,
) -> None:
    for key in (b"big20", b"big60"):
        with pytest.raises(ResponseTooLargeError):  # answered -ERR at once; the client's timeout is a minute
            await reader.get(key)
    entry = await reader.get(b"small")
    assert entry is not None and entry.value == b"fine"


async def test_the_inspector_shows_a_60_mb_value_cut_and_the_emulator_keeps_answering(
    oversized: tuple[MosquittoBroker, EmulatorProcess], reader: AsyncStateStoreClient
) -> None:
    httpx = pytest.importorskip("httpx")
    found = re.search(r"inspector \(read-only\) on (http://\S+)", oversized[1].output)
    assert found, oversized[1].output
    async with httpx.AsyncClient(base_url=found.group(1), timeout=SLOW) as http:

        async def pages() -> None:
            for _ in range(5):
                r = await http.get("/api/key", params={"key": "big60"})
                assert r.status_code == 200
                value = r.json()["value"]
                assert value["size"] == 60 * 1000 * 1000 and value["cut"] is True
                assert value["text"] == "u" * len(value["text"]) and 0 < len(value["text"]) <= 64 * 1024
                r = await http.get("/api/state")
                assert r.status_code == 200
                listed = {k["key"]: k["value"] for k in r.json()["keys"]["keys"]}
                assert listed["big60"]["size"] == 60 * 1000 * 1000 and listed["big60"]["cut"]
                assert len(listed["big60"]["text"]) <= 200

        async def reads() -> int:
            served = 0
            for _ in range(20):
                entry = await reader.get(b"small")
                assert entry is not None and entry.value == b"fine"
                served += 1
            return served

        _, served = await asyncio.gather(pages(), reads())
        assert served == 20


async def test_a_watch_whose_notifications_could_never_be_sent_is_refused(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess, observer: AsyncStateStoreClient
) -> None:
    """A client id over 256 bytes (MQTT allows it) and a key near the key limit: the topic would pass 65,535 bytes,
    so the watch is refused before sending instead of never hearing of a change (a dict then does not cache it)."""
    long_id = "long-" + "i" * 1000 + uuid.uuid4().hex[:8]
    key = b"k" * 32_000
    async with AsyncStateStoreClient(mosquitto.host, mosquitto.port, client_id=long_id, timeout=5) as c:
        sent = c.requests_sent
        with pytest.raises(ValueTooLargeError, match="cannot be notified"):
            await c.watch(key).start()
        assert c.requests_sent == sent
        short = await c.watch(b"k" * 100).start()  # a shorter key is notified to it
        await short.aclose()
    watch = await observer.watch(b"k" * limits.MAX_KEY_BYTES).start()  # and the longest key to a usual id
    await watch.aclose()
