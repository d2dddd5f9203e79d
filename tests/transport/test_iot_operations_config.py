"""``ConnectionSettings.from_environment()`` and connection strings: the Azure IoT Operations SDKs' table
(``doc/reference/connection-settings.md``), their defaults, and a ConfigurationError naming the variable for
each bad value. Pure: no broker (the real connection from the environment: ``client/test_from_environment.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sskv_mapping import ConfigurationError
from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_session import MqttSession
from sskv_mapping._transport.settings import ConnectionSettings, TlsSettings

BASE = {"AIO_BROKER_HOSTNAME": "aio-broker"}


def env(**values: str) -> dict[str, str]:
    return {**BASE, **values}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    made = {}
    for name, text in (
        ("ca", "CA PEM"),
        ("cert", "CERT PEM"),
        ("key", "KEY PEM"),
        ("keypass", "key pass phrase\n"),
        ("password", "s3cret\n"),
        ("sat", "eyJ.token.sig"),
    ):
        path = tmp_path / name
        path.write_text(text)
        made[name] = str(path)
    return made


def test_the_sdks_defaults() -> None:
    s = ConnectionSettings.from_environment(env())
    assert (s.host, s.port, s.keepalive) == ("aio-broker", 8883, 60)
    assert s.tls == TlsSettings()  # TLS on, verified against the system's CA store
    assert (s.clean_start, s.session_expiry) == (False, 3600)  # the SDKs' persistent-session defaults, read
    assert s.client_id.startswith("sskv-")  # no AIO_MQTT_CLIENT_ID: a generated id
    assert (s.username, s.password, s.sat_token_file) == (None, None, None)


def test_every_variable_of_the_table(files: dict[str, str]) -> None:
    s = ConnectionSettings.from_environment(
        {
            "AIO_BROKER_HOSTNAME": "broker.example",
            "AIO_BROKER_TCP_PORT": "18883",
            "AIO_MQTT_USE_TLS": "TRUE",
            "AIO_TLS_CA_FILE": files["ca"],
            "AIO_TLS_CERT_FILE": files["cert"],
            "AIO_TLS_KEY_FILE": files["key"],
            "AIO_TLS_KEY_PASSWORD_FILE": files["keypass"],
            "AIO_MQTT_USERNAME": "alice",
            "AIO_MQTT_PASSWORD_FILE": files["password"],
            "AIO_MQTT_CLIENT_ID": "my-app",
            "AIO_MQTT_KEEP_ALIVE": "30",
            "AIO_MQTT_CLEAN_START": "true",
            "AIO_MQTT_SESSION_EXPIRY": "0",
            "UNRELATED": "ignored",
        }
    )
    assert (s.host, s.port, s.client_id, s.keepalive) == ("broker.example", 18883, "my-app", 30)
    assert s.tls == TlsSettings(
        ca_file=files["ca"], cert_file=files["cert"], key_file=files["key"], key_password="key pass phrase"
    )
    assert (s.username, s.password) == ("alice", "s3cret")  # the file's text, its trailing line break dropped
    assert (s.clean_start, s.session_expiry) == (True, 0)
    assert "s3cret" not in repr(s) and "key pass phrase" not in repr(s)


def test_sat_and_plain_tcp(files: dict[str, str]) -> None:
    s = ConnectionSettings.from_environment(
        env(AIO_BROKER_TCP_PORT="1883", AIO_MQTT_USE_TLS="false", AIO_SAT_FILE=files["sat"])
    )
    assert (s.port, s.tls, s.sat_token_file) == (1883, None, files["sat"])


def test_an_empty_variable_counts_as_unset() -> None:
    s = ConnectionSettings.from_environment(env(AIO_BROKER_TCP_PORT="", AIO_MQTT_CLIENT_ID="", AIO_TLS_CA_FILE=""))
    assert s.port == 8883 and s.client_id.startswith("sskv-") and s.tls == TlsSettings()


def test_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", "from-os-environ")
    monkeypatch.setenv("AIO_MQTT_USE_TLS", "false")
    s = ConnectionSettings.from_environment()
    assert (s.host, s.port, s.tls) == ("from-os-environ", 8883, None)
    # overrides replace what the environment says
    assert ConnectionSettings.from_environment(connect_timeout=2.5, client_id="x").connect_timeout == 2.5


BAD_VALUES = [
    ({"AIO_BROKER_HOSTNAME": ""}, "AIO_BROKER_HOSTNAME"),
    ({"AIO_BROKER_HOSTNAME": "   "}, "AIO_BROKER_HOSTNAME"),
    ({"AIO_BROKER_TCP_PORT": "88x3"}, "AIO_BROKER_TCP_PORT"),
    ({"AIO_BROKER_TCP_PORT": "0"}, "AIO_BROKER_TCP_PORT"),
    ({"AIO_BROKER_TCP_PORT": "65536"}, "AIO_BROKER_TCP_PORT"),
    ({"AIO_BROKER_TCP_PORT": "1883.0"}, "AIO_BROKER_TCP_PORT"),
    ({"AIO_MQTT_USE_TLS": "yes"}, "AIO_MQTT_USE_TLS"),
    ({"AIO_MQTT_USE_TLS": "1"}, "AIO_MQTT_USE_TLS"),
    ({"AIO_MQTT_CLEAN_START": "nope"}, "AIO_MQTT_CLEAN_START"),
    ({"AIO_MQTT_KEEP_ALIVE": "-1"}, "AIO_MQTT_KEEP_ALIVE"),
    ({"AIO_MQTT_KEEP_ALIVE": "65536"}, "AIO_MQTT_KEEP_ALIVE"),
    ({"AIO_MQTT_KEEP_ALIVE": "PT60S"}, "AIO_MQTT_KEEP_ALIVE"),
    ({"AIO_MQTT_SESSION_EXPIRY": "-5"}, "AIO_MQTT_SESSION_EXPIRY"),
    ({"AIO_MQTT_SESSION_EXPIRY": "4294967296"}, "AIO_MQTT_SESSION_EXPIRY"),
    ({"AIO_MQTT_SESSION_EXPIRY": "1h"}, "AIO_MQTT_SESSION_EXPIRY"),
    ({"AIO_MQTT_CLIENT_ID": "a:b"}, "AIO_MQTT_CLIENT_ID"),
    ({"AIO_TLS_CA_FILE": "/no/such/ca.pem"}, "AIO_TLS_CA_FILE"),
    ({"AIO_TLS_CERT_FILE": "/no/such/cert.pem", "AIO_TLS_KEY_FILE": "/no/such/key"}, "AIO_TLS_CERT_FILE"),
    ({"AIO_SAT_FILE": "/no/such/token"}, "AIO_SAT_FILE"),
    ({"AIO_MQTT_USERNAME": "u", "AIO_MQTT_PASSWORD_FILE": "/no/such/password"}, "AIO_MQTT_PASSWORD_FILE"),
]


@pytest.mark.parametrize(("values", "variable"), BAD_VALUES, ids=[f"{v}={list(d.values())[-1]}" for d, v in BAD_VALUES])
def test_a_bad_value_names_its_variable(values: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        ConnectionSettings.from_environment(env(**values))


def test_a_missing_hostname_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="AIO_BROKER_HOSTNAME is required"):
        ConnectionSettings.from_environment({})


def test_settings_that_do_not_go_together(files: dict[str, str]) -> None:
    cases = [
        (env(AIO_TLS_CERT_FILE=files["cert"]), "AIO_TLS_CERT_FILE and AIO_TLS_KEY_FILE go together"),
        (env(AIO_TLS_KEY_FILE=files["key"]), "AIO_TLS_CERT_FILE and AIO_TLS_KEY_FILE go together"),
        (env(AIO_TLS_KEY_PASSWORD_FILE=files["keypass"]), "AIO_TLS_KEY_PASSWORD_FILE needs AIO_TLS_KEY_FILE"),
        (env(AIO_MQTT_PASSWORD_FILE=files["password"]), "AIO_MQTT_PASSWORD_FILE needs AIO_MQTT_USERNAME"),
        (
            env(AIO_MQTT_USERNAME="u", AIO_MQTT_PASSWORD_FILE=files["password"], AIO_SAT_FILE=files["sat"]),
            "AIO_SAT_FILE or AIO_MQTT_PASSWORD_FILE, not both",
        ),
        (env(AIO_MQTT_USE_TLS="false", AIO_TLS_CA_FILE=files["ca"]), "AIO_TLS_CA_FILE given with AIO_MQTT_USE_TLS"),
    ]
    for values, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            ConnectionSettings.from_environment(values)


def test_a_bad_password_file_value_is_not_quoted(tmp_path: Path) -> None:
    """The error names the variable and the path, never the file's content."""
    secret = tmp_path / "pw"
    secret.write_bytes(b"\xff\xfe-not-utf8-secret")
    with pytest.raises(ConfigurationError, match="AIO_MQTT_PASSWORD_FILE") as caught:
        ConnectionSettings.from_environment(env(AIO_MQTT_USERNAME="u", AIO_MQTT_PASSWORD_FILE=str(secret)))
    assert "secret" not in str(caught.value).replace(str(secret), "")


def test_the_session_settings_reach_the_connect() -> None:
    """AIO_MQTT_CLEAN_START / AIO_MQTT_SESSION_EXPIRY are what the CONNECT says (they were read and ignored)."""
    for values, flags, expiry in (
        (env(), 0x00, 3600),
        (env(AIO_MQTT_CLEAN_START="true", AIO_MQTT_SESSION_EXPIRY="60"), 0x02, 60),
        (env(AIO_MQTT_SESSION_EXPIRY="0"), 0x00, None),
    ):
        s = ConnectionSettings.from_environment(values)
        session: MqttSession[None] = MqttSession()
        packet = session.connect_packet(s.client_id, clean_start=s.clean_start, session_expiry=s.session_expiry)
        [(_, body)] = packets.PacketSplitter().feed(packet)
        assert body[7] == flags
        props, _ = packets._properties(body, 10)
        assert props.get(0x11) == expiry


def test_clean_start_and_session_expiry_are_validated_in_code_too() -> None:
    for bad in ({"clean_start": "false"}, {"session_expiry": -1}, {"session_expiry": 2**32}, {"session_expiry": 1.5}):
        with pytest.raises(ConfigurationError):
            ConnectionSettings(**bad)
    plain = ConnectionSettings()
    assert (plain.clean_start, plain.session_expiry) == (False, 3600)  # the SDKs' persistent session


# -- connection strings -------------------------------------------------------------------------------------------


def test_the_sdks_example_connection_string() -> None:
    s = ConnectionSettings.from_connection_string("HostName=aio-broker;TcpPort=1883;UseTls=false")
    assert (s.host, s.port, s.tls, s.keepalive, s.clean_start, s.session_expiry) == (
        "aio-broker",
        1883,
        None,
        60,
        False,
        3600,
    )


def test_a_connection_string_with_every_key(files: dict[str, str]) -> None:
    text = (
        f"hostname=broker.example; TcpPort=8884;UseTls=true;CaFile={files['ca']};CertFile={files['cert']};"
        f"KeyFile={files['key']};KeyPasswordFile={files['keypass']};Username=bob;PasswordFile={files['password']};"
        "ClientId=cs-client;KeepAlive=15;CleanStart=true;SessionExpiry=0;"
    )
    s = ConnectionSettings.from_connection_string(text)
    assert (s.host, s.port, s.client_id, s.keepalive, s.username, s.password) == (
        "broker.example",
        8884,
        "cs-client",
        15,
        "bob",
        "s3cret",
    )
    assert s.tls is not None and s.tls.ca_file == files["ca"] and s.tls.key_password == "key pass phrase"
    sat = ConnectionSettings.from_connection_string(f"HostName=h;SatAuthFile={files['sat']}")
    assert sat.sat_token_file == files["sat"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("HostName=h;TcpPort=abc", "TcpPort"),
        ("HostName=h;UseTls=maybe", "UseTls"),
        ("HostName=h;KeepAlive=-3", "KeepAlive"),
        ("HostName=h;Colour=blue", "unknown setting 'Colour'"),
        ("HostName=h;TcpPort", "unknown setting 'TcpPort'"),  # no '='
        ("HostName=h;HostName=g", "HostName given twice"),
        ("TcpPort=1883;UseTls=false", "HostName"),
        ("HostName=h;CaFile=/no/such/file", "CaFile"),
    ],
)
def test_a_bad_connection_string_names_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ConnectionSettings.from_connection_string(text)


def test_from_url_takes_a_connection_string_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    s = ConnectionSettings.from_url("HostName=aio-broker;TcpPort=1883;UseTls=false", client_id="over")
    assert (s.host, s.port, s.tls, s.client_id) == ("aio-broker", 1883, None, "over")
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", "env-broker")
    assert ConnectionSettings.from_url("env:").host == "env-broker"
    # a URL is still a URL (a '=' in a password does not make it a connection string)
    assert ConnectionSettings.from_url("mqtt://u:p=q@127.0.0.1:1884").password == "p=q"
