"""The client against a randomized misbehaving responder: typed errors, never a wrong value.

A fake "service" subscribes to the state store request topic and, per request, picks a behaviour at random
(seeded): the right reply; garbage or a reply of the wrong shape; replies with wrong correlation data
(random, truncated, bit-flipped, empty, absent, or that of an earlier request), alone or before the right
one; the right reply twice, the second with another value; the right reply only after the call has ended
(late) or after the next request (reordered); a foreign ``__protVer``; a missing, malformed or non-200
``__stat``; a malformed or far-future ``__ts``; a foreign content type; a ``-ERR`` reply; or nothing at all.
For each request it records what the outcome must be.

Each call of GET/SET/DEL/VDEL (a unique key per call, so outcomes are matched to requests) must then:

* return exactly the value the responder meant for *that* request (value, version, applied flag...), or
* raise a :class:`StateStoreError` subclass, of the expected type where the behaviour fixes it (silence and
  late replies: :class:`RequestTimeoutError`, never ``None``; garbage: :class:`ProtocolError`; ...);
* never return a value where none was meant, and never raise a bare ``IndexError``/``ValueError``/...

A timeout is tolerated where a value was meant (a loaded machine may be slow), but counted: most such calls
must succeed, so the test cannot pass by timing out everything.

Mostly on the in-process loopback broker (fast, many rounds); then fewer rounds over a real mosquitto of the
module's own (no emulator on it), with the async client and briefly the blocking one. Calls run in
concurrent batches so that the short per-call timeouts overlap; nothing sleeps to synchronise: late replies
are released when a batch has ended. ``SSKV_RESPONDER_SEED`` replays a seed (printed on failure).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.commands import Delete, Get, Set, VDelete, parse_command
from sskv_mapping._protocol.error_texts import ERROR_TEXTS
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.topics import REQUEST_TOPIC
from sskv_mapping._transport.base import InboundMessage, OutgoingMessage
from sskv_mapping._transport.loopback import LoopbackBroker
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, Entry, SetResult, StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import (
    ProtocolError,
    RequestTimeoutError,
    RpcStatusError,
    ServiceError,
    StateStoreError,
    UnsupportedVersionError,
)

from ._corpus import MUST_FAIL, REPLY_SEEDS, Reject, expected_decode, ref_reply

SEED = int(os.environ.get("SSKV_RESPONDER_SEED", str(random.SystemRandom().randrange(2**32))))
OK_PROPS = [("__stat", "200"), ("__protVer", "1.0")]
CONTENT_TYPE = "application/octet-stream"

Cmd = Get | Set | Delete | VDelete
Send = Callable[[str, bytes, bytes | None, list[tuple[str, str]], str | None], None]


@dataclass(frozen=True)
class Expect:
    """What a call must end with. ``kind``: ``value`` (exactly ``value``), ``raise`` (an ``exc`` whose text or
    status matches when given), ``timeout`` (RequestTimeoutError only), ``either`` (``value`` or a timeout)."""

    behaviour: str
    kind: str
    value: object = None
    exc: type[StateStoreError] = StateStoreError
    text: str | None = None
    status: int | None = None


def client_value(cmd: Cmd, decoded: object, version: HybridLogicalClock | None) -> object:
    """The client API's return value for a decoded reply (``Entry``/``None``, ``SetResult``, bool, VDeleteResult)."""
    if isinstance(cmd, Get):
        return None if decoded is None else Entry(decoded, version)  # type: ignore[arg-type]
    if isinstance(cmd, Set):
        return SetResult(bool(decoded), version)
    return decoded


def outcome_of(behaviour: str, cmd: Cmd, payload: bytes, version: HybridLogicalClock | None) -> Expect:
    """The outcome a 200 reply with this payload must give, by the reference parser (independent of commands.py)."""
    try:
        reply = ref_reply(payload)
    except Reject:
        return Expect(behaviour, "raise", exc=ProtocolError)
    if isinstance(reply, resp3.ErrorReply):
        return Expect(behaviour, "raise", exc=ERROR_TEXTS.get(reply.text, ServiceError), text=reply.text)
    decoded = expected_decode(cmd, reply)
    if decoded is MUST_FAIL:
        return Expect(behaviour, "raise", exc=ProtocolError)
    return Expect(behaviour, "value", client_value(cmd, decoded, version))


BEHAVIOURS = {
    "correct": 14,
    "garbage": 8,
    "wrong_corr": 6,
    "wrong_corr_then_correct": 5,
    "duplicate": 6,
    "late": 4,
    "reordered": 4,
    "protver": 5,
    "stat": 6,
    "ts": 4,
    "content_type": 2,
    "error_reply": 4,
    "silent": 5,
}


class Responder:
    """The misbehaving service. ``send`` publishes one reply; ``on_request`` is the transport callback."""

    def __init__(self, rng: random.Random, send: Send) -> None:
        self.rng = rng
        self.send = send
        self.expect: dict[bytes, Expect] = {}
        self.behaviours: Counter[str] = Counter()
        self._late: list[tuple[str, bytes, bytes | None, list[tuple[str, str]], str | None]] = []
        self._reordered: list[tuple[str, bytes, bytes | None, list[tuple[str, str]], str | None]] = []
        self._batch_corrs: list[bytes] = []  # requests of the running batch (their calls may still wait)
        self._old_corrs: list[bytes] = []  # requests whose calls have ended
        self.errors: list[str] = []  # the responder's own failures (it runs in a transport callback)
        self._lock = threading.Lock()  # the blocking client's responder runs on another thread

    def release_late(self) -> None:
        """Publish the replies held back until their calls ended (call between batches)."""
        with self._lock:
            held, self._late = self._late + self._reordered, []
            self._reordered = []
            self._old_corrs = (self._old_corrs + self._batch_corrs)[-50:]
            self._batch_corrs = []
        for reply in held:
            self.send(*reply)

    # -- the reply meant for a request --------------------------------------------------------------

    def _version(self) -> HybridLogicalClock | None:
        if self.rng.random() < 0.3:
            return None
        now = time.time_ns() // 1_000_000
        return HybridLogicalClock(now - self.rng.randrange(0, 10**6), self.rng.randrange(0, 10), "StateStore")

    def _meant(self, cmd: Cmd) -> tuple[bytes, HybridLogicalClock | None]:
        rng = self.rng
        version = self._version()
        if isinstance(cmd, Get):
            value = None if rng.random() < 0.25 else rng.randbytes(rng.randrange(0, 40))
            return resp3.encode_bulk(value), (None if value is None else version)
        if isinstance(cmd, Set):
            return rng.choice([b"+OK\r\n", b":-1\r\n", b"-1\r\n"]), version
        if isinstance(cmd, Delete):
            return rng.choice([b":1\r\n", b":0\r\n"]), None
        return rng.choice([b":1\r\n", b":0\r\n", b":-1\r\n"]), None

    def _other_value(self, cmd: Cmd, payload: bytes) -> bytes:
        """A well-formed reply for ``cmd`` that differs from ``payload`` (a wrong value if it were taken)."""
        while True:
            other, _ = self._meant(cmd)
            if isinstance(cmd, Get):
                other = resp3.encode_bulk(b"WRONG-" + self.rng.randbytes(4))
            elif isinstance(cmd, Set):  # ":-1" and the legacy "-1" mean the same: differ in meaning
                other = b":-1\r\n" if payload == b"+OK\r\n" else b"+OK\r\n"
            if other != payload:
                return other

    def _garbage(self, payload: bytes) -> bytes:
        rng = self.rng
        how = rng.randrange(5)
        if how == 0:
            return rng.randbytes(rng.randrange(0, 30))
        if how == 1:
            return payload[: rng.randrange(len(payload))] if payload else b"\r"
        if how == 2:
            buf = bytearray(payload)
            buf[rng.randrange(len(buf))] = rng.randrange(256)
            return bytes(buf)
        if how == 3:
            return payload + rng.choice([b"\r\n", b"x", payload])
        return rng.choice(REPLY_SEEDS)  # often a fine reply of the wrong shape

    def _wrong_corr(self, corr: bytes | None) -> bytes | None:
        rng = self.rng
        how = rng.randrange(6)
        if how == 0 or corr is None:
            return uuid.uuid4().bytes
        if how == 1:
            return corr[: rng.randrange(len(corr))]
        if how == 2:
            flipped = bytearray(corr)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            return bytes(flipped)
        if how == 3:
            return None
        if how == 4 and self._old_corrs:
            return rng.choice(self._old_corrs)  # a request that has already been answered and ended
        return corr + b"\x00"

    # -- one request --------------------------------------------------------------------------------

    def on_request(self, message: InboundMessage) -> None:
        try:
            self._on_request(message)
        except Exception as exc:
            self.errors.append(repr(exc))

    def _on_request(self, message: InboundMessage) -> None:
        rng = self.rng
        cmd = parse_command(message.payload)
        assert isinstance(cmd, Get | Set | Delete | VDelete), cmd
        corr, topic = message.correlation_data, message.response_topic
        assert topic is not None and corr is not None and len(corr) == 16
        behaviour = rng.choices(list(BEHAVIOURS), weights=list(BEHAVIOURS.values()))[0]
        self.behaviours[behaviour] += 1
        payload, version = self._meant(cmd)
        props = [*OK_PROPS, *([("__ts", str(version))] if version is not None else [])]
        right = (topic, payload, corr, props, CONTENT_TYPE)
        expect = outcome_of(behaviour, cmd, payload, version)
        out: list[tuple[str, bytes, bytes | None, list[tuple[str, str]], str | None]] = []

        def wrong() -> tuple[str, bytes, bytes | None, list[tuple[str, str]], str | None]:
            return (topic, self._other_value(cmd, payload), self._wrong_corr(corr), OK_PROPS, CONTENT_TYPE)

        if behaviour == "correct":
            out.append(right)
        elif behaviour == "garbage":
            junk = self._garbage(payload)
            expect = outcome_of(behaviour, cmd, junk, None)
            out.append((topic, junk, corr, OK_PROPS, CONTENT_TYPE))
        elif behaviour == "wrong_corr":
            out += [wrong() for _ in range(rng.randrange(1, 3))]
            expect = Expect(behaviour, "timeout")
        elif behaviour == "wrong_corr_then_correct":
            out += [wrong(), right]
        elif behaviour == "duplicate":
            out += [right, (topic, self._other_value(cmd, payload), corr, OK_PROPS, CONTENT_TYPE)]
        elif behaviour == "late":
            with self._lock:
                self._late.append(right)
            expect = Expect(behaviour, "timeout")
        elif behaviour == "reordered":
            with self._lock:
                held, self._reordered = self._reordered, [right]
            out += held  # the previous reordered reply goes out after this request arrived
            if expect.kind == "value":  # held until the next request: maybe until the batch (and the call) ended
                expect = Expect(behaviour, "either", expect.value)
        elif behaviour == "protver":
            bad = rng.choice(["2.0", "0.9", "10.1", "abc", "", "1x", "99999999999.0", "1.9", "1"])
            out.append((topic, payload, corr, [("__stat", "200"), ("__protVer", bad)], CONTENT_TYPE))
            if bad in ("1.9", "1"):  # major 1: only the part before the first dot counts
                expect = outcome_of(behaviour, cmd, payload, None)
            elif bad.split(".")[0].isdigit() and len(bad.split(".")[0]) <= 9:
                expect = Expect(behaviour, "raise", exc=UnsupportedVersionError)
            else:
                expect = Expect(behaviour, "raise", exc=ProtocolError)
        elif behaviour == "stat":
            stat = rng.choice([None, "", "abc", "2000", "-1", "٢٠٠", "400", "408", "500", "503", "505", "204"])
            stat_props = [("__protVer", "1.0"), *([("__stat", stat)] if stat is not None else [])]
            if stat in ("400", "408", "500", "503"):
                stat_props.append(("__stMsg", "busy"))
            out.append((topic, payload, corr, stat_props, CONTENT_TYPE))
            if stat == "204":
                expect = outcome_of(behaviour, cmd, payload, None)
            elif stat == "505":
                expect = Expect(behaviour, "raise", exc=UnsupportedVersionError)
            elif stat in ("400", "408", "500", "503"):
                expect = Expect(behaviour, "raise", exc=RpcStatusError, text="busy", status=int(stat))
            else:
                expect = Expect(behaviour, "raise", exc=ProtocolError)
        elif behaviour == "ts":
            now = time.time_ns() // 1_000_000
            bad_ts = rng.choice(["garbage", "1:2", "", "-1:0:x", f"{now + 600_000}:0:StateStore", f"{2**64}:0:x"])
            out.append((topic, payload, corr, [*OK_PROPS, ("__ts", bad_ts)], CONTENT_TYPE))
            if bad_ts.endswith(":0:StateStore"):
                # 10 min ahead of our clock: too far to merge, but the service carried the request out, so the
                # client returns its result (and counts the drift) rather than report it as failed
                expect = outcome_of(behaviour, cmd, payload, HybridLogicalClock.parse(bad_ts))
            else:
                expect = Expect(behaviour, "raise", exc=ProtocolError)
        elif behaviour == "content_type":
            out.append((topic, payload, corr, OK_PROPS, rng.choice(["text/plain", "application/json", ""])))
            expect = Expect(behaviour, "raise", exc=ProtocolError)
        elif behaviour == "error_reply":
            text = rng.choice([*ERROR_TEXTS, "something new", "", "ERR nested"])
            junk = resp3.encode_error(text)
            expect = outcome_of(behaviour, cmd, junk, None)
            out.append((topic, junk, corr, OK_PROPS, CONTENT_TYPE))
        else:  # silent
            expect = Expect(behaviour, "timeout")
        with self._lock:
            self.expect[cmd.key] = expect
            self._batch_corrs.append(corr)
        for reply in out:
            self.send(*reply)


# ---------------------------------------------------------------------------------------------------------
# the driver


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    meant_value: int = 0
    got_value: int = 0
    problems: list[str] = field(default_factory=list)

    def check(self, key: bytes, expect: Expect | None, result: object) -> None:
        """Judge one call's ``result`` (a value, or the exception it raised) against ``expect``."""
        if expect is None:
            self.problems.append(
                f"{key!r}: the responder never saw this request, yet the call ended with {result!r:.200}"
            )
            return
        where = f"{key!r} ({expect.behaviour})"
        if expect.kind in ("value", "either"):
            self.meant_value += 1
        if isinstance(result, BaseException):
            name = type(result).__name__
            self.outcomes[f"{expect.behaviour}->{name}"] += 1
            if not isinstance(result, StateStoreError) or isinstance(result, LookupError):
                self.problems.append(f"{where}: untyped exception {result!r}")
            elif isinstance(result, RequestTimeoutError):
                if expect.kind == "raise" and expect.behaviour != "reordered":
                    self.outcomes["timeout where an error was meant"] += 1
            elif expect.kind in ("timeout", "either", "value"):
                self.problems.append(f"{where}: raised {result!r}, expected {expect.kind} {expect.value!r:.100}")
            elif not isinstance(result, expect.exc) or (expect.text is not None and type(result) is not expect.exc):
                self.problems.append(f"{where}: raised {result!r}, expected {expect.exc.__name__}")
            elif expect.text is not None and getattr(result, "text", None) != expect.text:
                self.problems.append(f"{where}: error text {getattr(result, 'text', None)!r}, expected {expect.text!r}")
            elif expect.status is not None and getattr(result, "status", None) != expect.status:
                self.problems.append(f"{where}: status {getattr(result, 'status', None)!r}, expected {expect.status}")
            return
        self.outcomes[f"{expect.behaviour}->value"] += 1
        if expect.kind not in ("value", "either"):
            self.problems.append(
                f"{where}: returned {result!r:.200} where the outcome must be {expect.kind} {expect.exc.__name__}"
            )
        elif type(result) is not type(expect.value) or result != expect.value:
            self.problems.append(f"{where}: returned {result!r:.200}, the responder meant {expect.value!r:.200}")
        else:
            self.got_value += 1

    def verdict(self, label: str, seed: int, responder: Responder) -> None:
        assert not responder.errors, f"{label}, seed {seed}: the fake responder failed: {responder.errors[:5]}"
        print(f"\n{label} (seed {seed}): {dict(sorted(self.outcomes.items()))}")
        assert not self.problems, f"{label}, seed {seed}: {len(self.problems)} problems:\n" + "\n".join(
            self.problems[:25]
        )
        # not vacuous: most calls that were meant to get a value got it (a timeout is tolerated, not the rule)
        assert self.got_value * 2 > self.meant_value, f"{label}: only {self.got_value}/{self.meant_value} values"


def make_call(rng: random.Random, key: bytes) -> tuple[str, tuple[Any, ...]]:
    verb = rng.choice(["get", "set", "delete", "vdelete"])
    if verb in ("set", "vdelete"):
        return verb, (key, rng.randbytes(rng.randrange(0, 20)))
    return verb, (key,)


def rounds(n: int, batch: int) -> Iterator[range]:
    for start in range(0, n, batch):
        yield range(start, min(start + batch, n))


async def drive_async(
    client: AsyncStateStoreClient,
    responder: Responder,
    rng: random.Random,
    *,
    n: int,
    batch: int,
    timeout: float,
    release: Callable[[], Awaitable[None]],
) -> Tally:
    tally = Tally()
    prefix = uuid.uuid4().hex[:8]
    for block in rounds(n, batch):
        calls = [(f"{prefix}-{i}".encode(), *make_call(rng, f"{prefix}-{i}".encode())) for i in block]
        results = await asyncio.gather(
            *(getattr(client, verb)(*args, timeout=timeout) for _key, verb, args in calls), return_exceptions=True
        )
        await release()  # late replies go out now, while the next batch is about to start
        for (key, _verb, _args), result in zip(calls, results, strict=True):
            tally.check(key, responder.expect.get(key), result)
    assert len(client._sender.pending) == 0, "pending calls left behind"
    return tally


# ---------------------------------------------------------------------------------------------------------
# loopback: many rounds


async def test_misbehaving_responder_on_loopback() -> None:
    rng = random.Random(SEED)
    broker = LoopbackBroker()
    tasks: set[asyncio.Task[None]] = set()

    def send(topic: str, payload: bytes, corr: bytes | None, props: list[tuple[str, str]], ctype: str | None) -> None:
        task = asyncio.get_running_loop().create_task(
            service.publish(
                OutgoingMessage(topic, payload, correlation_data=corr, user_properties=props, content_type=ctype)
            )
        )
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    responder = Responder(rng, send)
    service = broker.connection(ConnectionSettings(host="loopback", port=1, client_id="fake"), responder.on_request)
    await service.connect()
    await service.subscribe([REQUEST_TOPIC])

    async def release() -> None:
        responder.release_late()

    async with AsyncStateStoreClient(connection_factory=broker.connection, timeout=5) as client:
        tally = await drive_async(client, responder, rng, n=1500, batch=150, timeout=0.3, release=release)
        # the stray replies of the last batch land on nothing, and the client still works
        await asyncio.gather(*tasks)
        assert client._sender.pending.unmatched > 0
    await service.close()
    tally.verdict("loopback", SEED, responder)
    assert set(responder.behaviours) == set(BEHAVIOURS), responder.behaviours


# ---------------------------------------------------------------------------------------------------------
# real mosquitto: fewer rounds, async and blocking clients


@pytest.fixture(scope="module")
def own_broker() -> Iterator[MosquittoBroker]:
    """A mosquitto without an emulator: only the fake responder answers there."""
    with MosquittoBroker() as broker:
        yield broker


class ThreadedResponder:
    """The responder on an PahoConnection served by its own event-loop thread (the blocking client blocks ours)."""

    def __init__(self, broker: MosquittoBroker, rng: random.Random) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-service", daemon=True)
        self.conn = PahoConnection(
            ConnectionSettings(host=broker.host, port=broker.port, client_id=f"fake-{uuid.uuid4().hex[:8]}"),
            self._on_message,
        )
        self.responder = Responder(rng, self._send)

    def _on_message(self, message: InboundMessage) -> None:
        self.responder.on_request(message)

    def _send(
        self, topic: str, payload: bytes, corr: bytes | None, props: list[tuple[str, str]], ctype: str | None
    ) -> None:
        self.conn.publish_nowait(
            OutgoingMessage(topic, payload, correlation_data=corr, user_properties=props, content_type=ctype)
        )

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def __enter__(self) -> ThreadedResponder:
        self.thread.start()
        self.call(self.conn.connect)
        self.call(lambda: self.conn.subscribe([REQUEST_TOPIC]))
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.conn.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.mark.broker
async def test_misbehaving_responder_over_mosquitto_async_client(own_broker: MosquittoBroker) -> None:
    seed = SEED + 1
    with ThreadedResponder(own_broker, random.Random(seed)) as fake:

        async def release() -> None:
            await asyncio.to_thread(fake.call, fake.responder.release_late)

        async with AsyncStateStoreClient(own_broker.host, own_broker.port, timeout=5) as client:
            tally = await drive_async(
                client, fake.responder, random.Random(seed), n=240, batch=80, timeout=1.0, release=release
            )
    tally.verdict("mosquitto, async client", seed, fake.responder)


@pytest.mark.broker
def test_misbehaving_responder_over_mosquitto_blocking_client(own_broker: MosquittoBroker) -> None:
    seed = SEED + 2
    rng = random.Random(seed)
    tally = Tally()
    with (
        ThreadedResponder(own_broker, random.Random(seed)) as fake,
        StateStoreClient(own_broker.host, own_broker.port, timeout=5) as client,
    ):
        prefix = uuid.uuid4().hex[:8]
        for i in range(24):
            key = f"{prefix}-{i}".encode()
            verb, args = make_call(rng, key)
            result: object
            try:
                result = getattr(client, verb)(*args, timeout=0.3)
            except Exception as exc:  # judged by the tally: only StateStoreError subclasses pass
                result = exc
            fake.call(fake.responder.release_late)
            tally.check(key, fake.responder.expect.get(key), result)
    tally.verdict("mosquitto, blocking client", seed, fake.responder)
