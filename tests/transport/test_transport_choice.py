"""``SSKV_MQTT_TRANSPORT=stream|paho`` chooses the transport of every new connection (``_transport/factory.py``).
The round trips run against the session's mosquitto and emulator.
"""

from __future__ import annotations

import uuid
import warnings

import pytest

from sskv_mapping import AsyncStateStoreClient, ConfigurationError
from sskv_mapping._transport.factory import TRANSPORT_ENV, chosen_transport, new_connection
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)


def no_warning_chosen() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return chosen_transport()


def test_the_names() -> None:
    assert TRANSPORT_ENV == "SSKV_MQTT_TRANSPORT"


@pytest.mark.parametrize(
    ("value", "expected"), [("stream", "stream"), ("paho", "paho"), (" Paho ", "paho"), ("", "stream")]
)
def test_the_variable_names_the_transport(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, value)
    assert no_warning_chosen() == expected


def test_unset_is_the_stream_transport() -> None:
    assert no_warning_chosen() == "stream"


@pytest.mark.parametrize("value", ["0", "fast", "aiomqtt"])
def test_any_other_value_is_a_configuration_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, value)
    with pytest.raises(ConfigurationError, match="SSKV_MQTT_TRANSPORT must be one of stream, paho"):
        chosen_transport()
    with pytest.raises(ConfigurationError, match="SSKV_MQTT_TRANSPORT"):
        new_connection(ConnectionSettings(), lambda message: None)


async def round_trip(broker_address: tuple[str, int]) -> object:
    """A value set and read back through a client on the real broker; the connection it used."""
    key, value = f"transport-{uuid.uuid4().hex}", uuid.uuid4().bytes
    async with AsyncStateStoreClient(*broker_address, timeout=10.0) as client:
        await client.set(key, value)
        entry = await client.get(key)
        assert entry is not None and entry.value == value
        await client.delete(key)
        return client._keeper.conn


async def test_the_variable_chooses_each_new_connection(
    broker_address: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, "paho")
    assert isinstance(await round_trip(broker_address), PahoConnection)
    monkeypatch.setenv(TRANSPORT_ENV, "stream")
    assert isinstance(await round_trip(broker_address), StreamConnection)
