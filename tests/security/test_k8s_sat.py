"""MQTT 5 enhanced authentication with method ``K8S-SAT``: the token file is read on every (re)connect.

Kubernetes rotates a projected service-account token in place; a client that read it once would be
refused after its next reconnect. The fake broker (``_fake_mqtt``) records each CONNECT's Authentication
Method (0x15) and Authentication Data (0x16) and drops connections on demand.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sskv_mapping import BrokerConnectError, TransportError
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from tests._support.waiting import StateWatcher

from ._fake_mqtt import FakeMqttBroker


def rotate(path: Path, token: str) -> None:
    """Replace the token atomically, as the kubelet does (a reader never sees half a token)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(token)
    os.replace(tmp, path)


class LogEvent(logging.Handler):
    """Sets an asyncio event when a log record containing ``text`` is emitted (on the loop thread)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("sat-token-one\n")  # a trailing newline, as hand-written files have
    return path


async def test_token_sent_with_the_k8s_sat_method(token_file: Path) -> None:
    async with (
        FakeMqttBroker() as fake,
        AsyncStateStoreClient("127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2) as client,
    ):
        [connect] = await fake.wait_for_connects(1)
        assert connect.client_id == client.client_id
        assert connect.auth_method == "K8S-SAT"
        assert connect.auth_data == b"sat-token-one"  # surrounding whitespace stripped
        assert (connect.username, connect.password) == (None, None)


async def test_token_file_is_reread_on_every_reconnect(token_file: Path) -> None:
    async with (
        FakeMqttBroker() as fake,
        AsyncStateStoreClient(
            "127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2, backoff_initial=0.01
        ) as client,
    ):
        states = StateWatcher(client)
        await fake.wait_for_connects(1)
        for n, token in enumerate(["sat-token-two", "sat-token-three"], start=2):
            rotate(token_file, token)
            assert fake.drop_all() == 1
            connects = await fake.wait_for_connects(n)
            await states.wait_for(ConnectionState.CONNECTED, count=n - 1)
            assert client.reconnects == n - 1
            assert connects[-1].auth_method == "K8S-SAT"
            assert connects[-1].auth_data == token.encode()
            assert connects[-1].client_id == client.client_id
        assert [c.auth_data for c in fake.connects] == [b"sat-token-one", b"sat-token-two", b"sat-token-three"]


async def test_token_file_missing_during_a_reconnect_delays_it_but_does_not_end_it(token_file: Path) -> None:
    failed = LogEvent("reconnect attempt")
    logger = logging.getLogger("sskv_mapping.client")
    logger.addHandler(failed)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        async with (
            FakeMqttBroker() as fake,
            AsyncStateStoreClient(
                "127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2, backoff_initial=0.01
            ) as client,
        ):
            states = StateWatcher(client)
            await fake.wait_for_connects(1)
            token_file.unlink()  # noqa: ASYNC240 - a tiny local file
            fake.drop_all()
            async with asyncio.timeout(5):
                await failed.event.wait()  # an attempt failed for want of the token file
            assert client.state is ConnectionState.RECONNECTING
            assert fake.accepted == 1  # without a token it did not even dial
            rotate(token_file, "sat-token-restored")
            await states.wait_for(ConnectionState.CONNECTED)
            assert fake.connects[-1].auth_data == b"sat-token-restored"
    finally:
        logger.removeHandler(failed)
        logger.setLevel(old_level)


def _not_a_file(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    yield "missing", tmp_path / "absent"
    directory = tmp_path / "a-directory"
    directory.mkdir()
    yield "directory", directory


async def test_unreadable_token_file_is_a_typed_error_before_dialling(tmp_path: Path) -> None:
    async with FakeMqttBroker() as fake:
        for what, path in _not_a_file(tmp_path):
            client = AsyncStateStoreClient("127.0.0.1", fake.port, sat_token_file=str(path), timeout=2)
            with pytest.raises(BrokerConnectError, match="token file"):
                await client.connect()
            assert client.state is ConnectionState.DISCONNECTED, what
            assert client.requests_sent == 0
            await client.close()
        assert fake.accepted == 0, "a client without a readable token must not dial"


async def test_broker_refusing_the_token_is_a_typed_error(token_file: Path) -> None:
    async with FakeMqttBroker(connack_reason=0x87) as fake:  # 0x87: not authorized
        client = AsyncStateStoreClient("127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2)
        async with asyncio.timeout(3):
            with pytest.raises(BrokerConnectError, match=r"(?i)not authori"):
                await client.connect()
        assert [c.auth_data for c in fake.connects] == [b"sat-token-one"]
        await client.close()


async def test_refused_subscriptions_are_a_typed_error_at_connect(token_file: Path) -> None:
    """A broker that authenticates the client but refuses its SUBSCRIBE (0x87, as an ACL would on a broker
    that enforces it at subscribe time) gives an error at connect, not requests that wait in vain."""
    async with FakeMqttBroker(suback_reason=0x87) as fake:
        client = AsyncStateStoreClient("127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2)
        async with asyncio.timeout(3):
            with pytest.raises(TransportError, match="refused subscription"):
                await client.connect()
        assert client.state is ConnectionState.DISCONNECTED
        assert client.requests_sent == 0
        await client.close()
