"""A broker URL means what it says (issue 27, point 3): a URL with no host, port 0, a path or an unknown query
option is a ``ConfigurationError`` (it used to connect to 127.0.0.1:1883, maybe another store); every query option
of the table (``URL_QUERY_OPTIONS``) is applied, checked, and documented; a password is never quoted back.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from sskv_mapping import AsyncStateStoreClient, ConfigurationError, ConnectionState
from sskv_mapping._transport.settings import URL_QUERY_OPTIONS, ConnectionSettings
from tests._support.miniclient import MiniClient
from tests._support.waiting import eventually

DOCS = Path(__file__).resolve().parents[2] / "docs" / "guide" / "client.md"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mqtt://", "no host"),
        ("mqtts://", "no host"),
        ("mqtt://:0", "no host"),
        ("mqtt://:1883", "no host"),
        ("mqtt://user:hunter2@:1883", "no host"),
        ("mqtt://host:0", "port is 0"),
        ("mqtts://host:0", "port is 0"),
        ("mqtt://host:1883/store", "no path"),
        ("mqtt://host:1883#frag", "no path"),
        ("mqtt://host:70000", "bad port"),
        ("mqtt://[::1", "IPv6 host is written in brackets"),
        ("mqtt://user:pw@[::1:1883", "IPv6 host is written in brackets"),
        ("mqtt://host?timeout=0", "'timeout' is not taken"),
        ("mqtt://host?timeout=5", "'timeout' is not taken"),
        ("mqtt://host?bogus=1", "unknown broker URL option 'bogus'"),
        ("mqtt://host?tls=true", "use mqtts://"),
        ("mqtt://host?client_id=", "client_id has no value"),
        ("mqtt://host?client_id", "client_id has no value"),
        ("mqtt://host?client_id=a&client_id=b", "given twice"),
        ("mqtt://host?client_id=a:b", "may not contain ':'"),
        ("mqtt://host?keepalive=-1", "keepalive must be a whole number"),
        ("mqtt://host?keepalive=ten", "keepalive must be a whole number"),
        ("mqtt://host?keepalive=65536", "keepalive must be a whole number"),
        ("mqtt://host?connect_timeout=0", "connect_timeout must be a positive number"),
        ("mqtt://host?connect_timeout=nan", "connect_timeout must be a positive number"),
        ("mqtt://host?connect_timeout=inf", "connect_timeout must be a positive number"),
        ("mqtt://host?receive_maximum=0", "receive_maximum must be a whole number"),
    ],
)
def test_a_url_that_cannot_mean_what_it_says_is_a_configuration_error(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says)):
        ConnectionSettings.from_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "mqtt://user:hunter2@:0",
        "mqtt://user:hunter2@host:0",
        "mqtt://user:hunter2@host/path",
        "mqtt://host?password=hunter2",
        "mqtt://host?hunter2",  # a bare word is no option: not quoted
        "mqtt://host?x=hunter2&x=hunter2",
        "mqtt://user:hunter2@host?connect_timeout=hunter2",
        "mqtt://user:hunter2@[::1",
    ],
)
def test_no_error_quotes_the_password_back(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ConnectionSettings.from_url(url)
    assert "hunter2" not in str(caught.value)


#: an example value for each query option, and the field value it must give
EXAMPLES: dict[str, tuple[str, object]] = {
    "client_id": ("from-the-url", "from-the-url"),
    "keepalive": ("25", 25),
    "connect_timeout": ("2.5", 2.5),
    "receive_maximum": ("64", 64),
    "sat_token_file": ("/var/run/token", "/var/run/token"),
    "clean_start": ("true", True),
    "session_expiry": ("0", 0),
}


def test_every_query_option_has_an_example_here_and_a_row_in_the_docs() -> None:
    assert set(EXAMPLES) == set(URL_QUERY_OPTIONS)
    page = DOCS.read_text(encoding="utf-8")
    for name in URL_QUERY_OPTIONS:
        assert f"| `{name}` |" in page, f"docs/guide/client.md has no row for the URL option {name}"


@pytest.mark.parametrize("name", sorted(URL_QUERY_OPTIONS))
def test_each_query_option_is_applied_to_its_field(name: str) -> None:
    raw, expected = EXAMPLES[name]
    field, _ = URL_QUERY_OPTIONS[name]
    settings = ConnectionSettings.from_url(f"mqtt://broker.example:1884?{name}={raw}")
    assert getattr(settings, field) == expected
    assert (settings.host, settings.port) == ("broker.example", 1884)
    default = ConnectionSettings.from_url("mqtt://broker.example:1884")
    assert getattr(default, field) != expected  # the example differs from the default: the option did it


def test_options_combine_and_keyword_overrides_win() -> None:
    s = ConnectionSettings.from_url("mqtts://u:p%40ss@h?client_id=c1&keepalive=5&connect_timeout=1")
    assert (s.host, s.port, s.username, s.password, s.client_id, s.keepalive, s.connect_timeout) == (
        "h",
        8883,
        "u",
        "p@ss",
        "c1",
        5,
        1.0,
    )
    assert s.tls is not None
    assert ConnectionSettings.from_url("mqtt://h?client_id=c1", client_id="c2").client_id == "c2"
    assert ConnectionSettings.from_url("mqtt://h/").port == 1883  # a bare "/" is no path
    assert ConnectionSettings.from_url("mqtt://h?client_id=a%2Fb").client_id == "a/b"  # percent-decoded


async def test_the_client_id_from_the_url_is_the_one_the_broker_sees(broker_address: tuple[str, int]) -> None:
    """The broker knows a connection by its client id: a second connection with the URL's id takes the first one's
    place (MQTT session takeover), which it would not do for any other id."""
    host, port = broker_address
    client_id = "url-given-id-7f3a"
    client = AsyncStateStoreClient.from_url(f"mqtt://{host}:{port}?client_id={client_id}", reconnect=False)
    assert client.client_id == client_id
    await client.connect()
    try:
        await client.set("url-option-probe", b"1")  # the emulator answers on the URL's client id's topic
        assert (await client.get("url-option-probe")) is not None
        async with MiniClient(host, port, client_id="some-other-id"):
            await asyncio.sleep(0)  # a connection with another id leaves ours alone...
            assert client.state is ConnectionState.CONNECTED
        async with MiniClient(host, port, client_id=client_id):
            await eventually(lambda: client.state is ConnectionState.DISCONNECTED, timeout=10)  # ...this one not
    finally:
        await client.close()
