"""The emulator process, on the session's real mosquitto, answers a flood of 10,000 random and broken requests
and is still serving afterwards, its other data intact.

The flood is sent with a raw MQTT connection (``PahoConnection.publish_nowait``: no client-side checks) in
pipelined batches; a well-formed sentinel request closes each batch, and the next batch starts when the
sentinel's reply is in (the emulator answers in arrival order), which keeps every queue far below mosquitto's
per-client limit of 1,000 queued messages. Each request gets a response topic of its own, so every reply is
attributed to its request. Every request the emulator should answer (correlation data and a usable response
topic present, sent to the request topic) must get exactly one reply: ``__stat`` 200 with a strictly parsable
RESP3 payload and its correlation data echoed, or ``__stat`` 505 for a foreign protocol version; a 500
(the emulator's "the core failed") fails the test. Requests it must ignore must get none.

Strings in user properties and topics stay within what mosquitto accepts (no control characters, BOM or
non-characters: mosquitto disconnects a client that sends them, which would end the flood, not test the
emulator). No valid ``__ts`` lies in the future, so the shared emulator's clock is not pushed ahead for the
tests that run after this one.

Knobs: ``SSKV_FLOOD_REQUESTS`` (default 10000), ``SSKV_FLOOD_SEED`` (default: random, printed on failure).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sskv_mapping._protocol import headers, resp3
from sskv_mapping._protocol.commands import Scan
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.topics import REQUEST_TOPIC, SERVICE_ID
from sskv_mapping._transport.base import InboundMessage, OutgoingMessage
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, Entry
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import UnsupportedVersionError
from tests._support.procs import EmulatorProcess

N_REQUESTS = int(os.environ.get("SSKV_FLOOD_REQUESTS", "10000"))
SEED = int(os.environ.get("SSKV_FLOOD_SEED", str(random.SystemRandom().randrange(2**32))))
BATCH = 400
WAIT = 30.0  # bound of each wait for a batch's sentinel reply (seconds); a healthy run needs a fraction

FORBIDDEN_PREFIX = f"clients/statestore/v1/{SERVICE_ID}"
#: Text mosquitto accepts in MQTT strings (no controls, no BOM, no non-characters), some of it multi-byte.
SAFE_CHARS = "abcXYZ019 _-./:;@$%&*+#!?é鍵ü😀Ω"


@dataclass
class Request:
    category: str
    payload: bytes
    topic: str = REQUEST_TOPIC
    qos: int = 1
    corr: bytes | None = None
    response_topic: str | None = None
    props: list[tuple[str, str]] = field(default_factory=list)
    content_type: str | None = headers.CONTENT_TYPE
    expect_reply: bool = True


class Flood:
    """Builds the random requests (seeded) and keeps the bookkeeping of their replies."""

    def __init__(self, rng: random.Random, run: str, client_id: str) -> None:
        self.rng = rng
        self.run = run
        self.client_id = client_id
        self.pool = [f"fuzzflood-{run}-{j}".encode() for j in range(24)]
        #: keys the "ft" requests may fence (a fenced key refuses every later write without a token)
        self.fenced_pool = [f"fuzzflood-{run}-fenced-{j}".encode() for j in range(4)]
        self.now_ms = time.time_ns() // 1_000_000

    # -- pieces -------------------------------------------------------------------------------------

    def text(self, n: int) -> str:
        return "".join(self.rng.choice(SAFE_CHARS) for _ in range(n))

    def past_ts(self, node: str | None = None) -> str:
        wall = self.now_ms - self.rng.randrange(0, 10**7)
        return f"{wall:015d}:{self.rng.randrange(100):05d}:{node or self.client_id}"

    def good_props(self) -> list[tuple[str, str]]:
        return [
            (headers.TIMESTAMP, self.past_ts()),
            (headers.SOURCE_ID, self.client_id),
            (headers.PROT_VER, "1.0"),
            (headers.PARTITION, self.client_id),
            (headers.HIGH_PRIORITY, ""),
        ]

    def valid_command(self) -> bytes:
        rng = self.rng
        key = rng.choice(self.pool)
        value = rng.randbytes(rng.randrange(0, 48))
        verb = rng.choice(["GET", "SET", "SETPX", "SETNX", "DEL", "VDEL", "KEYNOTIFY", "STOP"])
        if verb == "GET":
            return resp3.encode_request(b"GET", key)
        if verb == "SET":
            return resp3.encode_request(b"SET", key, value, b"PX", b"60000")
        if verb == "SETPX":
            return resp3.encode_request(b"SET", key, value, b"PX", b"%d" % rng.randrange(1, 2000))
        if verb == "SETNX":
            return resp3.encode_request(b"SET", key, value, rng.choice([b"NX", b"NEX"]), b"PX", b"60000")
        if verb == "DEL":
            return resp3.encode_request(b"DEL", key)
        if verb == "VDEL":
            return resp3.encode_request(b"VDEL", key, value)
        if verb == "KEYNOTIFY":
            return resp3.encode_request(b"KEYNOTIFY", key)
        return resp3.encode_request(b"KEYNOTIFY", key, b"STOP")

    def mutated(self, data: bytes) -> bytes:
        buf = bytearray(data)
        for _ in range(self.rng.randrange(1, 4)):
            op = self.rng.randrange(3)
            if op == 0 and buf:
                buf[self.rng.randrange(len(buf))] = self.rng.randrange(256)
            elif op == 1:
                at = self.rng.randrange(len(buf) + 1)
                buf[at:at] = self.rng.choice([b"\r\n", b"$", b"*", b"-1", b"\x00", self.rng.randbytes(3)])
            elif buf:
                at = self.rng.randrange(len(buf))
                del buf[at : at + self.rng.randrange(1, 5)]
        return bytes(buf)

    # -- one request --------------------------------------------------------------------------------

    def make(self) -> Request:
        rng = self.rng
        category = rng.choices(
            [
                "random",
                "truncated",
                "mutated",
                "valid",
                "verb",
                "huge",
                "nested",
                "protver",
                "ts",
                "ft",
                "corr",
                "rtopic",
                "topic",
                "qos0",
                "props",
                "big",
            ],
            weights=[14, 14, 12, 10, 7, 5, 3, 6, 7, 4, 5, 4, 3, 2, 3, 1],
        )[0]
        req = Request(category, self.valid_command(), corr=uuid.uuid4().bytes, props=self.good_props())
        if category == "random":
            req.payload = rng.randbytes(rng.randrange(0, 120))
        elif category == "truncated":
            req.payload = req.payload[: rng.randrange(len(req.payload))]
        elif category == "mutated":
            req.payload = self.mutated(req.payload)
        elif category == "verb":
            key = rng.choice(self.pool)
            req.payload = rng.choice(
                [
                    resp3.encode_request(rng.choice([b"FLUSHALL", b"GETX", b"", b"SCAN", b"\xff"]), key),
                    resp3.encode_request(b"get", key),
                    resp3.encode_request(b"Set", key, b"v", b"px", b"1000"),
                    resp3.encode_request(b"GET"),
                    resp3.encode_request(b"GET", key, key),
                    resp3.encode_request(b"SET", key),
                    resp3.encode_request(b"SET", key, b"v", b"NX", b"NEX"),
                    resp3.encode_request(b"SET", key, b"v", b"PX"),
                    resp3.encode_request(b"SET", key, b"v", b"PX", b"-5"),
                    resp3.encode_request(b"SET", key, b"v", b"PX", b"99999999999999999999"),
                    resp3.encode_request(b"SET", key, b"v", b"PX", b"1000", b"NX"),
                    resp3.encode_request(b"VDEL", key),
                    resp3.encode_request(b"KEYNOTIFY", key, b"GO"),
                    resp3.encode_request(b"DEL", b""),
                    resp3.encode_request(b"SCAN", key + b"*"),
                    resp3.encode_request(b"scan", b"[!a-z]?[*]"),
                    resp3.encode_request(b"SCAN", b"a[b"),
                    resp3.encode_request(b"SCAN", key, rng.randbytes(rng.randrange(0, 40))),
                    resp3.encode_request(b"SCAN", b"*", b"\x01" + rng.randbytes(12)),
                    resp3.encode_request(),
                ]
            )
        elif category == "huge":
            req.payload = rng.choice(
                [
                    b"*9223372036854775807\r\n",
                    b"*99999999999999999999\r\n$3\r\nGET\r\n",
                    b"*2\r\n$9223372036854775807\r\nGET\r\n",
                    b"*2\r\n$3\r\nGET\r\n$-5\r\nk\r\n",
                    b"*2\r\n$3\r\nGET\r\n$" + b"9" * 5000 + b"\r\nk\r\n",
                    b"*-1\r\n",
                    b"*2\r\n$3\r\nGET\r\n$1000000\r\nk\r\n",
                    b"*" + b"1" * 19 + b"\r\n" + b"$0\r\n\r\n" * 50,
                ]
            )
        elif category == "nested":
            req.payload = b"*1\r\n" * rng.randrange(1, 40) + b"$3\r\nGET\r\n"
        elif category == "protver":
            req.props[2] = (
                headers.PROT_VER,
                rng.choice(["2.0", "0.9", "", "abc", "1x", "\u0661.0", "9" * 30, "1", "1.9"]),
            )
            if rng.random() < 0.2:
                del req.props[2]
        elif category == "ts":
            bad = rng.choice(
                [
                    "",
                    "garbage",
                    "1:2",
                    "1:2:3:4",
                    "-1:0:n",
                    f"{self.now_ms + 10**9}:0:n",  # days ahead: a skew error, never merged
                    "9" * 25 + ":0:n",
                    "\u0661:0:n",
                    f"{self.now_ms}:{2**64}:n",
                    f"{2**64 - 1}:{2**64 - 1}:n",
                ]
            )
            if rng.random() < 0.25:
                req.props = [p for p in req.props if p[0] != headers.TIMESTAMP]  # SET: missing timestamp
            else:
                req.props[0] = (headers.TIMESTAMP, bad)
        elif category == "ft":
            key = rng.choice(self.fenced_pool)
            req.payload = rng.choice(
                [resp3.encode_request(b"SET", key, b"v", b"PX", b"60000"), resp3.encode_request(b"DEL", key)]
            )
            req.props.append(
                (headers.FENCING_TOKEN, rng.choice(["x", "1:1", f"{self.now_ms + 10**9}:0:n", self.past_ts("lock")]))
            )
        elif category == "corr":
            choice = rng.randrange(4)
            if choice == 0:
                req.corr = None
                req.expect_reply = False
            else:
                req.corr = [b"", rng.randbytes(1), rng.randbytes(rng.randrange(17, 400))][choice - 1]
        elif category == "rtopic":
            choice = rng.randrange(5)
            req.expect_reply = False
            if choice == 0:
                req.response_topic = None
            elif choice == 1:
                req.response_topic = ""
            elif choice == 2:
                req.response_topic = REQUEST_TOPIC
            elif choice == 3:
                req.response_topic = "{forbidden}"  # filled in by the sender: under the forbidden prefix
            else:
                req.response_topic = "{wildcard}"  # not a publishable topic: the emulator's publish fails
        elif category == "topic":
            req.expect_reply = False
            req.topic = rng.choice(
                [
                    REQUEST_TOPIC + "/x",
                    REQUEST_TOPIC.lower(),
                    REQUEST_TOPIC.replace("/v1/", "/v2/"),
                    "/" + REQUEST_TOPIC,
                    REQUEST_TOPIC.rsplit("/", 1)[0],
                    f"statestore/v1/{uuid.uuid4()}/command/invoke",
                ]
            )
        elif category == "qos0":
            req.qos = 0
        elif category == "props":
            choice = rng.randrange(5)
            if choice == 0:
                req.props = [(headers.PROT_VER, "1.0"), *req.props, (headers.PROT_VER, "7.0")]  # first wins
            elif choice == 1:
                req.props[1] = (headers.SOURCE_ID, rng.choice(["", self.text(8), self.text(300)]))
            elif choice == 2:
                req.props += [(self.text(rng.randrange(0, 10)), self.text(rng.randrange(0, 30))) for _ in range(100)]
            elif choice == 3:
                req.props = []
            else:
                req.content_type = rng.choice([None, "text/plain", self.text(20)])
        else:  # big
            req.payload = resp3.encode_request(b"SET", rng.choice(self.pool), rng.randbytes(60_000), b"PX", b"60000")
        return req


@dataclass
class Replies:
    by_index: dict[int, list[InboundMessage]] = field(default_factory=dict)
    stray: list[InboundMessage] = field(default_factory=list)
    count: int = 0
    sentinels: dict[int, asyncio.Event] = field(default_factory=dict)


def reply_kind(message: InboundMessage) -> str:
    """What a reply is: ``505``, ``err:<text>``, ``ok``, ``value``, ``nil``, ``int``, ``page`` (SCAN); raises on a
    malformed one."""
    props = dict(message.user_properties)
    assert message.content_type == headers.CONTENT_TYPE, f"reply content type {message.content_type!r}"
    try:
        headers.check_response(message.user_properties, message.content_type)
    except UnsupportedVersionError:
        assert props.get(headers.STATUS) == "505" and props.get(headers.SUPPORTED_MAJOR) == "1"
        return "505"
    assert props.get(headers.STATUS) == "200", f"reply status {props.get(headers.STATUS)!r}"
    reply = resp3.parse_reply(message.payload)  # a ProtocolError here fails the test: the emulator sent garbage
    if isinstance(reply, resp3.ErrorReply):
        return f"err:{reply.text}"
    if isinstance(reply, resp3.SimpleString):
        assert reply.text == "OK"
        return "ok"
    if reply is None:
        return "nil"
    if isinstance(reply, bytes):
        return "value"
    if isinstance(reply, list):  # a SCAN page: the strict §8 grammar, as the client reads it
        Scan(b"*").decode(message.payload)
        return "page"
    assert isinstance(reply, int) and reply in (-1, 0, 1), f"unexpected reply {reply!r}"
    return "int"


def batches(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


async def wait_for_sentinel(replies: Replies, batch: int) -> None:
    try:
        async with asyncio.timeout(WAIT):
            await replies.sentinels[batch].wait()
    except TimeoutError:
        pytest.fail(
            f"no reply to the sentinel of batch {batch} within {WAIT} s "
            f"({replies.count} replies so far); flood seed {SEED}"
        )


async def test_emulator_survives_a_flood_of_random_and_truncated_requests(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess
) -> None:
    run = uuid.uuid4().hex[:10]
    rng = random.Random(SEED)
    base = f"fuzzflood/{run}"
    replies = Replies()
    output_before = len(emulator.output)

    def on_message(message: InboundMessage) -> None:
        topic = message.topic
        if topic.startswith(f"{base}/s/"):
            replies.sentinels[int(topic.rsplit("/", 1)[1])].set()
            return
        if topic.startswith((f"{base}/r/", f"{FORBIDDEN_PREFIX}/{base}/r/")):
            replies.by_index.setdefault(int(topic.rsplit("/", 1)[1]), []).append(message)
            replies.count += 1
            return
        replies.stray.append(message)

    async with AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=10) as client:
        # data the flood must not touch: its keys are not in the flood's key pool
        guards = {f"fuzzguard-{run}-{j}".encode(): rng.randbytes(j * 7) for j in range(16)}
        for key, value in guards.items():
            await client.set(key, value)
        before: dict[bytes, Entry | None] = {key: await client.get(key) for key in guards}

        flooder = PahoConnection(
            ConnectionSettings(host=mosquitto.host, port=mosquitto.port, client_id=f"fuzzflood-{run}"), on_message
        )
        await flooder.connect()
        try:
            await flooder.subscribe([f"{base}/#", f"{FORBIDDEN_PREFIX}/{base}/#"], qos=1)
            flood = Flood(rng, run, f"fuzzflood-{run}")
            sent: list[Request] = []
            started = time.monotonic()
            for b, indices in enumerate(batches(N_REQUESTS, BATCH)):
                for i in indices:
                    req = flood.make()
                    sent.append(req)
                    topic = f"{base}/r/{i}"
                    rt = req.response_topic if req.category == "rtopic" else topic
                    if rt == "{forbidden}":
                        rt = f"{FORBIDDEN_PREFIX}/{base}/r/{i}"
                    elif rt == "{wildcard}":
                        rt = f"{base}/r/+/{i}"
                    flooder.publish_nowait(
                        OutgoingMessage(
                            req.topic,
                            req.payload,
                            qos=req.qos,
                            correlation_data=req.corr,
                            response_topic=rt,
                            user_properties=req.props,
                            content_type=req.content_type,
                            message_expiry=10,
                        )
                    )
                replies.sentinels[b] = asyncio.Event()
                flooder.publish_nowait(
                    OutgoingMessage(
                        REQUEST_TOPIC,
                        resp3.encode_request(b"GET", flood.pool[0]),
                        correlation_data=uuid.uuid4().bytes,
                        response_topic=f"{base}/s/{b}",
                        user_properties=flood.good_props(),
                        content_type=headers.CONTENT_TYPE,
                    )
                )
                await wait_for_sentinel(replies, b)
            flood_seconds = time.monotonic() - started
            assert flooder.connected, "the broker dropped the flooding connection (a request it refused)"
        finally:
            await flooder.close()

        # -- every reply accounted for ------------------------------------------------------------------
        kinds: Counter[str] = Counter()
        by_category: Counter[str] = Counter()
        problems: list[str] = []
        for i, req in enumerate(sent):
            got = replies.by_index.get(i, [])
            by_category[f"{req.category}:{'reply' if got else 'none'}"] += 1
            if not req.expect_reply:
                kinds["no reply (ignored)"] += 1
                if got:
                    problems.append(f"#{i} {req.category}: answered although it must be ignored: {got[0]!r:.300}")
                continue
            if len(got) != 1:
                problems.append(f"#{i} {req.category}: {len(got)} replies to {req.payload!r:.120} {req.props!r:.200}")
                continue
            message = got[0]
            if message.correlation_data != req.corr:
                problems.append(f"#{i} {req.category}: correlation data not echoed: {message.correlation_data!r:.80}")
            try:
                kinds[reply_kind(message)] += 1
            except Exception as exc:
                problems.append(f"#{i} {req.category}: bad reply {message!r:.300}: {exc!r}")
        print(
            f"\nflood seed {SEED}: {len(sent)} requests in {flood_seconds:.1f} s, {replies.count} replies; "
            f"reply kinds: {dict(kinds.most_common())}\nby category: {dict(sorted(by_category.items()))}"
        )
        assert not problems, f"flood seed {SEED}: {len(problems)} problems, e.g.\n" + "\n".join(problems[:20])
        assert not replies.stray, f"messages on unexpected topics: {replies.stray[:5]!r:.1000}"
        assert sum(kinds.values()) == len(sent) == N_REQUESTS

        # -- still serving, data intact ----------------------------------------------------------------
        assert emulator.running, f"the emulator process died:\n{emulator.output[-3000:]}"
        after = {key: await client.get(key) for key in guards}
        assert after == before, "the flood changed data outside its own keys"
        probe = f"fuzzprobe-{run}".encode()
        async with client.watch(probe) as watch:
            assert await client.set(probe, b"after the flood")
            event = await watch.next(timeout=10)
            assert event.key == probe and event.value == b"after the flood"
        entry = await client.get(probe)
        assert entry is not None and entry.value == b"after the flood"
        # clean up; the flood may have fenced its keys with tokens from the past
        token = HybridLogicalClock(time.time_ns() // 1_000_000, 0, "fuzzflood-cleanup")
        for key in [probe, *guards, *flood.pool, *flood.fenced_pool]:
            await client.delete(key, fencing_token=token)
        log = emulator.output[output_before:]
        assert "Traceback" not in log, f"the emulator logged an exception during the flood:\n{log[-5000:]}"
