"""``SSKV_MQTT_TRANSPORT=stream|paho`` chooses the transport of every new connection (``_transport/factory.py``);
its old name ``SSKV_MQTT_FASTPATH`` (``0``: paho) still does the same for one release, with a DeprecationWarning.
The round trips run against the session's mosquitto and emulator.
"""

from __future__ import annotations

import uuid
import warnings

import pytest

from sskv_mapping import AsyncStateStoreClient, ConfigurationError
from sskv_mapping._transport.factory import (
    DEPRECATED_TRANSPORT_ENV,
    TRANSPORT_ENV,
    chosen_transport,
    new_connection,
)
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    monkeypatch.delenv(DEPRECATED_TRANSPORT_ENV, raising=False)


def no_warning_chosen() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return chosen_transport()


def test_the_names() -> None:
    assert (TRANSPORT_ENV, DEPRECATED_TRANSPORT_ENV) == ("SSKV_MQTT_TRANSPORT", "SSKV_MQTT_FASTPATH")


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


@pytest.mark.parametrize(("old", "expected"), [("0", "paho"), ("1", "stream"), ("", "stream")])
def test_the_old_variable_still_chooses_with_a_deprecation_warning(
    monkeypatch: pytest.MonkeyPatch, old: str, expected: str
) -> None:
    monkeypatch.setenv(DEPRECATED_TRANSPORT_ENV, old)
    with pytest.warns(DeprecationWarning, match=f"SSKV_MQTT_FASTPATH is deprecated.*SSKV_MQTT_TRANSPORT={expected}"):
        assert chosen_transport() == expected


def test_the_new_variable_wins_over_the_old_one_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEPRECATED_TRANSPORT_ENV, "0")
    monkeypatch.setenv(TRANSPORT_ENV, "stream")
    assert no_warning_chosen() == "stream"


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


async def test_the_old_variable_does_the_same_with_a_warning(
    broker_address: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEPRECATED_TRANSPORT_ENV, "0")
    with pytest.warns(DeprecationWarning, match="SSKV_MQTT_TRANSPORT=paho"):
        assert isinstance(await round_trip(broker_address), PahoConnection)
    monkeypatch.setenv(DEPRECATED_TRANSPORT_ENV, "1")
    with pytest.warns(DeprecationWarning, match="SSKV_MQTT_TRANSPORT=stream"):
        assert isinstance(await round_trip(broker_address), StreamConnection)
