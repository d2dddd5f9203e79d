"""MosquittoBroker and parse_connection_log against a real mosquitto; the emulator-process helper."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiomqtt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping.emulator import broker as broker_module
from sskv_mapping.emulator.broker import (
    LOG_TOPIC_FILTER,
    MOSQUITTO_NOT_FOUND,
    MosquittoBroker,
    MosquittoStartError,
    find_mosquitto,
    free_port,
    parse_connection_log,
)
from sskv_mapping.errors import ConfigurationError, StateStoreStartError
from tests._support.procs import EmulatorProcess, child_processes

V5 = aiomqtt.ProtocolVersion.V5
WAIT = 10.0  # generous upper bound for any one broker event; tests finish as soon as it happens


def unique_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def accepts_tcp(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


async def mqtt_echo(broker: MosquittoBroker) -> None:
    """Connect with MQTT 5, publish to ourselves and receive it: the broker really serves MQTT."""
    topic = f"test/{uuid.uuid4().hex}"
    async with aiomqtt.Client(broker.host, broker.port, identifier=unique_id("echo"), protocol=V5) as client:
        await client.subscribe(topic, qos=1)
        await client.publish(topic, b"ping", qos=1)
        async with asyncio.timeout(WAIT):
            async for message in client.messages:
                assert message.payload == b"ping"
                return


# -- a $SYS/broker/log watcher ----------------------------------------------------------------------


class ConnectionLog:
    """Connection events parsed from $SYS/broker/log/#, in arrival order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lines: list[str] = []
        self._changed = asyncio.Condition()

    async def add(self, line: str) -> None:
        self.lines.append(line)
        event = parse_connection_log(line)
        if event is not None:
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()

    def of(self, client_id: str) -> list[str]:
        return [kind for kind, cid in self.events if cid == client_id]

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        try:
            async with asyncio.timeout(WAIT), self._changed:
                await self._changed.wait_for(predicate)
        except TimeoutError:
            raise AssertionError(f"timed out; events so far: {self.events}; lines: {self.lines}") from None


@contextlib.asynccontextmanager
async def watch_connection_log(broker: MosquittoBroker) -> AsyncIterator[ConnectionLog]:
    log = ConnectionLog()
    async with aiomqtt.Client(broker.host, broker.port, identifier=unique_id("watcher"), protocol=V5) as w:
        await w.subscribe(LOG_TOPIC_FILTER, qos=1)  # SUBACK: every later log line reaches us

        async def pump() -> None:
            async for message in w.messages:
                assert isinstance(message.payload, bytes)
                await log.add(message.payload.decode("utf-8", errors="replace"))

        task = asyncio.create_task(pump())
        try:
            yield log
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def raw_connect(broker: MosquittoBroker, client_id: str) -> asyncio.StreamWriter:
    """A bare MQTT 5 CONNECT (keepalive 60, clean start) and its CONNACK, to control how we leave."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x05\x02" + struct.pack(">H", 60) + b"\x00" + struct.pack(">H", len(cid)) + cid
    assert len(body) < 128
    reader, writer = await asyncio.open_connection(broker.host, broker.port)
    writer.write(b"\x10" + bytes([len(body)]) + body)
    await writer.drain()
    async with asyncio.timeout(WAIT):
        header = await reader.readexactly(2)
        connack = await reader.readexactly(header[1])
    assert header[0] == 0x20 and connack[1] == 0, (header, connack)
    return writer


# -- lifecycle -------------------------------------------------------------------------------------


def test_session_fixture_serves_and_is_marked(mosquitto: MosquittoBroker, request: pytest.FixtureRequest) -> None:
    assert mosquitto.running
    assert accepts_tcp(mosquitto.host, mosquitto.port)
    assert mosquitto.url == f"mqtt://127.0.0.1:{mosquitto.port}"
    assert request.node.get_closest_marker("broker") is not None


def test_start_stop_removes_everything() -> None:
    broker = MosquittoBroker()
    assert not broker.running and broker.workdir is None
    assert "stopped" in repr(broker)
    with broker:
        pid = broker.pid
        workdir = broker.workdir
        assert broker.running and workdir is not None and workdir.is_dir()
        assert accepts_tcp(broker.host, broker.port)
        assert f"127.0.0.1:{broker.port} running pid={pid}" in repr(broker)
        assert broker.config_path is not None
        assert broker.config_path.read_text() == broker.config_text()
    assert not broker.running
    assert broker.workdir is None and not workdir.exists()
    assert not accepts_tcp(broker.host, broker.port)
    assert pid not in [p for p, _ in child_processes()]
    broker.stop()  # idempotent


def test_config_text() -> None:
    port = free_port()
    broker = MosquittoBroker(port=port, extra_config=["max_packet_size 1000000", "max_inflight_messages 0"])
    lines = broker.config_text().splitlines()
    for expected in (
        f"listener {port} 127.0.0.1",
        "allow_anonymous true",
        "set_tcp_nodelay true",
        "persistence false",
        "log_dest topic",
        "connection_messages true",
        "log_type notice",
        "log_type error",
    ):
        assert expected in lines
    assert lines[-2:] == ["max_packet_size 1000000", "max_inflight_messages 0"]


def test_extra_config_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        MosquittoBroker(extra_config="max_packet_size 10")
    with pytest.raises(ConfigurationError):
        MosquittoBroker(extra_config=["a 1\nlistener 1883 0.0.0.0"])


async def test_answers_mqtt5_and_restarts_on_the_same_port(fresh_mosquitto: MosquittoBroker) -> None:
    await mqtt_echo(fresh_mosquitto)
    port, pid = fresh_mosquitto.port, fresh_mosquitto.pid
    fresh_mosquitto.restart()
    assert fresh_mosquitto.port == port and fresh_mosquitto.pid != pid
    await mqtt_echo(fresh_mosquitto)
    fresh_mosquitto.stop()
    fresh_mosquitto.start()
    assert fresh_mosquitto.port == port
    await mqtt_echo(fresh_mosquitto)


async def test_kill_then_start(fresh_mosquitto: MosquittoBroker) -> None:
    workdir = fresh_mosquitto.workdir
    fresh_mosquitto.kill()
    assert not fresh_mosquitto.running and fresh_mosquitto.pid is None
    assert not accepts_tcp(fresh_mosquitto.host, fresh_mosquitto.port)
    assert workdir is not None and workdir.is_dir()  # kept for post-mortems until stop()
    fresh_mosquitto.start()
    await mqtt_echo(fresh_mosquitto)


async def test_client_sees_broker_restart(fresh_mosquitto: MosquittoBroker) -> None:
    """A connected client loses its connection when the broker restarts, and can connect again."""
    async with aiomqtt.Client(fresh_mosquitto.host, fresh_mosquitto.port, protocol=V5) as client:
        fresh_mosquitto.restart()
        with pytest.raises(aiomqtt.MqttError):
            async with asyncio.timeout(WAIT):
                async for _ in client.messages:
                    pass
    await mqtt_echo(fresh_mosquitto)


def test_stop_terminates_a_paused_broker_without_the_kill_fallback() -> None:
    broker = MosquittoBroker().start()
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)  # a "hung" broker, as fault tests make one
    started = time.monotonic()
    broker.stop()
    assert time.monotonic() - started < 4  # SIGTERM took effect; no 5 s wait for the SIGKILL fallback
    assert not broker.running


def test_bad_config_fails_fast_with_the_log() -> None:
    broker = MosquittoBroker(extra_config=["no_such_option 1"])
    with pytest.raises(MosquittoStartError, match="no_such_option"):
        broker.start()
    assert not broker.running and broker.workdir is None


def test_fixed_port_in_use_fails() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        broker = MosquittoBroker(port=port)
        # mosquitto's "running" line, not a successful TCP connect, is what counts as ready: someone
        # else's listener on our port must not pass for our broker.
        with pytest.raises(MosquittoStartError, match="Address already in use"):
            broker.start()
        assert broker.workdir is None


def test_free_port_taken_before_start_picks_another() -> None:
    broker = MosquittoBroker()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", broker.port))
        squatter.listen()
        taken = broker.port
        with broker:
            assert broker.port != taken and accepts_tcp(broker.host, broker.port)


def test_missing_binary_is_a_configuration_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(broker_module, "FALLBACK_LOCATIONS", (str(tmp_path / "mosquitto"),))
    with pytest.raises(ConfigurationError) as info:
        find_mosquitto()
    assert str(info.value) == MOSQUITTO_NOT_FOUND
    assert "\n" not in str(info.value)
    assert str(info.value) == ("mosquitto not found: install it with 'apt-get install mosquitto' (Debian/Ubuntu)")
    with pytest.raises(ConfigurationError):
        MosquittoBroker()


def test_find_mosquitto_falls_back_to_sbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_mosquitto()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(broker_module, "FALLBACK_LOCATIONS", ("/nonexistent/mosquitto", real))
    assert find_mosquitto() == real


# -- connection messages on $SYS/broker/log ----------------------------------------------------------


async def test_log_topic_reports_clean_connect_and_disconnect(mosquitto: MosquittoBroker) -> None:
    client_id = unique_id("clean id (p5, c1, k60).")  # ids are logged raw: spaces, parentheses...
    async with watch_connection_log(mosquitto) as log:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier=client_id, protocol=V5):
            await log.wait_until(lambda: log.of(client_id) == ["connected"])
        await log.wait_until(lambda: log.of(client_id) == ["connected", "disconnected"])
    assert any(f" as {client_id} (p5, c1, k60)." in line for line in log.lines)
    assert any(line.endswith(f": Client {client_id} disconnected.") for line in log.lines)


async def test_log_topic_reports_dropped_connection(mosquitto: MosquittoBroker) -> None:
    client_id = unique_id("abrupt")
    async with watch_connection_log(mosquitto) as log:
        writer = await raw_connect(mosquitto, client_id)
        await log.wait_until(lambda: log.of(client_id) == ["connected"])
        writer.transport.abort()  # no DISCONNECT packet
        await log.wait_until(lambda: log.of(client_id) == ["connected", "disconnected"])
    assert any(line.endswith(f": Client {client_id} closed its connection.") for line in log.lines)


async def test_log_topic_reports_session_takeover(mosquitto: MosquittoBroker) -> None:
    client_id = unique_id("twin")
    async with watch_connection_log(mosquitto) as log:
        first = await raw_connect(mosquitto, client_id)
        second = await raw_connect(mosquitto, client_id)
        await log.wait_until(lambda: len(log.of(client_id)) >= 3)
        assert log.of(client_id) == ["connected", "disconnected", "connected"]
        first.close()
        second.close()
        await log.wait_until(lambda: len(log.of(client_id)) >= 4)
    assert log.of(client_id) == ["connected", "disconnected", "connected", "disconnected"]
    assert any(f"Client {client_id} already connected, closing old connection." in line for line in log.lines)


# -- parse_connection_log --------------------------------------------------------------------------


# Lines observed from mosquitto 2.0.11 (and the rarer formats read from its source, same templates).
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1795334435: New client connected from 127.0.0.1:52727 as abc (p5, c1, k60).", ("connected", "abc")),
        ("New client connected from 127.0.0.1:52727 as abc (p2, c0, k0).", ("connected", "abc")),
        (
            "1795334471: New client connected from 127.0.0.1:34347 as big (p5, c1, k60, u'alice').",
            ("connected", "big"),
        ),
        ("1: New bridge connected from ::1:1883 as br as x (p2, c1, k60).", ("connected", "br as x")),
        (
            "1795334435: New client connected from 127.0.0.1:1 as a (p5, c1, k60). (p5, c1, k60).",
            ("connected", "a (p5, c1, k60)."),
        ),
        ("1795334435: Client a b disconnected.", ("disconnected", "a b")),
        ("1795334436: Client abrupt closed its connection.", ("disconnected", "abrupt")),
        ("1795334458: Client sleepy has exceeded timeout, disconnecting.", ("disconnected", "sleepy")),
        ("1795334439: Client dup already connected, closing old connection.", ("disconnected", "dup")),
        ("1795334440: Client twice disconnected due to protocol error.", ("disconnected", "twice")),
        ("1: Client m disconnected due to malformed packet.", ("disconnected", "m")),
        ("1795334471: Client big disconnected due to oversize packet.", ("disconnected", "big")),
        ("1: Client p disconnected due to oversize payload.", ("disconnected", "p")),
        ("1: Client o disconnected due to out of memory.", ("disconnected", "o")),
        ("1: Client q disconnected due to QoS too high or retain not supported.", ("disconnected", "q")),
        ("1: Client n disconnected, not authorised.", ("disconnected", "n")),
        ("1: Client k been disconnected by administrative action.", ("disconnected", "k")),
        ("1: Client e disconnected: Connection reset by peer.", ("disconnected", "e")),
        ("1795334481: Bad socket read/write on client ret: Unknown error.", ("disconnected", "ret")),
        ("1: Bad socket read/write on client a: b: The connection was lost.", ("disconnected", "a: b")),
        ("1795334440: Client <unknown> closed its connection.", ("disconnected", "<unknown>")),
        ("1795334470: Client <unknown> disconnected, not authorised.", ("disconnected", "<unknown>")),
        ("Client x: Client y disconnected.", ("disconnected", "x: Client y")),
        ("1: Client x: Client y disconnected.", ("disconnected", "x: Client y")),
        ("2024-05-01T10:00:00: Client tsfmt disconnected.\n", ("disconnected", "tsfmt")),
        ("1795334435: New connection from 127.0.0.1:52727 on port 18883.", None),
        ("1795334440: Bad client twice sending multiple CONNECT messages.", None),
        ("1: Expiring client s due to timeout.", None),
        ("1: Outgoing messages are being dropped for client s.", None),
        ("1795334491: mosquitto version 2.0.11 terminating", None),
        ("1: Client x sent something odd.", None),
        ("", None),
        ("garbage", None),
    ],
)
def test_parse_connection_log(line: str, expected: tuple[str, str] | None) -> None:
    assert parse_connection_log(line) == expected


_CLIENT_IDS = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1)
_TEMPLATES = [
    ("connected", "New client connected from 127.0.0.1:5 as {} (p5, c1, k60)."),
    ("connected", "New client connected from 127.0.0.1:5 as {} (p5, c0, k7, u'user')."),
    ("disconnected", "Client {} disconnected."),
    ("disconnected", "Client {} closed its connection."),
    ("disconnected", "Client {} has exceeded timeout, disconnecting."),
    ("disconnected", "Client {} disconnected due to protocol error."),
    ("disconnected", "Client {} disconnected, not authorised."),
    ("disconnected", "Client {} already connected, closing old connection."),
    ("disconnected", "Client {} disconnected: Broken pipe."),
    ("disconnected", "Bad socket read/write on client {}: Unknown error."),
]


@given(client_id=_CLIENT_IDS, template=st.sampled_from(_TEMPLATES), stamped=st.booleans())
def test_parse_connection_log_recovers_any_client_id(client_id: str, template: tuple[str, str], stamped: bool) -> None:
    kind, fmt = template
    line = fmt.format(client_id)
    if stamped:
        line = f"1795334435: {line}"
    assert parse_connection_log(line) == (kind, client_id)


# -- the emulator-process helper (with stand-in programs: the real emulator has its own tests) ------------


def _python(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_emulator_process_waits_for_the_ready_line() -> None:
    code = "import sys, time; print('booting'); print('serving state store on x', flush=True); time.sleep(60)"
    with EmulatorProcess(_python(code)).start(timeout=WAIT) as proc:
        assert proc.running
        assert "booting" in proc.output
    assert not proc.running
    assert proc.returncode is not None


def test_emulator_process_stop_terminates_a_paused_process() -> None:
    code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7));"
        "print('serving state store on x', flush=True); time.sleep(60)"
    )
    proc = EmulatorProcess(_python(code)).start(timeout=WAIT)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGSTOP)
    assert proc.stop() == 7  # SIGTERM handled (not SIGKILLed after the timeout)


def test_emulator_process_that_exits_fails_fast_with_its_output() -> None:
    proc = EmulatorProcess(_python("import sys; print('no broker'); sys.exit(3)"))
    with pytest.raises(StateStoreStartError, match=r"status 3[\s\S]*no broker"):
        proc.start(timeout=60)  # must not wait for the timeout
    assert not proc.running


def test_emulator_process_that_never_gets_ready_times_out() -> None:
    proc = EmulatorProcess(_python("import time; print('stuck', flush=True); time.sleep(60)"))
    with pytest.raises(StateStoreStartError, match=r"within 0.5 s[\s\S]*stuck"):
        proc.start(timeout=0.5)
    assert not proc.running
