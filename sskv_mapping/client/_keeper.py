"""The connection of one client and its life -- connect, the state listeners, the
supervisor that notices a drop and reconnects with backoff, and waiting for a usable connection.

The client keeps its connection alive here, whatever the transport: on a drop, :class:`ConnectionKeeper`
reports it (``on_drop``: fail what is in flight, mark the watches lost), reconnects with jittered exponential
backoff, re-subscribes, and reports it back (``on_reconnect``: restore the watches). Each connection is a
fresh :class:`~sskv_mapping._transport.base.Connection`; none is reused.

Must not import aiomqtt/paho, nor the layers above the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Sequence

from .._transport.backoff import Backoff
from .._transport.base import Connection
from ..errors import ClientStateError, ConnectionLostError, StateStoreError, TransportError

__all__ = ["ConnectionKeeper", "ConnectionState", "StateListener"]

log = logging.getLogger("sskv_mapping.client")


class ConnectionState(enum.Enum):
    """Where a client's connection is: its ``state`` property and ``add_state_listener`` callbacks."""

    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"


StateListener = Callable[[ConnectionState], None]


class ConnectionKeeper:
    """One client's connection: made by ``new_connection``, subscribed to ``subscriptions``, kept alive."""

    def __init__(
        self,
        new_connection: Callable[[], Connection],
        subscriptions: Sequence[str],
        *,
        url: str,
        reconnect: bool,
        backoff: Callable[[], Backoff],
        on_drop: Callable[[], None],
        on_reconnect: Callable[[], None],
        name: str,
    ) -> None:
        self._new_connection = new_connection
        self._subscriptions = list(subscriptions)
        self._url = url
        self._reconnect = reconnect
        self._backoff = backoff
        self._on_drop = on_drop
        self._on_reconnect = on_reconnect
        self._name = name
        self.conn: Connection | None = None
        self._connected_evt: asyncio.Event | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._state = ConnectionState.DISCONNECTED
        self._listeners: list[StateListener] = []
        #: reconnects done
        self.reconnects = 0

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state is ConnectionState.CONNECTED

    def add_listener(self, listener: StateListener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _set_state(self, state: ConnectionState) -> None:
        if state is self._state:
            return
        self._state = state
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.exception("state listener failed")

    async def _open(self) -> Connection:
        conn = self._new_connection()
        await conn.connect()
        try:
            # Responses and notifications in one SUBSCRIBE, acknowledged before the first request.
            await conn.subscribe(self._subscriptions, qos=1)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def connect(self) -> None:
        """Connect; raises :class:`BrokerConnectError` if the broker cannot be reached or refuses us."""
        if self._state is ConnectionState.CLOSED:
            raise ClientStateError("this client was closed; create a new one")
        if self._supervisor is not None:
            raise ClientStateError("already connected")
        loop = asyncio.get_running_loop()
        self._connected_evt = asyncio.Event()
        self._set_state(ConnectionState.CONNECTING)
        try:
            conn = await self._open()
        except BaseException:
            self._set_state(ConnectionState.DISCONNECTED)
            raise
        self.conn = conn
        self._connected_evt.set()
        self._set_state(ConnectionState.CONNECTED)
        self._supervisor = loop.create_task(self._supervise(conn), name=f"sskv-supervisor-{self._name}")

    async def close(self, detached: Callable[[], None]) -> None:
        """Stop supervising and disconnect: the state becomes CLOSED first (listeners hear it first), then
        ``detached()`` runs once no connection is current (fail what is in flight), then the broker is told."""
        self._set_state(ConnectionState.CLOSED)
        sup, self._supervisor = self._supervisor, None
        if sup is not None:
            sup.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sup
        conn, self.conn = self.conn, None
        detached()
        if conn is not None:
            await conn.close()

    def abandon(self) -> None:
        """In a forked child: forget the parent's connection without a word to the broker (its socket is the
        parent's) and stay CLOSED, so a call raises :class:`ClientStateError`. The listeners are not told: they
        would act on the parent's event loop."""
        self.conn = None
        self._supervisor = None
        self._state = ConnectionState.CLOSED

    def wake(self) -> None:
        """Wake everyone waiting in :meth:`connection` (they see the state, e.g. CLOSED)."""
        if self._connected_evt is not None:
            self._connected_evt.set()

    async def _supervise(self, conn: Connection) -> None:
        while True:
            try:
                await conn.wait_closed()
                return  # closed on purpose
            except TransportError as exc:
                log.warning("connection to %s lost: %s", self._url, exc)
            assert self._connected_evt is not None
            self._connected_evt.clear()
            self.conn = None
            self._on_drop()
            with contextlib.suppress(Exception):
                await conn.close()
            if not self._reconnect:
                self._set_state(ConnectionState.DISCONNECTED)
                self._connected_evt.set()  # wake waiters: they see DISCONNECTED and fail
                return
            self._set_state(ConnectionState.RECONNECTING)
            conn = await self._reconnect_with_backoff()
            self.conn = conn
            self.reconnects += 1
            self._connected_evt.set()
            self._set_state(ConnectionState.CONNECTED)
            self._on_reconnect()

    async def _reconnect_with_backoff(self) -> Connection:
        backoff = self._backoff()
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = await self._open()
                log.info("reconnected to %s after %d attempt(s)", self._url, attempt)
                return conn
            except StateStoreError as exc:
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
            await asyncio.sleep(backoff.next())  # jittered: a crowd of clients does not come back in lock step

    async def connection(self, timeout: float | None) -> Connection:
        """The connection, waiting up to ``timeout`` while it is being re-established."""
        if self._state is ConnectionState.CLOSED:
            raise ClientStateError("this client was closed")
        conn = self.conn
        if conn is not None and self._state is ConnectionState.CONNECTED:
            return conn
        if self._connected_evt is None:
            raise ClientStateError("not connected: call connect() or use 'async with'")
        try:
            async with asyncio.timeout(timeout):
                while True:
                    # the event is set while connected (and on close/give-up), cleared while reconnecting
                    state = self.state  # not self._state: mypy would keep the narrowing from above
                    if state is ConnectionState.CLOSED:
                        raise ClientStateError("this client was closed")
                    if state is ConnectionState.DISCONNECTED:
                        raise ConnectionLostError(f"disconnected from {self._url} (reconnect is off)")
                    conn = self.conn
                    if conn is not None and state is ConnectionState.CONNECTED:
                        return conn
                    await self._connected_evt.wait()
        except TimeoutError:
            raise ConnectionLostError(f"not connected to {self._url} (reconnecting)") from None
