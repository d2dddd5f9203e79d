"""The client faced with a responder that misbehaves: typed errors, never a hang or a wrong value.

A fake "service" written in the test on the transport layer answers requests on the real broker the way
it is told to (garbage, wrong correlation data, duplicates, silence...). No emulator runs here.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from sskv_mapping import (
    HybridLogicalClock,
    NotAuthorizedError,
    ProtocolError,
    RequestTimeoutError,
    RpcStatusError,
    ServiceError,
    UnsupportedVersionError,
)
from sskv_mapping._protocol import topics
from sskv_mapping._transport.base import InboundMessage, OutgoingMessage
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient

pytestmark = pytest.mark.broker

Reply = tuple[bytes, Sequence[tuple[str, str]]]
Behaviour = Callable[[InboundMessage], list[tuple[bytes | None, Reply]]]


class FakeService:
    """Answers each request with what ``behaviour`` returns: a list of (correlation data, reply)."""

    def __init__(self, host: str, port: int) -> None:
        self.behaviour: Behaviour = lambda m: []
        self.requests: list[InboundMessage] = []
        self.got_request = asyncio.Event()
        self._conn = PahoConnection(
            ConnectionSettings(host=host, port=port, client_id=f"fake-{uuid.uuid4().hex[:8]}"), self._on
        )
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self._conn.connect()
        await self._conn.subscribe([topics.REQUEST_TOPIC])

    def _on(self, msg: InboundMessage) -> None:
        self.requests.append(msg)
        self.got_request.set()
        for corr, (payload, props) in self.behaviour(msg):
            task = asyncio.get_running_loop().create_task(
                self._conn.publish(
                    OutgoingMessage(
                        msg.response_topic or "nowhere", payload, correlation_data=corr, user_properties=props
                    )
                )
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._conn.close()


OK_PROPS = [("__stat", "200"), ("__protVer", "1.0")]


@pytest.fixture
async def fake(bare_broker_address: tuple[str, int]) -> AsyncIterator[FakeService]:
    service = FakeService(*bare_broker_address)
    await service.start()
    yield service
    await service.close()


@pytest.fixture
async def lone_client(bare_broker_address: tuple[str, int]) -> AsyncIterator[AsyncStateStoreClient]:
    # a broker with no emulator on it: only the fake answers
    async with AsyncStateStoreClient(*bare_broker_address, timeout=2.0) as c:
        yield c


def answer(payload: bytes, props: Sequence[tuple[str, str]] = OK_PROPS) -> Behaviour:
    return lambda m: [(m.correlation_data, (payload, props))]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"$5\r\nabc\r\n",  # declared length longer than the data
        b"$3\r\nabc",  # no trailing CRLF
        b"$3\r\nabc\r\nEXTRA",  # bytes after the reply
        b"+OK\r\n",  # a SET reply to a GET
        b"*1\r\n$1\r\nx\r\n",
        b"\xff\xfe",
        b":1\r\n",
    ],
)
async def test_garbage_reply_to_get_is_a_protocol_error(
    fake: FakeService, lone_client: AsyncStateStoreClient, payload: bytes
) -> None:
    fake.behaviour = answer(payload)
    with pytest.raises(ProtocolError):
        await lone_client.get("k")
    assert len(lone_client._sender.pending) == 0


async def test_missing_stat_is_a_protocol_error(fake: FakeService, lone_client: AsyncStateStoreClient) -> None:
    fake.behaviour = answer(b"$1\r\nv\r\n", [("__protVer", "1.0")])
    with pytest.raises(ProtocolError):
        await lone_client.get("k")


async def test_rpc_status_and_version_errors(fake: FakeService, lone_client: AsyncStateStoreClient) -> None:
    fake.behaviour = answer(b"", [("__stat", "503"), ("__stMsg", "busy"), ("__protVer", "1.0")])
    with pytest.raises(RpcStatusError) as info:
        await lone_client.get("k")
    assert info.value.status == 503 and info.value.text == "busy"
    fake.behaviour = answer(b"", [("__stat", "505"), ("__supProtMajVer", "2"), ("__protVer", "2.0")])
    with pytest.raises(UnsupportedVersionError):
        await lone_client.get("k")


async def test_unknown_error_text_is_kept(fake: FakeService, lone_client: AsyncStateStoreClient) -> None:
    fake.behaviour = answer(b"-ERR something new happened\r\n")
    with pytest.raises(ServiceError) as info:
        await lone_client.set("k", b"v")
    assert type(info.value) is ServiceError and info.value.text == "something new happened"


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"-ERR not authorized\r\n", NotAuthorizedError),
        (b"$2\r\nOK\r\n", ProtocolError),  # a bulk string, not +OK
        (b":1\r\n", ProtocolError),
    ],
)
async def test_a_refused_or_garbled_keynotify_fails_the_watch(
    fake: FakeService, lone_client: AsyncStateStoreClient, payload: bytes, error: type[Exception]
) -> None:
    """A watch is only established when the service says ``+OK``: anything else raises and leaves no watch
    behind (the reply used to be ignored, so a refused KEYNOTIFY looked like a working watch)."""
    fake.behaviour = answer(payload)
    with pytest.raises(error):
        await lone_client.subscribe_key("k", lambda event: None)
    with pytest.raises(error):
        async with lone_client.watch("k"):
            pass
    assert lone_client.watched_keys == []


async def test_wrong_correlation_data_is_ignored_and_times_out(
    fake: FakeService, lone_client: AsyncStateStoreClient
) -> None:
    fake.behaviour = lambda m: [(uuid.uuid4().bytes, (b"$1\r\nX\r\n", OK_PROPS))]
    with pytest.raises(RequestTimeoutError):
        await lone_client.get("k", timeout=0.5)
    assert lone_client._sender.pending.unmatched >= 1
    assert len(lone_client._sender.pending) == 0


async def test_silence_times_out_and_cleans_up(fake: FakeService, lone_client: AsyncStateStoreClient) -> None:
    fake.behaviour = lambda m: []
    with pytest.raises(RequestTimeoutError):
        await lone_client.get("k", timeout=0.3)
    assert len(lone_client._sender.pending) == 0
    assert len(fake.requests) == 1
    expiry = fake.requests[0].message_expiry
    assert expiry == 1  # the timeout, rounded up to whole seconds


async def test_duplicate_responses_deliver_the_first_only(
    fake: FakeService, lone_client: AsyncStateStoreClient
) -> None:
    fake.behaviour = lambda m: [
        (m.correlation_data, (b"$5\r\nfirst\r\n", OK_PROPS)),
        (m.correlation_data, (b"$6\r\nsecond\r\n", OK_PROPS)),
    ]
    entry = await lone_client.get("k")
    assert entry is not None and entry.value == b"first"
    # the duplicate lands on nothing; the next call gets its own answer, not the stale duplicate
    fake.behaviour = answer(b"$4\r\nnext\r\n")
    entry = await lone_client.get("k2")
    assert entry is not None and entry.value == b"next"


async def test_requests_carry_the_protocol_properties(fake: FakeService, lone_client: AsyncStateStoreClient) -> None:
    fake.behaviour = answer(b"+OK\r\n", [*OK_PROPS, ("__ts", "000000000000001:00000:svc")])
    await lone_client.set("k", b"v", persist=True)
    request = fake.requests[-1]
    props = dict(request.user_properties)
    assert props["__srcId"] == lone_client.client_id == props["$partition"]
    assert props["__protVer"] == "1.0" and props["$high_priority"] == ""
    assert props["aio-persistence"] == "true"
    assert HybridLogicalClock.parse(props["__ts"]).node_id == lone_client.client_id
    assert request.qos == 1 and request.content_type == "application/octet-stream"
    assert request.correlation_data is not None and len(request.correlation_data) == 16
    assert request.response_topic == topics.response_topic(lone_client.client_id)
    fake.behaviour = answer(b"$-1\r\n")
    assert await lone_client.get("k") is None
    assert "__ts" in dict(fake.requests[-1].user_properties)  # on GET too


async def test_cancelled_call_is_cleaned_up(fake: FakeService, lone_client: AsyncStateStoreClient) -> None:
    fake.behaviour = lambda m: []
    task = asyncio.ensure_future(lone_client.get("k", timeout=None))
    await asyncio.wait_for(fake.got_request.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(lone_client._sender.pending) == 0
    fake.behaviour = answer(b"$2\r\nok\r\n")
    entry = await lone_client.get("k")
    assert entry is not None and entry.value == b"ok"
