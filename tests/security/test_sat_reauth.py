"""K8S-SAT re-authentication on the live connection (issue 18, point 2), against a front that behaves as the
Azure IoT Operations broker does (``_sat_front``): it closes the socket silently at the presented token's
``exp`` unless an AUTH with a newer token came first, and relays everything else to a real mosquitto with the
emulator behind it.

Test tokens live seconds (real ones an hour): the rotation, the margin before ``exp`` and the file polling are
the same code at both scales (``_transport/sat.py``; the timing rules are unit-tested in
``tests/transport/test_sat.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sskv_mapping import ConnectionLostError, ConnectionSettings, ReauthenticationError, StateStoreError
from sskv_mapping._protocol.notifications import KeyEvent
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.emulator.server import EmulatorServer
from tests._support.waiting import StateWatcher

from ._sat_front import SatFront, make_jwt
from .test_k8s_sat import LogEvent, rotate

#: a test token's lifetime (s); the rotator writes a fresh one every third of it, as the kubelet does (sooner)
LIFETIME = 4.0
EXPIRIES = 3


@dataclass
class Traffic:
    """Requests made back to back on one key while tokens rotate, and what a watch of that key saw."""

    key: str
    calls: int = 0
    failed: list[str] = field(default_factory=list)
    written: list[bytes] = field(default_factory=list)
    seen: list[bytes] = field(default_factory=list)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)

    def on_event(self, event: KeyEvent) -> None:
        if event.value is not None:
            self.seen.append(event.value)
        if self.written and self.seen[-1:] == self.written[-1:]:
            self.caught_up.set()

    async def run(self, client: AsyncStateStoreClient, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            value = f"v{n}".encode()
            n += 1
            try:
                self.written.append(value)
                await client.set(self.key, value)
                entry = await client.get(self.key)
                if entry is None or entry.value != value:
                    self.failed.append(f"read back {entry!r} after writing {value!r}")
            except StateStoreError as exc:
                self.failed.append(repr(exc))
            self.calls += 2


async def kubelet(path: Path, rotations: list[float]) -> None:
    """Rewrites the token file with a fresh JWT every third of its lifetime (the kubelet's cadence, scaled)."""
    while True:
        await asyncio.sleep(LIFETIME / 3)
        rotate(path, make_jwt(LIFETIME))
        rotations.append(LIFETIME)


@contextlib.asynccontextmanager
async def background(*coros: Awaitable[object]) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    rotate(path, make_jwt(LIFETIME))
    return path


async def _rotate_through_expiries(front: SatFront, client: AsyncStateStoreClient, token_file: Path) -> None:
    """Requests and a watch while the token file rotates, until the front has seen EXPIRIES token expiries
    pass on a link that stayed open; then the watch must catch up with the last write."""
    traffic = Traffic(f"sat-{secrets.token_hex(4)}")
    stop = asyncio.Event()
    rotations: list[float] = []
    async with await client.subscribe_key(traffic.key, traffic.on_event):
        async with background(kubelet(token_file, rotations), traffic.run(client, stop)):
            await front.wait_until(lambda: front.survived >= EXPIRIES or front.closed_at_expiry > 0, timeout=60)
            stop.set()
        assert front.closed_at_expiry == 0, "a token expired before the client re-authenticated"
        assert traffic.failed == []
        async with asyncio.timeout(10):  # the last notification may still be on its way
            while traffic.seen[-1:] != traffic.written[-1:]:
                traffic.caught_up.clear()
                await traffic.caught_up.wait()
        assert traffic.seen == traffic.written  # every change, in order, none lost to a reconnect
    print(  # the figures the issue asks for (pytest -s)
        f"\nSAT rotation: {len(rotations)} file rotations, {front.auths_accepted} re-authentications, "
        f"{front.survived} token expiries outlived, {client.reconnects} reconnects, {traffic.calls} calls, "
        f"{len(traffic.failed)} failed, {len(traffic.seen)}/{len(traffic.written)} changes seen by the watch"
    )


async def test_a_client_stays_on_one_connection_across_token_expiries(
    broker_address: tuple[str, int], token_file: Path
) -> None:
    host, port = broker_address
    async with SatFront(port, upstream_host=host) as front:
        client = AsyncStateStoreClient(
            settings=ConnectionSettings(host, front.port, sat_token_file=str(token_file)), timeout=5
        )
        async with client:
            states = StateWatcher(client)
            await _rotate_through_expiries(front, client, token_file)
            assert client.reconnects == 0
            assert states.seen == []  # never RECONNECTING: nothing above the transport (caches, watches) noticed
        assert front.accepted == 1  # one TCP connection throughout
        assert front.survived >= EXPIRIES


async def test_the_emulator_stays_on_one_connection_across_token_expiries(
    fresh_mosquitto: MosquittoBroker, token_file: Path
) -> None:
    """The emulator's connection is the same transport: behind the front, it re-authenticates too."""
    broker = fresh_mosquitto
    async with SatFront(broker.port, upstream_host=broker.host) as front:
        emulator_settings = ConnectionSettings(
            broker.host, front.port, client_id=f"sskv-emulator-{secrets.token_hex(4)}", sat_token_file=str(token_file)
        )
        server = EmulatorServer(emulator_settings)
        serving = asyncio.ensure_future(server.run())
        try:
            await asyncio.wait_for(server.wait_ready(), 10)
            async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
                await _rotate_through_expiries(front, client, token_file)
                assert client.reconnects == 0
            assert server.stats["connections"] == 1
            assert front.accepted == 1
        finally:
            server.stop()
            await asyncio.wait_for(serving, 10)


@pytest.mark.parametrize("refuse", ["auth", "disconnect", "silence"])
async def test_a_refused_re_authentication_reconnects_with_the_file_read_again(
    broker_address: tuple[str, int], tmp_path: Path, refuse: str, caplog: pytest.LogCaptureFixture
) -> None:
    """AUTH 0x87, DISCONNECT 0x87 or no answer: a logged failure, the connection dropped, and the client's
    reconnect presents what the file holds now."""
    host, port = broker_address
    token_file = tmp_path / "token"
    rotate(token_file, make_jwt(60))
    settings = ConnectionSettings(host, 1, sat_token_file=str(token_file), sat_poll_interval=0.05, connect_timeout=1.0)
    async with (
        SatFront(port, upstream_host=host, refuse=refuse) as front,
        AsyncStateStoreClient(settings=settings.replace(port=front.port), timeout=5) as client,
    ):
        states = StateWatcher(client)
        newer = make_jwt(120)
        with caplog.at_level(logging.WARNING, logger="sskv_mapping.transport"):
            rotate(token_file, newer)
            await states.wait_for(ConnectionState.CONNECTED, timeout=15)  # after the drop
        assert front.auths == [newer.encode()]
        assert front.connects[-1] == newer.encode()  # the reconnect read the file again
        assert client.reconnects == 1
        assert "K8S-SAT re-authentication" in caplog.text and "failed" in caplog.text
        await client.set("sat-refused", b"still serving")
        assert (await client.get("sat-refused")) is not None


@pytest.mark.parametrize("refuse", ["auth", "disconnect", "silence"])
async def test_reauthenticate_raises_a_typed_error_and_drops_the_link(
    broker_address: tuple[str, int], tmp_path: Path, refuse: str
) -> None:
    host, port = broker_address
    token_file = tmp_path / "token"
    rotate(token_file, make_jwt(60))
    async with SatFront(port, upstream_host=host, refuse=refuse) as front:
        conn = StreamConnection(ConnectionSettings(host, front.port, sat_token_file=str(token_file)), lambda m: None)
        await conn.connect()
        try:
            with pytest.raises(ReauthenticationError, match=r"K8S-SAT re-authentication on .* failed"):
                await conn.reauthenticate(make_jwt(120).encode(), 0.5)
            with pytest.raises(ConnectionLostError):
                await asyncio.wait_for(conn.wait_closed(), 5)
            assert not conn.connected
        finally:
            await conn.close()


async def test_a_token_that_is_not_a_jwt_is_re_sent_only_when_the_file_changes(
    broker_address: tuple[str, int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host, port = broker_address
    token_file = tmp_path / "token"
    rotate(token_file, "opaque-one")
    settings = ConnectionSettings(host, 1, sat_token_file=str(token_file), sat_poll_interval=0.05)
    async with SatFront(port, upstream_host=host) as front:
        async with AsyncStateStoreClient(settings=settings.replace(port=front.port), timeout=5) as client:
            for n, token in enumerate(["opaque-two", "opaque-three"], start=1):
                accepted = LogEvent("K8S-SAT re-authentication accepted")
                logging.getLogger("sskv_mapping.transport").addHandler(accepted)
                try:
                    with caplog.at_level(logging.DEBUG, logger="sskv_mapping"):
                        rotate(token_file, token)

                        def accepted_n(n: int = n) -> bool:
                            return front.auths_accepted >= n

                        await front.wait_until(accepted_n, timeout=10)
                        await asyncio.wait_for(accepted.event.wait(), 10)
                finally:
                    logging.getLogger("sskv_mapping.transport").removeHandler(accepted)
                assert "opaque" not in caplog.text  # the token is in no log record
            # many polls of an unchanged file in between, and not one AUTH for them
            assert front.auths == [b"opaque-two", b"opaque-three"]
            assert client.reconnects == 0
            await client.set("sat-opaque", b"v")
        assert front.accepted == 1


async def test_a_token_provider_is_asked_for_connect_and_re_authentication(broker_address: tuple[str, int]) -> None:
    """A token that lives in no file: a callable gives the current one, at CONNECT and before ``exp``."""
    host, port = broker_address
    issued: list[str] = []

    def provider() -> str:
        if not issued or issued[-1] != current[0]:
            issued.append(current[0])
        return current[0]

    current = [make_jwt(LIFETIME)]
    async with SatFront(port, upstream_host=host) as front:
        async with AsyncStateStoreClient(host, front.port, sat_token_provider=provider, timeout=5) as client:
            for _ in range(EXPIRIES):
                current[0] = make_jwt(LIFETIME)  # a fresh token from the user's source
                accepted = front.auths_accepted

                def accepted_again(a: int = accepted) -> bool:
                    return front.auths_accepted > a

                await front.wait_until(accepted_again, timeout=10)
                await client.set("sat-provider", b"v")
            await front.wait_until(lambda: front.survived >= EXPIRIES - 1, timeout=10)
            assert client.reconnects == 0
        assert front.accepted == 1
        assert front.closed_at_expiry == 0
        assert [t.encode() for t in issued[1:]] == front.auths
