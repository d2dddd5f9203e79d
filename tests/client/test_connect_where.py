"""One way to say where to connect: every face's ``connect(broker, ...)`` goes through ``settings_for``.

Pure: no broker is needed to check what settings a ``connect()`` would open (the faces' round trips through
``connect(url)`` and ``connect(ConnectionSettings)`` run against a real broker in tests/client/test_from_environment.py,
tests/recovery/test_request_timeouts.py and the cache contract).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sskv_mapping import (
    AsyncStateStoreCache,
    AsyncStateStoreDict,
    ConfigurationError,
    ConnectionSettings,
    StateStoreCache,
    StateStoreDict,
    TlsSettings,
)
from sskv_mapping._transport.settings import settings_for
from sskv_mapping.client._client import DEFAULT_BROKER_URL


def test_a_url_gives_host_port_and_credentials_and_leaves_the_client_options() -> None:
    options: dict[str, Any] = {"timeout": 2.5, "client_id": "me", "reconnect": False}
    settings = settings_for("mqtts://user:pw@broker.example:8884", options)
    assert (settings.host, settings.port, settings.username, settings.password) == (
        "broker.example",
        8884,
        "user",
        "pw",
    )
    assert isinstance(settings.tls, TlsSettings) and settings.client_id == "me"
    assert options == {"timeout": 2.5, "reconnect": False}  # what is left is the client's


def test_settings_are_taken_whole_and_connection_options_override_them() -> None:
    base = ConnectionSettings(host="aio-broker", port=18883, sat_token_file="/var/run/secrets/tokens/broker-sat")
    assert settings_for(base, {}) is base
    options: dict[str, Any] = {"client_id": "replica-2", "username": None, "timeout": None}
    settings = settings_for(base, options)
    assert (settings.host, settings.port, settings.client_id) == ("aio-broker", 18883, "replica-2")
    assert settings.sat_token_file == "/var/run/secrets/tokens/broker-sat"
    assert options == {"timeout": None}


def test_a_connection_string_and_the_environment_reach_every_face() -> None:
    settings = settings_for("HostName=aio-broker;TcpPort=1883;UseTls=false", {})
    assert (settings.host, settings.port, settings.tls) == ("aio-broker", 1883, None)
    env = {"AIO_BROKER_HOSTNAME": "aio-broker", "AIO_BROKER_TCP_PORT": "18883", "AIO_MQTT_USE_TLS": "false"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        from_env = settings_for("env:", {})
    assert (from_env.host, from_env.port) == ("aio-broker", 18883)


@pytest.mark.parametrize(
    ("broker", "options", "message"),
    [
        ("127.0.0.1", {}, "looks like mqtt://host:port"),
        ("http://127.0.0.1", {}, "unsupported broker URL scheme"),
        (1883, {}, "not int"),
        (DEFAULT_BROKER_URL, {"host": "h"}, "host= is not a connect() option"),
        (DEFAULT_BROKER_URL, {"port": 1883}, "port= is not a connect() option"),
        (DEFAULT_BROKER_URL, {"settings": ConnectionSettings()}, "settings= is not a connect() option"),
    ],
)
def test_a_wrong_place_to_connect_is_a_configuration_error(broker: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings_for(broker, options)


def test_a_bare_host_is_not_echoed_back() -> None:
    with pytest.raises(ConfigurationError) as info:
        settings_for("s3cret-pasted-here", {})
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("face", [AsyncStateStoreDict, StateStoreDict, AsyncStateStoreCache, StateStoreCache])
def test_every_face_connects_the_same_way(
    face: type[AsyncStateStoreDict[Any] | StateStoreDict[Any] | AsyncStateStoreCache[Any] | StateStoreCache[Any]],
) -> None:
    params = inspect.signature(face.connect).parameters
    first = next(iter(params.values()))
    assert first.name == "broker" and first.default == DEFAULT_BROKER_URL
    assert first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert list(params.values())[-1].kind is inspect.Parameter.VAR_KEYWORD  # the client's options, passed through
    assert not {"host", "port", "settings"} & set(params)
