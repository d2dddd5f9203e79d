"""The shape every connection has: the :class:`Connection` Protocol the client is written against.

Its implementations: ``stream.py`` (the default), ``paho.py`` (the paho transport) and ``loopback.py`` (in-process).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .._protocol.mqtt_publish import InboundMessage, OutgoingMessage
from .settings import ConnectionSettings

__all__ = [
    "Connection",
    "ConnectionFactory",
    "InboundMessage",
    "MessageHandler",
    "OutgoingMessage",
]

MessageHandler = Callable[[InboundMessage], None]


class Connection(Protocol):
    """One connection to a broker. Not reusable: after it closes or drops, make a new one."""

    settings: ConnectionSettings

    @property
    def connected(self) -> bool:
        """Whether the connection is up (CONNACK received, not closed or dropped since)."""

    @property
    def max_packet_size(self) -> int | None:
        """The broker's Maximum Packet Size from CONNACK (whole packets, fixed header included); None when the
        broker stated none, or before CONNACK. A publish whose packet would be larger raises
        :class:`~sskv_mapping.errors.ValueTooLargeError` before anything is sent; the connection stays up."""
        ...

    @property
    def session_present(self) -> bool:
        """Whether the broker resumed a session it kept for our client id (CONNACK session present)."""
        ...

    @property
    def keeps_session(self) -> bool:
        """Whether the publishes in flight at a drop survive it: the next connection (:meth:`carry_over`) sends
        again what was not acknowledged when the broker kept the session, so the calls waiting for their
        responses keep waiting. False: the calls in flight at a drop fail with ``ConnectionLostError``."""
        ...

    @property
    def closed_by_broker(self) -> bool:
        """Whether the broker ended the connection without a word (a clean TCP close, no DISCONNECT): what an
        MQTT 5 broker that does not send 0x8E (mosquitto 2.0.11) does to the older of two connections with one
        client id. False where the transport cannot tell."""
        ...

    def carry_over(self, previous: Connection) -> None:
        """Before :meth:`connect`: this connection follows ``previous`` (dropped, or whose connect failed): it
        asks for the broker's session (CleanStart=0) and, where :attr:`keeps_session`, takes over the publishes
        ``previous`` had not seen acknowledged, to send them again (DUP=1) when the broker resumes the session,
        or fail them with ``SessionLostError`` when it does not."""

    async def connect(self) -> None:
        """Open the connection (TCP, TLS, CONNECT/CONNACK); a refusal raises ``BrokerConnectError``
        (``CredentialsRefusedError`` for refused credentials, ``SessionTakenOverError`` for 0x8E)."""

    async def subscribe(self, filters: Iterable[str], qos: int = 1, timeout: float = 10.0) -> None:
        """Subscribe to ``filters`` and wait for the SUBACK."""

    async def unsubscribe(self, filters: Iterable[str], timeout: float = 10.0) -> None:
        """Unsubscribe from ``filters`` and wait for the UNSUBACK."""

    async def publish(self, message: OutgoingMessage, *, timeout: float = 10.0) -> None:
        """Publish ``message`` and, at QoS 1, wait for the PUBACK.

        Raises :class:`~sskv_mapping.errors.ValueTooLargeError` (nothing sent) when the packet is over
        :attr:`max_packet_size`. While the transport's write buffer is over its high-water mark (the socket
        does not take more), waits for it to drain -- within ``timeout``, after which
        :class:`~sskv_mapping.errors.RequestTimeoutError` (nothing sent).
        """
        ...

    def publish_nowait(self, message: OutgoingMessage, *, refusal: asyncio.Future[Any] | None = None) -> None:
        """Queue ``message``, in call order, and return at once: nobody waits for its PUBACK.

        Raises :class:`~sskv_mapping.errors.ConnectionLostError` when not connected,
        :class:`~sskv_mapping.errors.ValueTooLargeError` when the packet is over :attr:`max_packet_size`, and
        :class:`~sskv_mapping.errors.WriteBufferFullError` (nothing sent) when the transport's write buffer is
        at its hard bound (the broker stopped reading): it never waits, and never grows the buffer without
        limit. A broker that refuses
        the message (a PUBACK reason code >= 0x80, or 0x10 "no matching subscribers") fails ``refusal``
        when given; a connection without acknowledgements (the loopback) never does.
        """
        ...

    async def wait_closed(self) -> None:
        """Return once the connection has closed; raise ``ConnectionLostError`` if it dropped
        (``SessionTakenOverError`` when the broker said another connection took our session)."""

    async def close(self, *, end_session: bool = True) -> None:
        """Disconnect and release the socket; calls in flight fail with ``ConnectionLostError``.
        ``end_session``: the DISCONNECT tells the broker to free the session now (Session Expiry 0)."""


#: How a client makes its connection: ``factory(settings, on_message) -> Connection`` (the transport plug point).
ConnectionFactory = Callable[[ConnectionSettings, MessageHandler], Connection]
