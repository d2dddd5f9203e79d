"""An in-process stand-in for an MQTT broker, for fast hermetic unit tests (never instead of the real broker).

Design: docs/design/transport.md, "The session core and the other transports".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from .._protocol.mqtt_publish import OutgoingMessage, message_size
from ..errors import BrokerConnectError, ClientStateError, ConnectionLostError, ValueTooLargeError
from .base import Connection, InboundMessage, MessageHandler
from .settings import ConnectionSettings

__all__ = ["LoopbackBroker", "LoopbackConnection", "topic_matches"]


def topic_matches(filter_: str, topic: str) -> bool:
    """MQTT topic filter matching (``+`` one level, ``#`` the rest; ``$`` topics need a ``$`` filter)."""
    if topic.startswith("$") and not filter_.startswith("$"):
        return False
    f_parts = filter_.split("/")
    t_parts = topic.split("/")
    for i, part in enumerate(f_parts):
        if part == "#":
            return True
        if i >= len(t_parts):
            return False
        if part != "+" and part != t_parts[i]:
            return False
    return len(f_parts) == len(t_parts)


class LoopbackBroker:
    """An in-process broker. ``broker.connection`` is a ``ConnectionFactory``."""

    def __init__(self) -> None:
        self._sessions: dict[str, LoopbackConnection] = {}
        self.published = 0
        self.refuse_connections = False
        #: a broker's Maximum Packet Size (None: none), as its connections report it and enforce it
        self.max_packet_size: int | None = None

    def connection(self, settings: ConnectionSettings, on_message: MessageHandler) -> LoopbackConnection:
        return LoopbackConnection(self, settings, on_message)

    @property
    def clients(self) -> list[str]:
        return list(self._sessions)

    def _log(self, level: str, text: str) -> None:
        self.route(OutgoingMessage(f"$SYS/broker/log/{level}", f"{int(time.time())}: {text}".encode()))

    def attach(self, conn: LoopbackConnection) -> None:
        if self.refuse_connections:
            raise BrokerConnectError("the loopback broker refuses connections (test switch)")
        cid = conn.client_id
        old = self._sessions.get(cid)
        if old is not None:
            self._log("E", f"Client {cid} already connected, closing old connection.")
            old.lose("session taken over")
        self._sessions[cid] = conn
        self._log("N", f"New client connected from 127.0.0.1:0 as {cid} (p5, c1, k60).")

    def detach(self, conn: LoopbackConnection, clean: bool) -> None:
        if self._sessions.get(conn.client_id) is conn:
            del self._sessions[conn.client_id]
            word = "disconnected" if clean else "closed its connection"
            self._log("N", f"Client {conn.client_id} {word}.")

    def route(self, message: OutgoingMessage) -> None:
        self.published += 1
        topic, payload = message.topic, bytes(message.payload)
        for conn in list(self._sessions.values()):
            if conn.subscribed_to(topic):
                conn.deliver(
                    InboundMessage(
                        topic=topic,
                        payload=payload,
                        qos=1,
                        correlation_data=message.correlation_data,
                        response_topic=message.response_topic,
                        user_properties=tuple(message.user_properties),
                        content_type=message.content_type,
                        message_expiry=message.message_expiry,
                    )
                )


class LoopbackConnection:
    """A :class:`~sskv_mapping._transport.base.Connection` to a :class:`LoopbackBroker`."""

    def __init__(self, broker: LoopbackBroker, settings: ConnectionSettings, on_message: MessageHandler) -> None:
        self.broker = broker
        self.settings = settings
        self._on_message = on_message
        self._filters: set[str] = set()
        self._closed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def connected(self) -> bool:
        return self._closed is not None and not self._closed.done()

    @property
    def max_packet_size(self) -> int | None:
        """The loopback broker's ``max_packet_size`` (None: no limit, the default), applied as a broker's
        CONNACK Maximum Packet Size is: a publish whose MQTT packet would be larger raises
        :class:`~sskv_mapping.errors.ValueTooLargeError`."""
        return self.broker.max_packet_size

    def _check_size(self, message: OutgoingMessage) -> None:
        limit = self.broker.max_packet_size
        if limit is None:
            return
        size = message_size(message)
        if size > limit:
            raise ValueTooLargeError(
                f"the packet would be {size:,} bytes, more than the broker's Maximum Packet Size ({limit:,})",
                size=size,
                limit=limit,
            )

    @property
    def session_present(self) -> bool:
        """Always False: the loopback broker keeps no session beyond its connection."""
        return False

    @property
    def keeps_session(self) -> bool:
        """False: nothing outlives a loopback connection (the calls in flight at a drop fail)."""
        return False

    @property
    def closed_by_broker(self) -> bool:
        """False: a loopback connection is dropped, never closed by its broker."""
        return False

    def carry_over(self, previous: Connection) -> None:
        """A reconnect; nothing to take over (see :attr:`keeps_session`)."""

    async def connect(self) -> None:
        if self._closed is not None:
            raise ClientStateError("LoopbackConnection.connect() may be called once")
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()
        try:
            self.broker.attach(self)
        except BaseException:
            self._closed.set_result(None)
            raise

    def _require(self) -> None:
        if not self.connected:
            raise ConnectionLostError("not connected to the loopback broker")

    async def subscribe(self, filters: Iterable[str], qos: int = 1, timeout: float = 10.0) -> None:
        self._require()
        self._filters.update(filters)

    async def unsubscribe(self, filters: Iterable[str], timeout: float = 10.0) -> None:
        self._require()
        self._filters.difference_update(filters)

    async def publish(self, message: OutgoingMessage, *, timeout: float = 10.0) -> None:
        """Route ``message`` at once."""
        self._require()
        if self.broker.max_packet_size is not None:
            self._check_size(message)
        self.broker.route(message)

    def publish_nowait(self, message: OutgoingMessage, *, refusal: asyncio.Future[Any] | None = None) -> None:
        """Route at once, as :meth:`publish` does; ``refusal`` is never failed (nothing here refuses)."""
        self._require()
        if self.broker.max_packet_size is not None:
            self._check_size(message)
        self.broker.route(message)

    def subscribed_to(self, topic: str) -> bool:
        """Whether one of this connection's filters matches ``topic``."""
        return any(topic_matches(f, topic) for f in self._filters)

    def deliver(self, message: InboundMessage) -> None:
        assert self._loop is not None
        self._loop.call_soon(self._dispatch, message)

    def _dispatch(self, message: InboundMessage) -> None:
        if self.connected:
            self._on_message(message)

    def lose(self, reason: str) -> None:
        if self._closed is not None and not self._closed.done():
            self._closed.set_exception(ConnectionLostError(f"loopback connection lost: {reason}"))

    def drop(self) -> None:
        """Simulate a network failure: the broker forgets us and ``wait_closed`` raises."""
        self.broker.detach(self, clean=False)
        self.lose("dropped")

    async def wait_closed(self) -> None:
        if self._closed is None:
            raise ClientStateError("not connected")
        await asyncio.shield(self._closed)

    async def close(self, *, end_session: bool = True) -> None:
        self.broker.detach(self, clean=True)
        if self._closed is not None:
            if not self._closed.done():
                self._closed.set_result(None)
            else:
                self._closed.exception()  # retrieved: a drop before close() is no longer news
