"""How to reach and authenticate to a broker: the one place a URL, ``env:`` or options become settings.

The client, every face's ``connect()``, the adapters and the ``sskv`` command all call :func:`settings_from_options`;
secrets never appear in ``repr`` (docs/reference/connection.md).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from .._fork import generation
from ..errors import ConfigurationError
from . import iot_operations_config

__all__ = [
    "CONNECTION_OPTIONS",
    "DEFAULT_URL",
    "ENV_LOCATION",
    "MAX_PACKET_SIZE",
    "MIN_PACKET_SIZE",
    "URL_QUERY_OPTIONS",
    "Broker",
    "ConnectionSettings",
    "TlsSettings",
    "generate_client_id",
    "settings_for",
    "settings_from_options",
]

#: MQTT's largest packet: a Remaining Length of 268,435,455 bytes plus a five-byte fixed header.
MAX_PACKET_SIZE = 268_435_460
#: The smallest Maximum Packet Size we accept to declare: room for a response with a short value.
MIN_PACKET_SIZE = 1024

log = logging.getLogger("sskv_mapping.transport")

#: The location that means "from the ``AIO_*`` environment variables" wherever a broker URL is accepted.
ENV_LOCATION = "env:"

#: Where to connect when nothing says: a broker (the emulator's stack) on this machine's default port. The one
#: definition: the faces' ``connect()``, the framework adapters (their public ``DEFAULT_URL``) and the CLI.
DEFAULT_URL = "mqtt://127.0.0.1:1883"


def generate_client_id() -> str:
    return f"sskv-{uuid.uuid4().hex[:16]}"


#: What :func:`generate_client_id` makes (a settings object's id that nobody chose).
_GENERATED_ID = re.compile(r"sskv-[0-9a-f]{16}")
#: Characters a client id may not hold: it is a level of the response topic, a topic name (MQTT 5
#: [MQTT-3.3.2-14]: no wildcard in a Response Topic; [MQTT-4.7.3-2]: no U+0000); ':' splits an HLC.
_NOT_IN_CLIENT_ID = {"+": "a '+' (an MQTT wildcard)", "#": "a '#' (an MQTT wildcard)", "\x00": "a NUL character"}


def _check_client_id(client_id: object) -> None:
    if not isinstance(client_id, str) or not client_id:
        raise ConfigurationError(f"client_id must be a non-empty string, not {client_id!r:.80}")
    if ":" in client_id:
        raise ConfigurationError("client_id may not contain ':' (it is an HLC node id)")
    for char, what in _NOT_IN_CLIENT_ID.items():
        if char in client_id:
            raise ConfigurationError(
                f"client_id {client_id!r:.80} holds {what}: it is part of the response topic, where MQTT forbids "
                "it; choose an id of letters, digits, '-' and '_'"
            )
    if len(client_id.encode()) > 65535:
        raise ConfigurationError("client_id is too long")


def _text(name: str, raw: str) -> str:
    return raw


def _whole(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
            raise ConfigurationError(f"broker URL option {name} must be a whole number in {low}..{high}")
        return int(raw)

    return parse


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ConfigurationError(f"broker URL option {name} must be a positive number of seconds")
    return value


def _flag(name: str, raw: str) -> bool:
    value = {"true": True, "1": True, "false": False, "0": False}.get(raw.lower())
    if value is None:
        raise ConfigurationError(f"broker URL option {name} must be true or false")
    return value


#: The query options a broker URL may carry (``mqtt://host:1883?client_id=app-1&keepalive=30``): query name ->
#: (the :class:`ConnectionSettings` field it sets, the parser that checks its text). Each is documented in the
#: guide's URL table. One line per option; any other name is refused by name.
URL_QUERY_OPTIONS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "client_id": ("client_id", _text),
    "keepalive": ("keepalive", _whole(0, 65535)),
    "connect_timeout": ("connect_timeout", _seconds),
    "receive_maximum": ("receive_maximum", _whole(1, 65535)),
    "sat_token_file": ("sat_token_file", _text),
    "clean_start": ("clean_start", _flag),
    "session_expiry": ("session_expiry", _whole(0, 0xFFFFFFFF)),
}

#: Names that look like options but are not the URL's to give: why, said in the error.
_REFUSED_QUERY = {
    "timeout": "the request timeout is the client's: pass timeout= to the client or connect()",
    "username": "put the user name before the host: mqtt://user:password@host",
    "password": "put the password before the host: mqtt://user:password@host",
    "host": "the host is the URL's own",
    "port": "the port is the URL's own",
    "tls": "use mqtts:// for TLS",
}


def url_query_options(query: str) -> dict[str, object]:
    """The :class:`ConnectionSettings` fields a broker URL's query sets (:data:`URL_QUERY_OPTIONS`).

    An unknown, repeated or empty option raises :class:`ConfigurationError` naming it (never quoting its value,
    which may be a secret pasted in the wrong place).
    """
    fields: dict[str, object] = {}
    seen: set[str] = set()
    for part in query.split("&") if query else ():
        name, sep, raw = part.partition("=")
        name = unquote(name)
        if name in _REFUSED_QUERY:
            raise ConfigurationError(f"broker URL option {name!r} is not taken: {_REFUSED_QUERY[name]}")
        if name in URL_QUERY_OPTIONS and not (sep and raw):
            raise ConfigurationError(f"broker URL option {name} has no value")
        if not sep:
            # a bare word, not an option: maybe a secret pasted in the wrong place, so not quoted back
            raise ConfigurationError("the broker URL's query has a part without '=': options are name=value")
        if name not in URL_QUERY_OPTIONS:
            known = ", ".join(sorted(URL_QUERY_OPTIONS))
            shown = repr(name) if name.isidentifier() and len(name) <= 40 else "(not shown)"
            raise ConfigurationError(f"unknown broker URL option {shown} (the URL takes: {known})")
        if name in seen:
            raise ConfigurationError(f"broker URL option {name} is given twice")
        seen.add(name)
        value = unquote(raw)
        field_name, parse = URL_QUERY_OPTIONS[name]
        fields[field_name] = parse(name, value)
    return fields


@dataclass(frozen=True)
class TlsSettings:
    """TLS for the broker connection.

    ``ca_file``: CA bundle to verify the broker (system store when ``None``). ``cert_file``/``key_file``:
    an X.509 client certificate. ``verify=False`` accepts any server certificate — only for tests.
    ``server_hostname``: the name the broker's certificate must carry (and the SNI sent) when it is not the
    host dialled, e.g. ``aio-broker`` through a ``kubectl port-forward`` to ``127.0.0.1``.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify: bool = True
    server_hostname: str | None = None


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the broker is and who we are.

    Example:
        >>> s = ConnectionSettings.from_url("mqtt://user:secret@127.0.0.1:1883")
        >>> (s.host, s.port, s.username)
        ('127.0.0.1', 1883, 'user')
        >>> "secret" in repr(s)
        False
    """

    host: str = "127.0.0.1"
    port: int = 1883
    client_id: str = field(default_factory=generate_client_id)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = None
    #: MQTT 5 enhanced authentication, method ``K8S-SAT``: the token file is re-read on every connect, and the
    #: connection re-authenticates (MQTT 5 AUTH) when it changes and before the presented token expires.
    sat_token_file: str | None = None
    keepalive: int = 60
    connect_timeout: float = 10.0
    #: what we declare in CONNECT as our Receive Maximum: QoS 1 PUBLISHes the broker may send us unacknowledged
    #: (responses and notifications; each is acknowledged as soon as it is read). 1..65535.
    receive_maximum: int = 256
    #: what we declare in CONNECT as our Maximum Packet Size (whole packets, fixed header included): the broker
    #: never sends us a larger one, and one that comes anyway is a protocol error that drops the connection as
    #: soon as its header is read. The default is MQTT's own ceiling: a GET must be able to return the largest
    #: value a client could set (up to the client's ``max_payload``, 255 MiB by default, plus the headers).
    max_inbound_packet_size: int = MAX_PACKET_SIZE
    #: Put the current OpenTelemetry span's ``traceparent``/``tracestate`` on each request as MQTT 5 user
    #: properties (no documented effect on the service, docs/design/protocol.md §10). Only when OpenTelemetry is
    #: on; the ``SSKV_OTEL_PROPAGATION=0`` environment variable turns it off too (docs/observability.md).
    trace_context: bool = True
    #: K8S-SAT from a callable instead of a file (a token that lives elsewhere): called, on the event loop (it
    #: must not block), for each CONNECT and when a re-authentication is due; returns the current token.
    sat_token_provider: Callable[[], str | bytes] | None = None
    #: How often (seconds) the token file is read for a rotated token (more often for a token that lives less
    #: than 8 of these); a JWT's source is also read a margin before its ``exp``. See ``_transport/sat.py``.
    sat_poll_interval: float = 5.0
    #: CleanStart of the first CONNECT (``AIO_MQTT_CLEAN_START``): False, as the Azure IoT Operations SDKs
    #: connect, resumes a session the broker kept for this client id. Every reconnect asks for the session
    #: (CleanStart=0) whatever this says.
    clean_start: bool = False
    #: How long (seconds, 0..2**32-1) the broker keeps the session after a connection ends
    #: (``AIO_MQTT_SESSION_EXPIRY``): the requests in flight at a network blip are sent again and answered
    #: after the reconnect. 0: the session ends with each connection and a blip fails the calls in flight.
    #: ``close()`` always ends the session (DISCONNECT with Session Expiry 0).
    session_expiry: int = 3600

    def __post_init__(self) -> None:
        _check_client_id(self.client_id)
        object.__setattr__(self, "_made_in", generation())  # in which process (sskv_mapping/_fork.py)
        if not (0 < self.port < 65536):
            raise ConfigurationError(f"port out of range: {self.port}")
        if self.keepalive < 0 or self.connect_timeout <= 0:
            raise ConfigurationError("keepalive must be >= 0 and connect_timeout > 0")
        if isinstance(self.receive_maximum, bool) or not isinstance(self.receive_maximum, int):
            raise ConfigurationError(f"receive_maximum must be an int, not {self.receive_maximum!r}")
        if not 0 < self.receive_maximum <= 65535:
            raise ConfigurationError(f"receive_maximum must be 1..65535, not {self.receive_maximum}")
        size = self.max_inbound_packet_size
        if isinstance(size, bool) or not isinstance(size, int) or not MIN_PACKET_SIZE <= size <= MAX_PACKET_SIZE:
            raise ConfigurationError(
                f"max_inbound_packet_size must be an int in {MIN_PACKET_SIZE}..{MAX_PACKET_SIZE}, not {size!r}"
            )
        if self.password is not None and self.username is None:
            raise ConfigurationError("a password needs a username")
        if self.sat_token_provider is not None and (
            self.sat_token_file is not None or not callable(self.sat_token_provider)
        ):
            raise ConfigurationError("sat_token_provider must be a callable, and not given with sat_token_file")
        poll = self.sat_poll_interval
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not (poll > 0 and math.isfinite(poll)):
            raise ConfigurationError(f"sat_poll_interval must be a positive number of seconds, not {poll!r:.40}")
        if not isinstance(self.clean_start, bool):
            raise ConfigurationError(f"clean_start must be True or False, not {self.clean_start!r}")
        if isinstance(self.session_expiry, bool) or not isinstance(self.session_expiry, int):
            raise ConfigurationError(f"session_expiry must be whole seconds, not {self.session_expiry!r}")
        if not 0 <= self.session_expiry <= 0xFFFFFFFF:
            raise ConfigurationError(f"session_expiry must be between 0 and 4294967295, not {self.session_expiry}")

    def for_this_process(self) -> ConnectionSettings:
        """These settings, or, when they were made in a parent process before ``os.fork()`` with a generated
        client id, a copy with a new generated id: two processes never share one MQTT session (each would take
        it over from the other). A client id somebody chose is kept: giving it to two processes is theirs."""
        if getattr(self, "_made_in", 0) == generation() or not _GENERATED_ID.fullmatch(self.client_id):
            return self
        fresh = self.replace(client_id=generate_client_id())
        log.debug(
            "process %d, forked: client id %s instead of the parent's %s", os.getpid(), fresh.client_id, self.client_id
        )
        return fresh

    def replace(self, **changes: object) -> ConnectionSettings:
        """A copy with ``changes`` applied (and checked like the original)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ConnectionSettings:
        """Settings from the ``AIO_*`` environment variables (``os.environ`` unless ``environ`` is given), as the
        Azure IoT Operations SDKs read them, with their defaults:

        - ``AIO_BROKER_HOSTNAME``: the broker's host (required)
        - ``AIO_BROKER_TCP_PORT``: port, default 8883
        - ``AIO_MQTT_USE_TLS``: ``true`` (default) or ``false``
        - ``AIO_TLS_CA_FILE``: CA bundle (PEM) to verify the broker (default: the system's)
        - ``AIO_TLS_CERT_FILE``, ``AIO_TLS_KEY_FILE``: an X.509 client certificate (PEM) and its key, together
        - ``AIO_TLS_KEY_PASSWORD_FILE``: a file holding the key's pass phrase (read now)
        - ``AIO_SAT_FILE``: K8S-SAT token file (re-read at each connect)
        - ``AIO_MQTT_USERNAME``: user name
        - ``AIO_MQTT_PASSWORD_FILE``: a file holding the password (read now; one trailing line break dropped)
        - ``AIO_MQTT_CLIENT_ID``: client id (default, also when empty: a generated ``sskv-...`` id)
        - ``AIO_MQTT_KEEP_ALIVE``: keepalive seconds, default 60
        - ``AIO_MQTT_CLEAN_START`` (default ``false``) and ``AIO_MQTT_SESSION_EXPIRY`` (default 3600): the
          session (see the fields ``clean_start`` and ``session_expiry``)

        A variable set to the empty string counts as unset. A bad value raises :class:`ConfigurationError`
        naming the variable. ``overrides`` replace fields afterwards (e.g. ``connect_timeout``).

        Example:
            >>> s = ConnectionSettings.from_environment(
            ...     {"AIO_BROKER_HOSTNAME": "aio-broker", "AIO_BROKER_TCP_PORT": "1883", "AIO_MQTT_USE_TLS": "false"}
            ... )
            >>> (s.host, s.port, s.tls, s.keepalive)
            ('aio-broker', 1883, None, 60)
        """
        return cls._from_iot_operations(iot_operations_config.from_environment(environ), overrides)

    @classmethod
    def from_connection_string(cls, text: str, **overrides: object) -> ConnectionSettings:
        """Settings from a connection string in the SDKs' format, the same names as their table (see
        :meth:`from_environment`): ``HostName=aio-broker;TcpPort=1883;UseTls=false``, also ``CaFile``,
        ``CertFile``, ``KeyFile``, ``KeyPasswordFile``, ``SatAuthFile``, ``Username``, ``PasswordFile``,
        ``ClientId``, ``KeepAlive``, ``CleanStart``, ``SessionExpiry``. Keys are case-insensitive; an unknown
        key or a bad value raises :class:`ConfigurationError` naming it.

        Example:
            >>> s = ConnectionSettings.from_connection_string("HostName=aio-broker;TcpPort=1883;UseTls=false")
            >>> (s.host, s.port, s.tls)
            ('aio-broker', 1883, None)
        """
        return cls._from_iot_operations(iot_operations_config.from_connection_string(text), overrides)

    @classmethod
    def _from_iot_operations(cls, kwargs: dict[str, Any], overrides: Mapping[str, object]) -> ConnectionSettings:
        tls = kwargs.pop("tls", None)
        if tls is not None:
            kwargs["tls"] = TlsSettings(**tls)
        kwargs.update(overrides)
        return cls(**kwargs)

    @classmethod
    def from_url(cls, url: str, **overrides: object) -> ConnectionSettings:
        """``mqtt://[user[:password]@]host[:port][?option=value&...]`` or ``mqtts://...`` (TLS, port 8883 by
        default); the query options are :data:`URL_QUERY_OPTIONS` (any other is refused by name), and a URL
        without a host, with port 0, or with a path is a :class:`ConfigurationError`; ``overrides`` replace what
        the URL says. Also a
        connection string (``HostName=aio-broker;TcpPort=1883;UseTls=false``, :meth:`from_connection_string`)
        or ``"env:"`` (the ``AIO_*`` variables, :meth:`from_environment`), so that every place that takes a
        broker URL takes those too."""
        if not isinstance(url, str):
            raise ConfigurationError(f"a broker URL is a string, not {type(url).__name__}")
        if url.strip() == ENV_LOCATION:
            return cls.from_environment(None, **overrides)
        if iot_operations_config.is_connection_string(url):
            return cls.from_connection_string(url, **overrides)
        if "://" not in url:
            # not quoted back: a string without a scheme may be a password pasted in the wrong place
            raise ConfigurationError(
                "a broker URL looks like mqtt://host:port (mqtts:// for TLS); this one has no scheme"
            )
        try:
            parts = urlsplit(url)
        except ValueError:
            # an unclosed '[' of an IPv6 host ("Invalid IPv6 URL"); not quoted back: the URL may carry a password
            raise ConfigurationError(
                "malformed broker URL (an IPv6 host is written in brackets: mqtt://[::1]:1883)"
            ) from None
        if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
            raise ConfigurationError(f"unsupported broker URL scheme {parts.scheme!r} (use mqtt:// or mqtts://)")
        secure = parts.scheme in ("mqtts", "ssl")
        try:
            port = parts.port
        except ValueError:
            # Not quoting the bad "port": with an unescaped / ? # in the password it is a piece of the password.
            raise ConfigurationError(
                "bad port in broker URL (percent-encode '/', '?', '#' and '@' in a user name or password)"
            ) from None
        # A URL means what it says: no host, or port 0, is a mistake, not "127.0.0.1:1883" (which may be another
        # store on this machine). The URL is never quoted back: it may carry a password.
        if not parts.hostname:
            raise ConfigurationError("the broker URL names no host (say mqtt://127.0.0.1:1883 for this machine)")
        if port == 0:
            raise ConfigurationError("the broker URL's port is 0 (leave the port out for 1883, 8883 with TLS)")
        if parts.path not in ("", "/") or parts.fragment:
            raise ConfigurationError("a broker URL has no path or #fragment: mqtt://host:port[?option=value...]")
        kwargs: dict[str, object] = {
            "host": parts.hostname,
            "port": port if port is not None else (8883 if secure else 1883),
        }
        if parts.username:
            kwargs["username"] = unquote(parts.username)
        if parts.password:
            kwargs["password"] = unquote(parts.password)
        if secure:
            kwargs["tls"] = TlsSettings()
        kwargs.update(url_query_options(parts.query))
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        """The broker address without credentials (safe to log)."""
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"


#: How every face says where to connect: a broker URL (``mqtt://``, ``mqtts://``), an Azure IoT Operations
#: connection string, ``"env:"`` (the ``AIO_*`` variables), or a complete :class:`ConnectionSettings`.
Broker = str | ConnectionSettings

#: The connection options (the fields of :class:`ConnectionSettings` besides host and port) that the clients'
#: constructors, every face's ``connect()``, every framework adapter and the CLI accept.
CONNECTION_OPTIONS: tuple[str, ...] = (
    "client_id",
    "username",
    "password",
    "tls",
    "sat_token_file",
    "keepalive",
    "connect_timeout",
    "trace_context",
    "clean_start",
    "session_expiry",
    "sat_token_provider",
    "sat_poll_interval",
)
_CONNECTION_KEYS = frozenset(CONNECTION_OPTIONS)
_TLS_FIELDS = frozenset(f.name for f in dataclasses.fields(TlsSettings))


def settings_from_options(
    location: Broker, options: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> ConnectionSettings:
    """The one path from "where to connect" to :class:`ConnectionSettings`: the clients, every face's
    ``connect()`` (through :func:`settings_for`), every framework adapter and the CLI end here.

    ``location``: a broker URL, a connection string or ``"env:"`` (:meth:`ConnectionSettings.from_url`; ``"env:"``
    reads ``environ`` when given, else ``os.environ``), or a :class:`ConnectionSettings`, taken whole. ``options``
    (names from :data:`CONNECTION_OPTIONS`; ``None`` means not given) apply on top. ``tls`` is a
    :class:`TlsSettings`, taken whole, or a dict of its fields, applied over the TLS the location says (TLS on
    with the defaults when it says none). Any other name, or a dict field ``TlsSettings`` does not have, is a
    :class:`ConfigurationError` naming it.
    """
    unknown = sorted(set(options) - _CONNECTION_KEYS)
    if unknown:
        raise ConfigurationError(f"not connection options: {unknown} (they are: {', '.join(CONNECTION_OPTIONS)})")
    given = {name: value for name, value in options.items() if value is not None}
    tls = given.pop("tls", None)
    if isinstance(location, ConnectionSettings):
        settings = location.replace(**given) if given else location
    elif isinstance(location, str):
        if environ is not None and location.strip() == ENV_LOCATION:
            settings = ConnectionSettings.from_environment(environ, **given)
        else:
            settings = ConnectionSettings.from_url(location, **given)
    else:
        raise ConfigurationError(
            f"connect to a broker URL (str) or a ConnectionSettings, not {type(location).__name__}"
        )
    return settings if tls is None else settings.replace(tls=_tls_over(settings.tls, tls))


def _tls_over(base: TlsSettings | None, tls: object) -> TlsSettings:
    if isinstance(tls, TlsSettings):
        return tls
    if isinstance(tls, Mapping):
        unknown = sorted(set(tls) - _TLS_FIELDS)
        if unknown:
            raise ConfigurationError(f"tls options not known to TlsSettings: {unknown}")
        return dataclasses.replace(base or TlsSettings(), **tls)
    raise ConfigurationError(f"tls must be a TlsSettings or a dict of its fields, not {type(tls).__name__}")


def settings_for(broker: Broker, kwargs: dict[str, Any]) -> ConnectionSettings:
    """:func:`settings_from_options` for a call's keyword arguments (every face's ``connect()``, the clients'
    ``from_url()``): the connection options are popped out of ``kwargs`` (in place) and apply on top of
    ``broker``; what is left is for the client (``timeout``, ``reconnect``...)."""
    for stray in ("host", "port", "settings"):
        if stray in kwargs:
            raise ConfigurationError(
                f"{stray}= is not a connect() option: say where to connect with a URL such as"
                f" {DEFAULT_URL!r} or a ConnectionSettings, as the first argument"
            )
    return settings_from_options(broker, pop_connection_options(kwargs))


def pop_connection_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The :data:`CONNECTION_OPTIONS` found in ``kwargs``, popped out of it."""
    return {name: kwargs.pop(name) for name in list(kwargs) if name in _CONNECTION_KEYS}
