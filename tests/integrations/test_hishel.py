"""The hishel storages on mosquitto and the emulator process, modelled on hishel's own storage tests (its sdist's
``tests/_core/_async/test_redis_storage.py``, written against fakeredis and Redis's keys, so not runnable here):
round trips re-chunked, entries invisible until complete, TTL and TTI on an injected clock, header updates,
removal, oversize bodies, and a store failure never raised into the request."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("hishel")

from hishel import Entry, Headers, Request, Response

from sskv_mapping import AsyncStateStoreClient, ConfigurationError, ConnectionSettings, StateStoreClient
from sskv_mapping.integrations.hishel import AsyncStateStoreStorage, StateStoreStorage

pytestmark = pytest.mark.broker


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def client(broker_url: str) -> AsyncIterator[AsyncStateStoreClient]:
    c = AsyncStateStoreClient(settings=ConnectionSettings.from_url(broker_url))
    await c.connect()
    yield c
    await c.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def storage(client: AsyncStateStoreClient, clock: Clock, **kwargs: Any) -> AsyncStateStoreStorage:
    return AsyncStateStoreStorage(client, namespace=f"hishel-{uuid.uuid4().hex[:8]}", clock=clock, **kwargs)


async def body(*chunks: bytes) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c


def request() -> Request:
    return Request(method="GET", url="https://example.com/a", headers=Headers({"accept": "text/html"}))


def response(*chunks: bytes) -> Response:
    return Response(status_code=200, headers=Headers({"content-type": ["text/html"]}), stream=body(*chunks))


async def read(entry: Entry) -> bytes:
    stream = entry.response.stream
    assert stream is not None and hasattr(stream, "__aiter__")
    return b"".join([c async for c in stream])


async def store(s: AsyncStateStoreStorage, key: str, *chunks: bytes, **limits: Any) -> Entry:
    entry = await s.create_entry(request(), response(*chunks), key, **limits)
    assert await read(entry) == b"".join(chunks)  # the consumer gets the body while it is saved
    return entry


async def test_round_trip_rechunks_and_returns_exact_body(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, chunk_size=10)
    data = [bytes([i]) * n for i, n in enumerate([3, 25, 1, 40])]
    entry = await store(s, "k", *data)
    [found] = await s.get_entries("k")
    assert found.id == entry.id
    assert found.request.url == "https://example.com/a" and found.request.headers["accept"] == "text/html"
    assert found.response.status_code == 200 and found.response.headers["content-type"] == "text/html"
    assert await read(found) == b"".join(data)
    assert await client.get(f"{s._core.ns}/body/{entry.id.hex}/6") is not None  # 69 bytes: 7 chunks of <= 10
    assert await client.get(f"{s._core.ns}/body/{entry.id.hex}/7") is None


async def test_empty_body(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock)
    await store(s, "k")
    [found] = await s.get_entries("k")
    assert await read(found) == b""


async def test_incomplete_entry_is_invisible_until_stream_finishes(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, chunk_size=4)
    entry = await s.create_entry(request(), response(b"abcdef", b"ghij"), "k")
    stream = entry.response.stream
    assert stream is not None and hasattr(stream, "__anext__")
    assert await stream.__anext__() == b"abcdef"
    assert await s.get_entries("k") == []
    assert await stream.__anext__() == b"ghij"
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert len(await s.get_entries("k")) == 1


async def test_ttl_hides_the_entry(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, default_ttl=60)
    await store(s, "k", b"x")
    clock.now += 59
    assert len(await s.get_entries("k")) == 1
    clock.now += 2
    assert await s.get_entries("k") == []


async def test_tti_extends_on_read_and_expires_when_idle(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, default_ttl=None, default_tti=10)
    await store(s, "k", b"x" * 100)
    for _ in range(3):  # read every 6 s: 18 s in all, longer than the TTI
        clock.now += 6
        [found] = await s.get_entries("k")
        assert await read(found) == b"x" * 100
    clock.now += 11
    assert await s.get_entries("k") == []


async def test_ttl_caps_tti(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock)
    await store(s, "k", b"x", ttl=15, tti=10)
    clock.now += 8
    assert len(await s.get_entries("k")) == 1
    clock.now += 8  # 16 s: within the restarted TTI, past the TTL
    assert await s.get_entries("k") == []


async def test_values_passed_to_create_entry_override_defaults(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, default_ttl=5)
    await store(s, "k", b"x", ttl=100)
    clock.now += 50
    assert len(await s.get_entries("k")) == 1


async def test_update_headers_keeps_the_body(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock)
    entry = await store(s, "k", b"body")
    await s.update_headers(entry.id, Headers({"etag": '"v2"'}))
    [found] = await s.get_entries("k")
    assert found.response.headers["etag"] == '"v2"' and "content-type" not in found.response.headers
    assert await read(found) == b"body"


async def test_remove_and_update_missing_entry_are_noops(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock)
    await s.remove_entry(uuid.uuid4())
    await s.update_headers(uuid.uuid4(), Headers({}))


async def test_remove_hides_the_entry(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock)
    entry = await store(s, "k", b"body")
    await s.remove_entry(entry.id)
    assert await s.get_entries("k") == []


async def test_a_newer_entry_replaces_the_older(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock)
    await store(s, "k", b"old")
    newer = await store(s, "k", b"new")
    [found] = await s.get_entries("k")
    assert found.id == newer.id and await read(found) == b"new"


async def test_too_big_response_is_not_cached_but_fully_delivered(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, max_stream_size=10, chunk_size=4)
    await store(s, "k", b"0123456", b"789abc")
    assert await s.get_entries("k") == []


async def test_a_lost_chunk_raises_instead_of_truncating(client: AsyncStateStoreClient, clock: Clock) -> None:
    s = storage(client, clock, chunk_size=2)
    entry = await store(s, "k", b"abcdef")
    await client.delete(f"{s._core.ns}/body/{entry.id.hex}/1")
    [found] = await s.get_entries("k")
    with pytest.raises(RuntimeError, match="lost chunk 1"):
        await read(found)


async def test_a_store_failure_mid_stream_does_not_fail_the_consumer(
    broker_url: str, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    c = AsyncStateStoreClient(settings=ConnectionSettings.from_url(broker_url))
    await c.connect()
    s = storage(c, clock, chunk_size=2)
    entry = await s.create_entry(request(), response(b"ab", b"cd", b"ef"), "k")
    stream = entry.response.stream
    assert stream is not None and isinstance(stream, AsyncIterator)
    assert await stream.__anext__() == b"ab"
    await c.close()  # the store goes away mid-response
    assert [chunk async for chunk in stream] == [b"cd", b"ef"]
    assert "hishel" in caplog.text


async def test_an_outage_is_a_miss_and_never_raises(broker_url: str, clock: Clock) -> None:
    c = AsyncStateStoreClient(settings=ConnectionSettings.from_url(broker_url))
    await c.connect()
    s = storage(c, clock)
    await c.close()
    assert await s.get_entries("k") == []
    await s.remove_entry(uuid.uuid4())
    await s.update_headers(uuid.uuid4(), Headers({}))
    entry = await s.create_entry(request(), response(b"served"), "k")
    assert await read(entry) == b"served"


async def test_bad_arguments(client: AsyncStateStoreClient) -> None:
    with pytest.raises(ConfigurationError):
        AsyncStateStoreStorage(client, chunk_size=0)
    with pytest.raises(ConfigurationError):
        AsyncStateStoreStorage(client, namespace="a/b")


def test_the_sync_storage(broker_url: str) -> None:
    c = StateStoreClient.from_url(broker_url)
    c.connect()
    try:
        s = StateStoreStorage(c, namespace=f"hishel-{uuid.uuid4().hex[:8]}", chunk_size=3)

        def chunks() -> Iterator[bytes]:
            yield b"hello "
            yield b"world"

        entry = s.create_entry(request(), Response(status_code=200, stream=chunks()), "k")
        assert s.get_entries("k") == []
        stream = entry.response.stream
        assert stream is not None and isinstance(stream, Iterator)
        assert b"".join(stream) == b"hello world"
        [found] = s.get_entries("k")
        assert found.response.stream is not None and isinstance(found.response.stream, Iterator)
        assert b"".join(found.response.stream) == b"hello world"
        s.update_headers(found.id, Headers({"x": "1"}))
        s.remove_entry(found.id)
        assert s.get_entries("k") == []
    finally:
        c.close()
