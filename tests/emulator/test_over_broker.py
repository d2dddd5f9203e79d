"""The emulator as a real process on a real mosquitto, spoken to with raw MQTT (tests/_support/miniclient).

Most tests share the session broker + emulator and use unique keys. Tests that stop, restart or add an
emulator use a broker of their own. Nothing sleeps to synchronise: every wait is for a message or an
event, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from sskv_mapping import errors
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping._protocol.topics import REQUEST_TOPIC, SERVICE_ID
from sskv_mapping._transport.base import InboundMessage
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.emulator.broker import EMULATOR_QUEUE_SETTINGS, MosquittoBroker, free_port
from sskv_mapping.emulator.core import CoreResult, EmulatorCore
from sskv_mapping.emulator.server import EmulatorServer, client_id_from_response_topic
from sskv_mapping.errors import TransportError
from tests._support.miniclient import MiniClient, Response
from tests._support.procs import EmulatorProcess, repo_env, start_emulator

from .conftest import Connect

SET_NOTE = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n"
DELETE_NOTE = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"
OK = b"+OK\r\n"
REPO_ROOT = Path(__file__).resolve().parents[2]


def set_note(value: bytes) -> bytes:
    return SET_NOTE + b"$%d\r\n%s\r\n" % (len(value), value)


def err(cls: type[errors.ServiceError]) -> bytes:
    return b"-ERR " + cls.TEXT.encode() + b"\r\n"


def key(prefix: str = "k") -> bytes:
    return f"{prefix}-{uuid.uuid4().hex[:12]}".encode()


def assert_response_headers(r: Response) -> None:
    assert r.props["__stat"] == "200"
    assert r.props["__protVer"] == "1.0"
    assert r.content_type == "application/octet-stream"


@pytest.fixture
async def c(connect: Connect) -> MiniClient:
    return await connect()


# -- §2: every response row, with its headers ---------------------------------------------------------


async def test_set_get_and_their_versions(c: MiniClient) -> None:
    k = key()
    r = await c.request(b"SET", k, b"value")
    assert r.payload == OK
    assert_response_headers(r)
    assert r.ts is not None and r.ts.node_id == "StateStore"
    g = await c.request(b"GET", k)
    assert g.payload == b"$5\r\nvalue\r\n" and g.ts == r.ts
    assert_response_headers(g)


async def test_set_version_is_newer_than_the_request_timestamp(c: MiniClient) -> None:
    sent = HybridLogicalClock(c.hlc.now_ms() + 30_000, 7, c.client_id)
    props = [("__ts", str(sent)), ("__srcId", c.client_id), ("__protVer", "1.0")]
    r = await c.request(b"SET", key(), b"v", props=props)
    assert r.payload == OK and r.ts is not None and r.ts > sent


async def test_get_miss_has_no_ts(c: MiniClient) -> None:
    r = await c.request(b"GET", key())
    assert r.payload == b"$-1\r\n" and "__ts" not in r.props
    assert_response_headers(r)


async def test_empty_value(c: MiniClient) -> None:
    k = key()
    assert (await c.request(b"SET", k, b"")).payload == OK
    assert (await c.request(b"GET", k)).payload == b"$0\r\n\r\n"


async def test_nx_and_nex(c: MiniClient) -> None:
    k = key()
    first = await c.request(b"SET", k, b"a", b"NX")
    assert first.payload == OK
    skipped = await c.request(b"SET", k, b"b", b"NX")
    assert skipped.payload == b":-1\r\n" and skipped.ts == first.ts
    renewed = await c.request(b"SET", k, b"a", b"NEX", b"PX", b"60000")
    assert renewed.payload == OK and renewed.ts is not None and first.ts is not None and renewed.ts > first.ts
    other = await c.request(b"SET", k, b"b", b"NEX")
    assert other.payload == b":-1\r\n" and other.ts == renewed.ts


async def test_del_and_vdel_rows(c: MiniClient) -> None:
    k = key()
    await c.request(b"SET", k, b"v")
    assert (await c.request(b"VDEL", k, b"x")).payload == b":-1\r\n"
    assert (await c.request(b"VDEL", k, b"v")).payload == b":1\r\n"
    assert (await c.request(b"VDEL", k, b"v")).payload == b":0\r\n"
    await c.request(b"SET", k, b"v")
    assert (await c.request(b"DEL", k)).payload == b":1\r\n"
    r = await c.request(b"DEL", k)
    assert r.payload == b":0\r\n"
    assert_response_headers(r)


async def test_keynotify_and_stop_rows(c: MiniClient) -> None:
    k = key()
    assert (await c.request(b"KEYNOTIFY", k)).payload == OK  # the key does not exist: still OK
    assert (await c.request(b"KEYNOTIFY", k, b"STOP")).payload == OK
    assert (await c.request(b"KEYNOTIFY", k, b"STOP")).payload == b":0\r\n"


# -- §3: error texts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"not resp at all", errors.RequestSyntaxError),
        (b"\x00\xff\r\n", errors.RequestSyntaxError),
        (b"", errors.RequestSyntaxError),
        (b"*2\r\n$3\r\nGET\r\n$9\r\nshort\r\n", errors.RequestSyntaxError),
        (encode_request(b"SET", b"k", b"v", b"PX", b"x"), errors.RequestSyntaxError),
        (encode_request(b"NOPE", b"k"), errors.UnknownCommandError),
        (encode_request(b"GET", b"a", b"b"), errors.WrongNumberOfArgumentsError),
        (encode_request(b"GET", b""), errors.KeyLengthZeroError),
    ],
)
async def test_bad_payloads_get_the_service_error_text(
    c: MiniClient, payload: bytes, expected: type[errors.ServiceError]
) -> None:
    r = await c.raw(payload)
    assert r.payload == err(expected)
    assert_response_headers(r)
    assert "__ts" not in r.props


async def test_timestamp_errors(c: MiniClient) -> None:
    k = key()
    no_ts = [("__srcId", c.client_id), ("__protVer", "1.0")]
    assert (await c.request(b"SET", k, b"v", props=no_ts)).payload == err(errors.MissingTimestampError)
    bad = [*no_ts, ("__ts", "yesterday")]
    assert (await c.request(b"SET", k, b"v", props=bad)).payload == err(errors.MalformedTimestampError)
    ahead = [*no_ts, ("__ts", str(HybridLogicalClock(c.hlc.now_ms() + 120_000, 0, c.client_id)))]
    assert (await c.request(b"SET", k, b"v", props=ahead)).payload == err(errors.TimestampSkewError)
    assert (await c.request(b"GET", k, props=no_ts)).payload == b"$-1\r\n"  # nothing was stored


async def test_fencing_over_the_wire(c: MiniClient) -> None:
    lock, data = key("lock"), key("data")
    got = await c.request(b"SET", lock, b"me", b"NEX", b"PX", b"60000")
    assert got.payload == OK and got.ts is not None
    token = got.ts  # the response __ts is the fencing token
    assert (await c.request(b"SET", data, b"v1", extra=[("__ft", str(token))])).payload == OK
    assert (await c.request(b"SET", data, b"v2")).payload == err(errors.FencingTokenRequiredError)
    assert (await c.request(b"DEL", data)).payload == err(errors.FencingTokenRequiredError)
    assert (await c.request(b"VDEL", data, b"v1")).payload == err(errors.FencingTokenRequiredError)
    older = HybridLogicalClock(token.wall_ms - 1, 0, "StateStore")
    assert (await c.request(b"SET", data, b"v2", extra=[("__ft", str(older))])).payload == err(
        errors.FencingTokenLowerVersionError
    )
    future = HybridLogicalClock(c.hlc.now_ms() + 120_000, 0, "StateStore")
    assert (await c.request(b"SET", data, b"v2", extra=[("__ft", str(future))])).payload == err(
        errors.FencingTokenSkewError
    )
    assert (await c.request(b"SET", data, b"v2", extra=[("__ft", "??")])).payload == err(errors.MalformedTimestampError)
    assert (await c.request(b"GET", data)).payload == b"$2\r\nv1\r\n"  # GET needs no token
    assert (await c.request(b"DEL", data, extra=[("__ft", str(token))])).payload == b":1\r\n"
    assert (await c.request(b"SET", data, b"free")).payload == OK  # the token went with the key
    assert (await c.request(b"VDEL", lock, b"me")).payload == b":1\r\n"


# -- §4: notifications -------------------------------------------------------------------------------------


async def test_own_writes_are_notified_with_the_version_of_the_change(c: MiniClient) -> None:
    k = key()
    await c.request(b"KEYNOTIFY", k)
    s = await c.request(b"SET", k, b"v\r\n1")
    n = await c.note(k)
    assert (n.client_id, n.key, n.payload, n.ts) == (c.client_id, k, set_note(b"v\r\n1"), s.ts)
    d = await c.request(b"DEL", k)
    n = await c.note(k)
    assert n.payload == DELETE_NOTE and n.ts == d.ts


async def test_other_clients_writes_reach_every_watcher(connect: Connect) -> None:
    a, b, writer = await connect(), await connect(), await connect()
    k = key()
    await a.request(b"KEYNOTIFY", k)
    await b.request(b"KEYNOTIFY", k)
    await writer.request(b"SET", k, b"x")
    await writer.request(b"VDEL", k, b"x")
    for watcher in (a, b):
        assert (await watcher.note(k)).payload == set_note(b"x")
        assert (await watcher.note(k)).payload == DELETE_NOTE
    assert writer.all_notes == []


async def test_expiry_sends_delete_without_anyone_touching_the_key(c: MiniClient) -> None:
    k = key()
    await c.request(b"KEYNOTIFY", k)
    t0 = time.monotonic()
    s = await c.request(b"SET", k, b"short-lived", b"PX", b"200")
    assert (await c.note(k)).payload == set_note(b"short-lived")
    expired = await c.note(k, timeout=5)
    elapsed = time.monotonic() - t0
    assert expired.payload == DELETE_NOTE
    assert s.ts is not None and expired.ts > s.ts
    assert elapsed >= 0.19  # not before its time
    assert (await c.request(b"GET", k)).payload == b"$-1\r\n"


async def test_expiry_drops_the_fencing_token(c: MiniClient) -> None:
    k = key()
    await c.request(b"KEYNOTIFY", k)
    ft = str(HybridLogicalClock(c.hlc.now_ms(), 0, "holder"))
    await c.request(b"SET", k, b"v", b"PX", b"150", extra=[("__ft", ft)])
    await c.note(k)
    assert (await c.note(k)).payload == DELETE_NOTE
    assert (await c.request(b"SET", k, b"unfenced")).payload == OK


async def test_stop_ends_notifications(c: MiniClient, connect: Connect) -> None:
    writer = await connect()
    stopped, sentinel = key("stopped"), key("sentinel")
    await c.request(b"KEYNOTIFY", stopped)
    await c.request(b"KEYNOTIFY", stopped, b"STOP")
    await c.request(b"KEYNOTIFY", sentinel)
    await writer.request(b"SET", stopped, b"x")
    await writer.request(b"SET", sentinel, b"y")
    assert (await c.note(sentinel)).payload == set_note(b"y")
    # one publisher (the emulator) to one subscriber keeps its order: had `stopped` been notified, that
    # notification would have arrived before the sentinel's
    assert c.pending_notes(stopped) == 0


async def test_registrations_are_dropped_when_the_client_disconnects(
    connect: Connect, mosquitto: MosquittoBroker
) -> None:
    writer = await connect()
    a = await connect()
    watched, sentinel = key("watched"), key("sentinel")
    await a.request(b"KEYNOTIFY", watched)
    await a.close()
    again = await connect(a.client_id)  # same id, does NOT register `watched` again
    await again.request(b"KEYNOTIFY", sentinel)
    await writer.request(b"SET", watched, b"changed while re-connected")
    await writer.request(b"SET", sentinel, b"s")
    assert (await again.note(sentinel)).payload == set_note(b"s")
    assert again.pending_notes(watched) == 0  # it would have arrived before the sentinel's


async def test_session_take_over_drops_registrations(connect: Connect) -> None:
    writer = await connect()
    a = await connect()
    watched, sentinel = key("watched"), key("sentinel")
    await a.request(b"KEYNOTIFY", watched)
    intruder = await connect(a.client_id)  # mosquitto closes a's connection: a disconnect for the service
    await intruder.request(b"KEYNOTIFY", sentinel)
    await writer.request(b"SET", watched, b"x")
    await writer.request(b"SET", sentinel, b"s")
    assert (await intruder.note(sentinel)).payload == set_note(b"s")
    assert intruder.pending_notes(watched) == 0


async def test_client_id_is_learned_from_the_response_topic_without_srcid(c: MiniClient) -> None:
    k = key()
    props = [("__ts", str(c.hlc.tick())), ("__protVer", "1.0")]  # no __srcId
    assert (await c.request(b"KEYNOTIFY", k, props=props)).payload == OK
    await c.request(b"SET", k, b"v")
    assert (await c.note(k)).client_id == c.client_id


# -- requests the service does not answer, and requests it answers specially -------------------------------


async def test_requests_without_response_topic_or_correlation_are_ignored(c: MiniClient) -> None:
    k1, k2 = key(), key()
    await c.send(encode_request(b"SET", k1, b"v"), response_topic=None)
    await c.send(encode_request(b"SET", k2, b"v"), correlation=None)
    # served in arrival order: by the time this GET is answered both were seen and ignored
    assert (await c.request(b"GET", k1)).payload == b"$-1\r\n"
    assert (await c.request(b"GET", k2)).payload == b"$-1\r\n"
    assert c.stray_responses == []


@pytest.mark.parametrize(
    "topic",
    [
        REQUEST_TOPIC,
        f"clients/statestore/v1/{SERVICE_ID}",
        f"clients/statestore/v1/{SERVICE_ID}/x/y",
        # with a wildcard no reply can be published there (MQTT 5 [MQTT-3.3.2-14]): a write applied without an
        # answer would be retried by its client, so it is not applied at all
        f"clients/+/services/statestore/v1/{SERVICE_ID}/command/invoke/response",  # a client id "+" (issue 37)
        "clients/a/#",
    ],
)
async def test_forbidden_response_topics_are_ignored(c: MiniClient, topic: str) -> None:
    k = key()
    await c.send(encode_request(b"SET", k, b"v"), response_topic=topic)
    assert (await c.request(b"GET", k)).payload == b"$-1\r\n"  # not executed, and still serving


async def test_protocol_version_2_gets_505(c: MiniClient) -> None:
    k = key()
    props = [("__ts", str(c.hlc.tick())), ("__srcId", c.client_id), ("__protVer", "2.0")]
    r = await c.request(b"SET", k, b"v", props=props)
    assert r.props["__stat"] == "505"
    assert r.props["__supProtMajVer"] == "1"
    assert "2.0" in r.props["__stMsg"]
    assert r.payload == b""
    assert (await c.request(b"GET", k)).payload == b"$-1\r\n"
    minor = [("__ts", str(c.hlc.tick())), ("__srcId", c.client_id), ("__protVer", "1.7")]
    assert (await c.request(b"SET", k, b"v", props=minor)).payload == OK  # any 1.x is served


async def test_garbage_in_between_does_not_stop_the_service(c: MiniClient) -> None:
    k = key()
    for junk in (b"\xff" * 1000, b"*99999999999\r\n", b"$-1\r\n", b"*1\r\n*1\r\n$1\r\nx\r\n"):
        assert (await c.raw(junk)).payload == err(errors.RequestSyntaxError)
    assert (await c.request(b"SET", k, b"still here")).payload == OK


# -- sizes, binary keys, concurrency ------------------------------------------------------------------------


async def test_large_key_and_value(c: MiniClient) -> None:
    k = uuid.uuid4().bytes + bytes(range(256)) * 25 + b"x" * 84  # 6,500 bytes
    v = b"\r\n\x00\xff" * 16_250  # 65,000 bytes
    assert len(k) == 6_500 and len(v) == 65_000
    await c.request(b"KEYNOTIFY", k)
    assert (await c.request(b"SET", k, v)).payload == OK
    assert (await c.request(b"GET", k)).payload == b"$65000\r\n" + v + b"\r\n"
    assert (await c.note(k)).payload == set_note(v)


async def test_a_megabyte_value(c: MiniClient) -> None:
    k = key()
    v = uuid.uuid4().bytes * 62_500  # 1,000,000 bytes
    assert (await c.request(b"SET", k, v)).payload == OK
    assert (await c.request(b"GET", k)).payload == b"$1000000\r\n" + v + b"\r\n"


@pytest.mark.parametrize("raw", [b"\r\n", b"a\x00b", b"\x00\r\n$1\r\n*2", "clé/+/#".encode()])
async def test_binary_keys(c: MiniClient, raw: bytes) -> None:
    k = uuid.uuid4().hex.encode() + raw
    await c.request(b"KEYNOTIFY", k)
    assert (await c.request(b"SET", k, raw)).payload == OK
    assert (await c.request(b"GET", k)).payload == b"$%d\r\n%s\r\n" % (len(raw), raw)
    n = await c.note(k)
    assert n.key == k and n.payload == set_note(raw)


async def test_many_concurrent_requests(connect: Connect) -> None:
    clients = [await connect() for _ in range(4)]
    prefix = key("many")
    n = 150

    async def one(i: int) -> tuple[Response, Response]:
        cl = clients[i % len(clients)]
        k = prefix + b"-%d" % i
        s = await cl.request(b"SET", k, b"value-%d" % i)
        return s, await cl.request(b"GET", k)

    results = await asyncio.gather(*(one(i) for i in range(n)))
    for i, (s, g) in enumerate(results):
        assert s.payload == OK
        assert g.payload == b"$%d\r\nvalue-%d\r\n" % (len(b"value-%d" % i), i)
        assert g.ts == s.ts
    versions = {s.ts for s, _ in results}
    assert len(versions) == n  # every write got its own version

    # one client, many in flight on one key: answered in arrival order, versions strictly increasing
    hot = prefix + b"-hot"
    corrs = [await clients[0].send(encode_request(b"SET", hot, b"%d" % i)) for i in range(100)]
    answers = [await clients[0].response(corr) for corr in corrs if corr is not None]
    stamps = [a.ts for a in answers]
    assert all(a.payload == OK for a in answers)
    assert all(x is not None and y is not None and x < y for x, y in itertools.pairwise(stamps))
    assert (await clients[0].request(b"GET", hot)).payload == b"$2\r\n99\r\n"


# -- the process: --help, SIGTERM, unreachable broker, reconnect, persistence ------------------------------


def test_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sskv_mapping.emulator", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 0
    for option in ("--host", "--port", "--client-id", "--max-keys", "--persist-file", "--log-level"):
        assert option in out.stdout
    assert REQUEST_TOPIC in out.stdout


def test_sigterm_stops_cleanly(fresh_mosquitto: MosquittoBroker) -> None:
    proc = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port)
    assert proc.stop() == 0  # SIGTERM, then the exit status
    assert f"serving state store on mqtt://127.0.0.1:{fresh_mosquitto.port}" in proc.output
    assert "stopped" in proc.output and "Traceback" not in proc.output


def test_sigint_stops_cleanly(fresh_mosquitto: MosquittoBroker) -> None:
    argv = [sys.executable, "-m", "sskv_mapping.emulator", "--port", str(fresh_mosquitto.port)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO_ROOT) as proc:
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().decode()
            assert "serving state store on" in first
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == 0
            rest = proc.stdout.read().decode()
            assert "stopped" in rest and "Traceback" not in rest
        finally:
            if proc.poll() is None:
                proc.kill()


def test_unreachable_broker_exits_with_status_1() -> None:
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "sskv_mapping.emulator", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 1
    assert f"127.0.0.1:{port}" in out.stderr
    assert "serving state store on" not in out.stdout


async def test_emulator_reconnects_after_a_broker_restart_and_keeps_its_data(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess
) -> None:
    k = key()
    async with MiniClient(fresh_mosquitto.host, fresh_mosquitto.port) as c:
        assert (await c.request(b"SET", k, b"kept")).payload == OK
    await asyncio.to_thread(fresh_mosquitto.restart)
    assert await asyncio.to_thread(fresh_emulator.wait_for_output, "serving again", 10)
    async with MiniClient(fresh_mosquitto.host, fresh_mosquitto.port) as c:
        assert (await c.request(b"GET", k)).payload == b"$4\r\nkept\r\n"


async def test_quota_option(fresh_mosquitto: MosquittoBroker) -> None:
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, "--max-keys", "2"):
        async with MiniClient(fresh_mosquitto.host, fresh_mosquitto.port) as c:
            assert (await c.request(b"SET", b"a", b"1")).payload == OK
            assert (await c.request(b"SET", b"b", b"1")).payload == OK
            assert (await c.request(b"SET", b"c", b"1")).payload == err(errors.QuotaExceededError)


async def test_persistence_across_restarts(fresh_mosquitto: MosquittoBroker, tmp_path: Path) -> None:
    store = tmp_path / "store.json"
    host, port = fresh_mosquitto.host, fresh_mosquitto.port
    persist = [("aio-persistence", "true")]
    with start_emulator(host, port, "--persist-file", str(store)) as proc:
        async with MiniClient(host, port) as c:
            kept = await c.request(b"SET", b"kept\x00", b"v1", extra=persist)
            assert (await c.request(b"SET", b"volatile", b"v2")).payload == OK
            assert (await c.request(b"SET", b"gone", b"v3", extra=persist)).payload == OK
            assert (await c.request(b"DEL", b"gone")).payload == b":1\r\n"
    assert proc.returncode == 0
    saved = json.loads(store.read_text())
    assert len(saved["entries"]) == 1
    with start_emulator(host, port, "--persist-file", str(store)):
        async with MiniClient(host, port) as c:
            g = await c.request(b"GET", b"kept\x00")
            assert g.payload == b"$2\r\nv1\r\n" and g.ts == kept.ts
            assert (await c.request(b"GET", b"volatile")).payload == b"$-1\r\n"
            assert (await c.request(b"GET", b"gone")).payload == b"$-1\r\n"
            newer = await c.request(b"SET", b"kept\x00", b"v4")
            assert newer.ts is not None and kept.ts is not None and newer.ts > kept.ts


def test_unreadable_persistence_file_is_reported(fresh_mosquitto: MosquittoBroker, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sskv_mapping.emulator",
            "--port",
            str(fresh_mosquitto.port),
            "--persist-file",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 1 and "persistence file" in out.stderr


# -- EmulatorServer in-process ----------------------------------------------------------------------------


class ExplodingCore(EmulatorCore):
    """A core with a bug on one request."""

    def handle(
        self, client_id: str | None, payload: bytes, props: Mapping[str, str], correlation: bytes | None = None
    ) -> CoreResult:
        if payload == encode_request(b"GET", b"boom"):
            raise RuntimeError("a bug in the core")
        return super().handle(client_id, payload, props, correlation)


async def test_in_process_server_answers_500_on_a_core_bug_and_keeps_serving(
    fresh_mosquitto: MosquittoBroker,
) -> None:
    host, port = fresh_mosquitto.host, fresh_mosquitto.port
    announced: list[str] = []
    server = EmulatorServer(
        ConnectionSettings(host=host, port=port, client_id="emu-in-process"), ExplodingCore(), on_ready=announced.append
    )
    task = asyncio.create_task(server.run())
    try:
        await asyncio.wait_for(server.wait_ready(), 10)
        assert announced == [server.ready_message()] and "serving state store on" in announced[0]
        async with MiniClient(host, port) as c:
            r = await c.request(b"GET", b"boom")
            assert r.props["__stat"] == "500" and "RuntimeError" in r.props["__stMsg"]
            assert (await c.request(b"SET", b"after", b"v")).payload == OK
        assert server.stats["errors"] == 1 and server.stats["requests"] == 2
    finally:
        server.stop()
        await asyncio.wait_for(task, 10)


async def test_in_process_server_fails_fast_when_the_broker_is_unreachable() -> None:
    server = EmulatorServer(ConnectionSettings(host="127.0.0.1", port=free_port(), client_id="emu-nowhere"))
    with pytest.raises(TransportError):
        await asyncio.wait_for(server.run(), 15)
    assert not server.ready


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("clients/a/services/statestore/_any_/command/invoke/response", "a"),
        ("clients/a/b/services/statestore/v1/x/command/invoke/response", "a/b"),
        ("clients/a/responses", "a"),
        ("clients/", None),
        ("replies/a", None),
    ],
)
def test_client_id_from_response_topic(topic: str, expected: str | None) -> None:
    assert client_id_from_response_topic(topic) == expected


# -- `sskv emulator` ----------------------------------------------------------------------------------------


#: the two command lines that start the emulator: one parser, the same flags (issue 37)
EMULATOR_COMMANDS = {
    "sskv emulator": ["-m", "sskv_mapping.cli", "emulator"],
    "python -m sskv_mapping.emulator": ["-m", "sskv_mapping.emulator"],
}


@pytest.mark.parametrize("command", EMULATOR_COMMANDS)
async def test_sskv_emulator_with_broker_serves_and_stops_both(command: str) -> None:
    port = free_port()
    argv = [sys.executable, *EMULATOR_COMMANDS[command], "--with-broker", "--broker-port", str(port)]
    proc = EmulatorProcess(argv, env=repo_env(), cwd=str(REPO_ROOT))
    await asyncio.to_thread(proc.start)
    try:
        assert f"mosquitto broker listening on mqtt://127.0.0.1:{port}" in proc.output
        # its mosquitto runs with queue limits that fit the emulator's load, not the defaults that drop messages
        config = _broker_config_of(port)
        assert all(line in config.splitlines() for line in EMULATOR_QUEUE_SETTINGS)
        async with MiniClient("127.0.0.1", port) as c:
            k = key()
            await c.request(b"KEYNOTIFY", k)
            assert (await c.request(b"SET", k, b"v", b"PX", b"100")).payload == OK
            assert (await c.note(k)).payload == set_note(b"v")
            assert (await c.note(k)).payload == DELETE_NOTE
    finally:
        status = await asyncio.to_thread(proc.stop)
    assert status == 0
    assert not _accepts(port)  # the private mosquitto went with it


def test_sskv_help_lists_the_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    from sskv_mapping.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "emulator" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["emulator", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "--with-broker" in help_text and "--broker-port" in help_text


@pytest.mark.parametrize("command", EMULATOR_COMMANDS)
def test_both_command_lines_print_one_help_with_examples_that_parse(command: str) -> None:
    """The same options under either name, and every example of ``--help`` is a command line the parser takes."""
    from sskv_mapping.emulator.process import build_parser

    done = subprocess.run(
        [sys.executable, *EMULATOR_COMMANDS[command], "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    help_text = done.stdout
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", help_text))
    assert {"--with-broker", "--broker-port", "--port", "--inspect", "--persist-file", "--no-scan"} <= options
    examples = [
        line.strip().split("#")[0].split()
        for line in help_text.split("examples:", 1)[1].splitlines()
        if line.strip().startswith(command)
    ]
    assert len(examples) >= 4 and any("--with-broker" in e for e in examples)
    parser = build_parser()
    for example in examples:
        args = parser.parse_args(example[len(command.split()) :])  # exits (failing the test) on a bad example
        assert args.with_broker or args.port is not None


def test_the_two_help_texts_list_the_same_options() -> None:
    texts = [
        subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
        for argv in EMULATOR_COMMANDS.values()
    ]
    sskv, module = (set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", t)) for t in texts)
    assert sskv == module


def test_default_broker_port_falls_back_to_a_free_one_when_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    from sskv_mapping.emulator import process as cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setattr(cli, "DEFAULT_BROKER_PORT", taken)
        port, note = cli.pick_broker_port("127.0.0.1", None)
        assert port is None and note is not None and str(taken) in note
        assert cli.pick_broker_port("127.0.0.1", 4242) == (4242, None)  # an explicit port is used as is
    free = free_port()
    monkeypatch.setattr(cli, "DEFAULT_BROKER_PORT", free)
    assert cli.pick_broker_port("127.0.0.1", None) == (free, None)


def test_broker_port_without_with_broker_is_a_usage_error() -> None:
    from sskv_mapping.cli import main

    assert main(["emulator", "--broker-port", "1234"]) == 2


def _broker_config_of(port: int) -> str:
    """The config file of the mosquitto (a grandchild of this process) listening on ``port``."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process went away
            continue
        if argv and argv[0].endswith(b"mosquitto") and b"-c" in argv:
            config = Path(argv[argv.index(b"-c") + 1].decode())
            with contextlib.suppress(OSError):
                text = config.read_text("utf-8")
                if f"listener {port} " in text:
                    return text
    raise AssertionError(f"no mosquitto listening on port {port} found")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_the_emulator_warns_once_per_client_when_the_broker_says_it_drops_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """mosquitto logs "Outgoing messages are being dropped for client X." when X's queue is full; the emulator
    reads the broker's log topic already (for disconnects) and says so, once per client, with what to change."""
    server = EmulatorServer(ConnectionSettings(host="127.0.0.1", port=free_port(), client_id="emu-drops"))

    def log_line(text: str) -> InboundMessage:
        return InboundMessage("$SYS/broker/log/N", text.encode(), 1, None, None, (), None)

    with caplog.at_level(logging.WARNING, "sskv_mapping.emulator"):
        for _ in range(3):
            server._on_message(log_line("1764000000: Outgoing messages are being dropped for client slow one."))
        server._on_message(log_line("1764000001: Outgoing messages are being dropped for client other."))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "'slow one'" in warnings[0] and "max_queued_messages" in warnings[0] and "--with-broker" in warnings[0]
    assert server.stats["broker_drops_reported"] == 4
    assert server.stats["dropped_clients"] == 0  # not a disconnect
