"""A connection to the loopback broker from another event loop (both hops FIFO, so deliveries keep their order)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from .._transport.base import (
    Connection,
    ConnectionFactory,
    InboundMessage,
    MessageHandler,
    OutgoingMessage,
)
from .._transport.settings import ConnectionSettings
from ..errors import ConnectionLostError

__all__ = ["LoopBridgeConnection", "bridged_factory"]

T = TypeVar("T")


def bridged_factory(factory: ConnectionFactory, loop: asyncio.AbstractEventLoop) -> ConnectionFactory:
    """A connection factory whose connections reach ``factory``'s (served on ``loop``) from any event loop."""

    def connection(settings: ConnectionSettings, on_message: MessageHandler) -> Connection:
        return LoopBridgeConnection(factory, loop, settings, on_message)

    return connection


class LoopBridgeConnection:
    """A :class:`~sskv_mapping.Connection` opened on one loop that talks to a connection living on another.

    On the store's own loop it calls straight through. The loopback broker never refuses a publish, so the
    ``refusal`` future of :meth:`publish_nowait` is never failed, as on the loopback itself.
    """

    def __init__(
        self,
        factory: ConnectionFactory,
        loop: asyncio.AbstractEventLoop,
        settings: ConnectionSettings,
        on_message: MessageHandler,
    ) -> None:
        self.settings = settings
        self._store_loop = loop
        self._on_message = on_message
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._inner = factory(settings, self._deliver)

    @property
    def connected(self) -> bool:
        """Whether the connection on the store's loop is up."""
        return self._inner.connected

    @property
    def max_packet_size(self) -> int | None:
        """The loopback broker's maximum packet size (``None``: no limit)."""
        return self._inner.max_packet_size

    @property
    def bridged(self) -> Connection:
        """The connection on the store's loop that this one talks to."""
        return self._inner

    @property
    def session_present(self) -> bool:
        """Whether the loopback broker kept a session (it never does: see the loopback connection)."""
        return self._inner.session_present

    @property
    def keeps_session(self) -> bool:
        """Whether anything outlives the connection (on the loopback, nothing)."""
        return self._inner.keeps_session

    @property
    def closed_by_broker(self) -> bool:
        """Whether the broker closed the connection (a loopback connection is only ever dropped)."""
        return self._inner.closed_by_broker

    def carry_over(self, previous: Connection) -> None:
        """A reconnect takes over its predecessor's session: passed on to the connection on the store's loop."""
        inner = previous.bridged if isinstance(previous, LoopBridgeConnection) else previous
        self._inner.carry_over(inner)

    def _direct(self) -> bool:
        return self._client_loop is self._store_loop

    def _deliver(self, message: InboundMessage) -> None:
        # on the store's loop: hand the message to the client's loop (in order: call_soon_threadsafe is FIFO)
        loop = self._client_loop
        if loop is None or loop is self._store_loop:
            self._on_message(message)
            return
        with contextlib.suppress(RuntimeError):  # the client's loop is closed: nobody is listening any more
            loop.call_soon_threadsafe(self._on_message, message)

    async def _there(self, call: Callable[[], Awaitable[T]]) -> T:
        if self._direct():
            return await call()

        async def run() -> T:
            return await call()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), self._store_loop))

    async def connect(self) -> None:
        """Open the loopback connection on the store's loop; messages come back to the calling loop."""
        self._client_loop = asyncio.get_running_loop()
        await self._there(self._inner.connect)

    async def subscribe(self, filters: Iterable[str], qos: int = 1, timeout: float = 10.0) -> None:
        """Subscribe on the store's loop."""
        listed = list(filters)
        await self._there(lambda: self._inner.subscribe(listed, qos, timeout))

    async def unsubscribe(self, filters: Iterable[str], timeout: float = 10.0) -> None:
        """Unsubscribe on the store's loop."""
        listed = list(filters)
        await self._there(lambda: self._inner.unsubscribe(listed, timeout))

    async def publish(self, message: OutgoingMessage, *, timeout: float = 10.0) -> None:
        """Publish on the store's loop."""
        sent = message
        await self._there(lambda: self._inner.publish(sent, timeout=timeout))

    def publish_nowait(self, message: OutgoingMessage, *, refusal: asyncio.Future[Any] | None = None) -> None:
        """Queue the publish on the store's loop (in call order) and return at once."""
        if not self._inner.connected:
            raise ConnectionLostError("not connected to the loopback broker")
        if self._direct():
            self._inner.publish_nowait(message)
            return
        if not isinstance(message.user_properties, tuple):  # the caller's list may change once we return
            message = dataclasses.replace(message, user_properties=tuple(message.user_properties))
        self._store_loop.call_soon_threadsafe(self._publish_there, message)

    def _publish_there(self, message: OutgoingMessage) -> None:
        with contextlib.suppress(ConnectionLostError):  # dropped meanwhile: the client sees the loss itself
            self._inner.publish_nowait(message)

    async def wait_closed(self) -> None:
        """Return once the loopback connection has closed or dropped."""
        await self._there(self._inner.wait_closed)

    async def close(self, *, end_session: bool = True) -> None:
        """Close the loopback connection on the store's loop (``end_session``: as the connection it bridges)."""
        await self._there(lambda: self._inner.close(end_session=end_session))
