"""Layer 2 (transport), pure part: how to reach and authenticate to a broker.

Must not import aiomqtt/paho (only the ``_transport/mqtt/`` package does) nor anything above ``_transport``.
Secrets never appear in ``repr``.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError

__all__ = ["MAX_PACKET_SIZE", "MIN_PACKET_SIZE", "ConnectionSettings", "TlsSettings", "generate_client_id"]

#: MQTT's largest packet: a Remaining Length of 268,435,455 bytes plus a five-byte fixed header.
MAX_PACKET_SIZE = 268_435_460
#: The smallest Maximum Packet Size we accept to declare: room for a response with a short value.
MIN_PACKET_SIZE = 1024


def generate_client_id(prefix: str = "sskv") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


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
    #: MQTT 5 enhanced authentication, method ``K8S-SAT``: the token file is re-read on every connect.
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

    def __post_init__(self) -> None:
        if not self.client_id or ":" in self.client_id:
            raise ConfigurationError("client_id must be non-empty and may not contain ':' (it is an HLC node id)")
        if len(self.client_id.encode()) > 65535:
            raise ConfigurationError("client_id is too long")
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

    def replace(self, **changes: object) -> ConnectionSettings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_url(cls, url: str, **overrides: object) -> ConnectionSettings:
        """``mqtt://[user[:password]@]host[:port]`` or ``mqtts://...`` (TLS, port 8883 by default)."""
        parts = urlsplit(url)
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
        kwargs: dict[str, object] = {
            "host": parts.hostname or "127.0.0.1",
            "port": port or (8883 if secure else 1883),
        }
        if parts.username:
            kwargs["username"] = unquote(parts.username)
        if parts.password:
            kwargs["password"] = unquote(parts.password)
        if secure:
            kwargs["tls"] = TlsSettings()
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        """The broker address without credentials (safe to log)."""
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"
