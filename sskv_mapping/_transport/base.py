"""Layer 2 (transport), pure part: the shape every connection has.

:class:`~sskv_mapping._transport.mqtt.MqttConnection` (a real broker) and
:class:`~sskv_mapping._transport.loopback.LoopbackConnection` (the emulator core in-process, for fast unit
tests) both satisfy :class:`Connection`; the client is written against this Protocol only.
:class:`InboundMessage` is defined by the pure PUBLISH codec (``_protocol/mqtt_publish.py``) and re-exported
here.

Must not import aiomqtt/paho nor anything above ``_transport``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from .._protocol.mqtt_publish import InboundMessage
from .settings import ConnectionSettings

__all__ = ["Connection", "ConnectionFactory", "InboundMessage", "MessageHandler"]

MessageHandler = Callable[[InboundMessage], None]


class Connection(Protocol):
    """One connection to a broker. Not reusable: after it closes or drops, make a new one."""

    settings: ConnectionSettings

    @property
    def connected(self) -> bool: ...

    async def connect(self) -> None: ...

    async def subscribe(self, filters: Iterable[str], qos: int = 1, timeout: float = 10.0) -> None: ...

    async def unsubscribe(self, filters: Iterable[str], timeout: float = 10.0) -> None: ...

    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        correlation_data: bytes | None = None,
        response_topic: str | None = None,
        user_properties: Sequence[tuple[str, str]] = (),
        content_type: str | None = None,
        message_expiry: int | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Publish and, at QoS 1, wait for the PUBACK."""
        ...

    def publish_nowait(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        correlation_data: bytes | None = None,
        response_topic: str | None = None,
        user_properties: Sequence[tuple[str, str]] = (),
        content_type: str | None = None,
        message_expiry: int | None = None,
        refusal: asyncio.Future[Any] | None = None,
    ) -> None:
        """Queue a publish, in call order, and return at once: nobody waits for its PUBACK.

        Raises :class:`~sskv_mapping.errors.ConnectionLostError` when not connected. A broker that refuses
        the message (a PUBACK reason code >= 0x80, or 0x10 "no matching subscribers") fails ``refusal``
        when given; a connection without acknowledgements (the loopback) never does.
        """
        ...

    async def wait_closed(self) -> None: ...

    async def close(self) -> None: ...


ConnectionFactory = Callable[[ConnectionSettings, MessageHandler], Connection]
