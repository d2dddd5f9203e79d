"""Passwords, key passwords and K8S-SAT tokens never show in ``repr``/``str``, exception messages or logs.

Log records are captured at DEBUG for the whole stack (paho logs through the transport's logger), and the
search covers each record's formatted message, its arguments and any traceback it carries, and for an
exception its message, ``repr``, the chain of causes and the formatted traceback.
"""

from __future__ import annotations

import logging
import secrets
import traceback
from collections.abc import Iterable
from pathlib import Path

import pytest

from sskv_mapping import BrokerConnectError, ConfigurationError
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient, TlsSettings
from sskv_mapping.emulator.broker import MosquittoBroker

from ._fake_mqtt import FakeMqttBroker
from .conftest import PASSWORD, USERNAME, SecureBroker


def secret(label: str) -> str:
    return f"{label}-{secrets.token_hex(8)}"


def exception_texts(exc: BaseException) -> list[str]:
    """What a traceback printer or an error reporter shows: the chain as ``traceback`` walks it (a context
    hidden by ``raise ... from None`` is not shown, so it may keep details)."""
    texts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen), *(repr(arg) for arg in seen.args)]
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return texts


def record_texts(records: Iterable[logging.LogRecord]) -> list[str]:
    texts = []
    for record in records:
        texts.append(record.getMessage())
        texts.append(repr(record.args))
        if record.exc_info and record.exc_info[1] is not None:
            texts += exception_texts(record.exc_info[1])
    return texts


def assert_absent(secret_value: str | bytes, texts: Iterable[str]) -> None:
    needle = secret_value.decode() if isinstance(secret_value, bytes) else secret_value
    for text in texts:
        assert needle not in text, f"a secret leaked into: {text[:300]!r}"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


# -- repr and str -------------------------------------------------------------------------------------------


def test_settings_repr_and_str_hide_the_password_and_key_password(tmp_path: Path) -> None:
    password, key_password = secret("pw"), secret("keypw")
    tls = TlsSettings(ca_file="ca.pem", cert_file="c.pem", key_file="k.pem", key_password=key_password)
    settings = ConnectionSettings(username="alice", password=password, tls=tls, sat_token_file=str(tmp_path / "t"))
    texts = [repr(settings), str(settings), repr(tls), str(tls), settings.url, repr(settings.replace(port=1))]
    assert_absent(password, texts)
    assert_absent(key_password, texts)
    assert "alice" in repr(settings)  # the user name is not a secret: it helps debugging


def test_settings_from_url_hide_the_password() -> None:
    password = secret("pw")
    settings = ConnectionSettings.from_url(f"mqtts://alice:{password}@127.0.0.1:8883")
    assert settings.password == password
    assert_absent(password, [repr(settings), str(settings), settings.url])


@pytest.mark.parametrize("special", ["/", "?", "#"])
def test_url_errors_do_not_quote_the_password(special: str) -> None:
    """An unescaped ``/``, ``?`` or ``#`` in the password ends the URL's authority early: the part before it
    is then taken for a port. The error must say what is wrong without quoting that part."""
    head, tail = secret("head"), secret("tail")
    with pytest.raises(ConfigurationError) as info:
        ConnectionSettings.from_url(f"mqtt://alice:{head}{special}{tail}@127.0.0.1:1883")
    assert_absent(head, exception_texts(info.value))
    assert_absent(tail, exception_texts(info.value))


def test_client_reprs_hide_credentials(tmp_path: Path) -> None:
    password, key_password = secret("pw"), secret("keypw")
    tls = TlsSettings(key_password=key_password)
    clients: list[object] = [
        AsyncStateStoreClient(username="alice", password=password, tls=tls),
        AsyncStateStoreClient.from_url(f"mqtts://alice:{password}@127.0.0.1:8883"),
        StateStoreClient(username="alice", password=password, tls=tls),
        PahoConnection(ConnectionSettings(username="alice", password=password, tls=tls), lambda m: None),
    ]
    texts = [text for c in clients for text in (repr(c), str(c))]
    assert_absent(password, texts)
    assert_absent(key_password, texts)


# -- connect failures ---------------------------------------------------------------------------------------


@pytest.mark.broker
async def test_wrong_password_appears_in_no_log_record_nor_error(
    secured: SecureBroker, debug_logs: pytest.LogCaptureFixture
) -> None:
    wrong = secret("wrong-pw")
    client = AsyncStateStoreClient(
        secured.host, secured.password_port, username=USERNAME, password=wrong, tls=secured.tls(), timeout=5
    )
    with pytest.raises(BrokerConnectError) as info:
        await client.connect()
    await client.close()
    assert debug_logs.records, "nothing was logged at DEBUG: the capture does not see the transport"
    for value in (wrong, PASSWORD):
        assert_absent(value, exception_texts(info.value))
        assert_absent(value, record_texts(debug_logs.records))
        assert_absent(value, [debug_logs.text])


@pytest.mark.broker
async def test_right_password_appears_in_no_log_record(
    secured: SecureBroker, debug_logs: pytest.LogCaptureFixture
) -> None:
    async with AsyncStateStoreClient(
        secured.host, secured.password_port, username=USERNAME, password=PASSWORD, tls=secured.tls(), timeout=5
    ) as client:
        await client.set("secrets-probe", b"x")
        assert_absent(PASSWORD, [repr(client), str(client)])
    assert any("CONNECT" in r.getMessage() for r in debug_logs.records), "the CONNECT was not logged at all"
    assert_absent(PASSWORD, record_texts(debug_logs.records))


async def test_sat_token_appears_in_no_log_record_on_success_and_reconnect(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    first, second = secret("sat-first"), secret("sat-second")
    token_file = tmp_path / "token"
    token_file.write_text(first)
    async with (
        FakeMqttBroker() as fake,
        AsyncStateStoreClient("127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2) as client,
    ):
        token_file.write_text(second)
        fake.drop_all()
        connects = await fake.wait_for_connects(2)
        assert [c.auth_data for c in connects] == [first.encode(), second.encode()]
        assert_absent(first, [repr(client), repr(client.settings)])
    assert any("CONNECT" in r.getMessage() for r in debug_logs.records), "the CONNECT was not logged at all"
    assert_absent(first, record_texts(debug_logs.records))
    assert_absent(second, record_texts(debug_logs.records))


async def test_sat_token_refused_appears_in_no_log_record_nor_error(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    token = secret("sat-refused")
    token_file = tmp_path / "token"
    token_file.write_text(token)
    async with FakeMqttBroker(connack_reason=0x87) as fake:
        client = AsyncStateStoreClient("127.0.0.1", fake.port, sat_token_file=str(token_file), timeout=2)
        with pytest.raises(BrokerConnectError) as info:
            await client.connect()
        await client.close()
    assert_absent(token, exception_texts(info.value))
    assert_absent(token, record_texts(debug_logs.records))


async def test_sat_token_refused_by_mosquitto_appears_in_no_log_record_nor_error(
    mosquitto: MosquittoBroker, tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    """mosquitto without an auth plugin answers CONNACK 0x8C (bad authentication method)."""
    token = secret("sat-mosquitto")
    token_file = tmp_path / "token"
    token_file.write_text(token)
    client = AsyncStateStoreClient(mosquitto.host, mosquitto.port, sat_token_file=str(token_file), timeout=2)
    with pytest.raises(BrokerConnectError, match=r"(?i)authentication method") as info:
        await client.connect()
    await client.close()
    assert_absent(token, exception_texts(info.value))
    assert_absent(token, record_texts(debug_logs.records))
