"""TLS, username/password and X.509 client authentication against a real mosquitto + the emulator."""

from __future__ import annotations

import uuid

import pytest

from sskv_mapping import BrokerConnectError, KeyOperation, PublishRefusedError
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState, TlsSettings

from .conftest import DENIED_PASSWORD, DENIED_USERNAME, PASSWORD, USERNAME, SecureBroker

pytestmark = pytest.mark.broker


async def round_trip(client: AsyncStateStoreClient) -> None:
    """SET/GET, a watch that sees a SET and a DELETE, through this client's listener."""
    key = f"sec-{uuid.uuid4().hex[:10]}"
    assert (await client.set(key, b"one")).applied
    assert (entry := await client.get(key)) is not None and entry.value == b"one"
    async with client.watch(key) as changes:
        await client.set(key, b"two")
        event = await changes.next(5)
        assert (event.op, event.value) == (KeyOperation.SET, b"two")
        assert await client.delete(key) is True
        event = await changes.next(5)
        assert event.op is KeyOperation.DELETE
    assert await client.get(key) is None


async def refused(client: AsyncStateStoreClient) -> BrokerConnectError:
    """Connecting raises BrokerConnectError because of the refusal (not a connect timeout), leaving the client
    disconnected with nothing sent."""
    with pytest.raises(BrokerConnectError) as info:
        await client.connect()
    assert not isinstance(info.value.__cause__, TimeoutError), f"refusal surfaced only as a timeout: {info.value}"
    assert client.state is ConnectionState.DISCONNECTED
    assert client.requests_sent == 0
    return info.value


async def test_tls_with_username_and_password(secured: SecureBroker) -> None:
    async with AsyncStateStoreClient(
        secured.host, secured.password_port, username=USERNAME, password=PASSWORD, tls=secured.tls(), timeout=5
    ) as client:
        assert client.settings.url.startswith("mqtts://")
        await round_trip(client)


async def test_tls_url_with_credentials(secured: SecureBroker) -> None:
    """``mqtts://user:password@host:port`` (percent-encoded) reaches the same listener."""
    url = f"mqtts://{USERNAME}:{PASSWORD}@{secured.host}:{secured.password_port}"
    async with AsyncStateStoreClient.from_url(url, tls=secured.tls(), timeout=5) as client:
        assert (client.settings.username, client.settings.password) == (USERNAME, PASSWORD)
        await round_trip(client)


async def test_x509_client_certificate(secured: SecureBroker) -> None:
    async with AsyncStateStoreClient(
        secured.host, secured.x509_port, tls=secured.client_cert_tls(), timeout=5
    ) as client:
        await round_trip(client)


async def test_password_and_x509_clients_see_each_other(secured: SecureBroker) -> None:
    """Both listeners reach the same store: a write through one is a notification through the other."""
    key = f"sec-{uuid.uuid4().hex[:10]}"
    async with (
        AsyncStateStoreClient(
            secured.host, secured.password_port, username=USERNAME, password=PASSWORD, tls=secured.tls(), timeout=5
        ) as by_password,
        AsyncStateStoreClient(secured.host, secured.x509_port, tls=secured.client_cert_tls(), timeout=5) as by_cert,
        by_password.watch(key) as changes,
    ):
        await by_cert.set(key, b"from x509")
        event = await changes.next(5)
        assert (event.op, event.value) == (KeyOperation.SET, b"from x509")
        await by_cert.delete(key)


@pytest.mark.parametrize(
    ("username", "password"),
    [
        pytest.param(USERNAME, "wrong-" + PASSWORD, id="wrong-password"),
        pytest.param(USERNAME, "", id="empty-password"),
        pytest.param("nobody", PASSWORD, id="unknown-user"),
        pytest.param(None, None, id="anonymous"),
    ],
)
async def test_bad_credentials_are_refused_quickly(
    secured: SecureBroker, username: str | None, password: str | None
) -> None:
    client = AsyncStateStoreClient(
        secured.host, secured.password_port, username=username, password=password, tls=secured.tls(), timeout=5
    )
    error = await refused(client)
    assert "not authori" in str(error).lower()
    await client.close()


async def test_the_acl_keeps_an_authenticated_but_unauthorised_user_out(secured: SecureBroker) -> None:
    """mosquitto 2.0 takes the login and even grants the SUBSCRIBE, but refuses the user's requests with a
    PUBACK "Not authorized": each call fails at once with PublishRefusedError (a long request timeout proves
    it is not a timeout) and nothing reaches the store."""
    key = f"sec-{uuid.uuid4().hex[:10]}"
    async with (
        AsyncStateStoreClient(
            secured.host,
            secured.password_port,
            username=DENIED_USERNAME,
            password=DENIED_PASSWORD,
            tls=secured.tls(),
            timeout=120,
        ) as denied,
        AsyncStateStoreClient(secured.host, secured.x509_port, tls=secured.client_cert_tls(), timeout=5) as allowed,
    ):
        for call in (denied.set(key, b"should not be stored"), denied.get(key), denied.delete(key)):
            with pytest.raises(PublishRefusedError, match="Not authorized"):
                await call
        assert await allowed.get(key) is None
        assert denied.state is ConnectionState.CONNECTED  # a refused request does not end the connection


# The broker checks a client certificate after the TLS 1.3 handshake has completed on the client side, so
# the refusal is a connection closed before CONNACK (aiomqtt alone would wait for the connect timeout; the
# transport ends the attempt at once). A long connect timeout proves the refusal is not that timeout.
LONG_CONNECT_TIMEOUT = 120.0


def cert_refused_client(secured: SecureBroker, port: int, tls: TlsSettings | None) -> AsyncStateStoreClient:
    settings = ConnectionSettings(host=secured.host, port=port, tls=tls, connect_timeout=LONG_CONNECT_TIMEOUT)
    return AsyncStateStoreClient(settings=settings, timeout=5)


async def test_x509_listener_requires_a_client_certificate(secured: SecureBroker) -> None:
    client = cert_refused_client(secured, secured.x509_port, secured.tls())
    error = await refused(client)
    assert "before CONNACK" in str(error) or "alert" in str(error).lower(), error
    await client.close()


async def test_client_certificate_from_an_unknown_ca_is_refused(secured: SecureBroker) -> None:
    """A client certificate the broker's CA did not sign (here: the server certificate of the other CA)."""
    tls = secured.tls(cert_file=secured.pki.other_server.cert, key_file=secured.pki.other_server.key)
    client = cert_refused_client(secured, secured.x509_port, tls)
    error = await refused(client)
    assert "before CONNACK" in str(error) or "alert" in str(error).lower(), error
    await client.close()


@pytest.mark.parametrize(
    "tls",
    [
        pytest.param("other-ca", id="trusting-an-unrelated-ca"),
        pytest.param("system", id="trusting-the-system-store"),
    ],
)
async def test_server_certificate_from_an_unknown_ca_is_refused(secured: SecureBroker, tls: str) -> None:
    settings = TlsSettings(ca_file=secured.pki.other_ca) if tls == "other-ca" else TlsSettings()
    client = AsyncStateStoreClient(
        secured.host, secured.password_port, username=USERNAME, password=PASSWORD, tls=settings, timeout=5
    )
    error = await refused(client)
    assert "certificate verify failed" in str(error)
    await client.close()


async def test_verify_false_accepts_an_unknown_ca(secured: SecureBroker) -> None:
    """The escape hatch for tests: ``verify=False`` accepts the certificate the default refuses."""
    tls = TlsSettings(ca_file=secured.pki.other_ca, verify=False)
    async with AsyncStateStoreClient(
        secured.host, secured.password_port, username=USERNAME, password=PASSWORD, tls=tls, timeout=5
    ) as client:
        await round_trip(client)


async def test_hostname_mismatch_is_refused(secured: SecureBroker) -> None:
    """A certificate from the trusted CA, but for another host name than the one dialled (127.0.0.1)."""
    client = AsyncStateStoreClient(secured.host, secured.wrong_name_port, tls=secured.tls(), timeout=5)
    error = await refused(client)
    assert "mismatch" in str(error) or "doesn't match" in str(error)
    await client.close()
    # the control: the listener itself works once the name is not checked
    async with AsyncStateStoreClient(
        secured.host, secured.wrong_name_port, tls=secured.tls(verify=False), timeout=5
    ) as client:
        await round_trip(client)


async def test_server_hostname_names_the_certificate_when_it_is_not_the_host_dialled(secured: SecureBroker) -> None:
    """Dialling 127.0.0.1 (as through a port-forward) a broker whose certificate names another host: accepted
    with ``server_hostname`` set to that name, still refused with any other name."""
    tls = secured.tls(server_hostname="not-this-host.invalid")
    async with AsyncStateStoreClient(secured.host, secured.wrong_name_port, tls=tls, timeout=5) as client:
        await round_trip(client)
    client = AsyncStateStoreClient(
        secured.host, secured.wrong_name_port, tls=secured.tls(server_hostname="localhost"), timeout=5
    )
    error = await refused(client)
    assert "mismatch" in str(error) or "doesn't match" in str(error)
    await client.close()


async def test_plain_mqtt_to_a_tls_listener_fails_typed(secured: SecureBroker) -> None:
    """Forgetting ``tls=``: the TLS listener resets the connection (bounded by the connect timeout)."""
    client = cert_refused_client(secured, secured.password_port, None)
    error = await refused(client)
    assert "before CONNACK" in str(error) or "alert" in str(error).lower(), error
    await client.close()
