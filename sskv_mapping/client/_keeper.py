"""The connection of one client and its life: connect, notice a drop, reconnect with backoff.

Design: docs/design/architecture.md, "The client's parts"; users: docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._transport.backoff import Backoff
from .._transport.base import Connection
from ..errors import (
    ClientStateError,
    ConnectionLostError,
    CredentialsRefusedError,
    SessionLostError,
    SessionTakenOverError,
    TransportError,
)

__all__ = ["ConnectionKeeper", "ConnectionState", "StateListener"]

log = logging.getLogger("sskv_mapping.client")

#: Consecutive reconnects refused for their credentials (a SAT file is re-read for each) before the client
#: stops: a token rotated a moment late heals on the next try; a revoked one does not.
CREDENTIAL_TRIES = 3
#: A broker that does not send 0x8E (mosquitto 2.0.11) closes the older of two connections with one client id
#: without a word. So does a network that closes connections (a proxy, a load balancer). This many connections in
#: a row closed so, each within TAKEOVER_LIFETIME seconds of its connect and each followed by a reconnect that found
#: the session kept, make a take-over *suspected*: said once per streak at WARNING, counted, heard by the state
#: listeners, and each further such close lengthens the wait before the next reconnect. Never acted on: only the
#: broker's word (0x8E) stops the client.
TAKEOVER_CLOSES = 3
TAKEOVER_LIFETIME = 10.0
#: The longest wait a suspected take-over adds before a reconnect. A network that closes connections cleanly looks
#: the same as a take-over, and must be back within 2 s of healing (issue 36's bar), so the lengthened wait stays
#: short: two processes that really share an id alternate about this often, the WARNING saying why.
TAKEOVER_WAIT_MAX = 1.5


class ConnectionState(enum.Enum):
    """Where a client's connection is: its ``state`` property and ``add_state_listener`` callbacks."""

    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    #: between RECONNECTING and CONNECTED when the broker no longer had the session: the calls in flight failed
    SESSION_LOST = "session lost"
    #: between a drop and RECONNECTING when the connection was closed without a word right after each of the last
    #: few connects: maybe another process uses this client id, maybe the network closes connections. The client
    #: goes on reconnecting, after a longer wait (``client.suspected_takeovers`` counts the streaks)
    TAKEOVER_SUSPECTED = "takeover suspected"
    #: the broker said, in a packet, that no reconnect will do (0x8E: session taken over by another connection;
    #: credentials refused on consecutive tries): the client stopped reconnecting and every call raises the error in
    #: ``client.failure``. Never entered on a guess
    FAILED = "failed"
    CLOSED = "closed"


StateListener = Callable[[ConnectionState], None]


class TakeoverSuspicion:
    """Streaks of connections closed without a word right after connecting (see :data:`TAKEOVER_CLOSES`): said once
    per streak at WARNING, counted, and a longer wait before each further reconnect of the streak. Never fatal."""

    def __init__(self, name: str, url: str) -> None:
        self._name = name
        self._url = url
        self._streak = 0  # connections in a row the broker closed without a word soon after connect
        self._connected_at = 0.0
        #: streaks that reached the bar, each said once at WARNING
        self.streaks = 0

    def connected(self, now: float) -> None:
        self._connected_at = now

    def silent(self, closed_by_broker: bool, now: float) -> bool:
        """Whether a drop at ``now`` is a close without a word soon after the connect."""
        return closed_by_broker and now - self._connected_at < TAKEOVER_LIFETIME

    def at_drop(self, silent: bool) -> bool:
        """Whether this drop extends a streak that reached the bar; the first such drop of a streak is said."""
        if not silent or self._streak < TAKEOVER_CLOSES - 1:
            return False
        if self._streak == TAKEOVER_CLOSES - 1:
            self.streaks += 1
            log.warning(
                "%s: the broker at %s closed the connection without a word right after each of the last %d "
                "connects. Either another process uses the client id %r (give each process its own client id), "
                "or the network between here and the broker closes connections. Reconnecting, after longer waits "
                "while it goes on",
                self._name,
                self._url,
                self._streak + 1,
                self._name,
            )
        return True

    def reconnected(self, extends: bool) -> None:
        """After a reconnect: ``extends`` when the drop was silent and the new connection found the session kept."""
        self._streak = self._streak + 1 if extends else 0

    def wait(self, backoff: Backoff) -> float:
        """The wait before the first reconnect after a suspected take-over: doubling with each close of the streak
        past the bar, up to the backoff's cap and :data:`TAKEOVER_WAIT_MAX`, with full jitter (two processes
        sharing an id drift apart)."""
        for _ in range(self._streak - TAKEOVER_CLOSES + 2):
            backoff.next()
        return random.random() * min(backoff.current, TAKEOVER_WAIT_MAX)


@dataclass(slots=True)
class _Dialer:
    """Where and how a keeper's connection is made: ``new_connection()``, subscribed to ``subscriptions``; after a
    drop, made again with backoff until one holds or the broker says that no retry heals."""

    new_connection: Callable[[], Connection]
    subscriptions: Sequence[str]
    url: str
    backoff: Callable[[], Backoff]

    async def open(self, conn: Connection) -> Connection:
        await conn.connect()
        try:
            # Responses and notifications in one SUBSCRIBE, acknowledged before the first request (a resumed
            # session has them already: SUBSCRIBE again is harmless, and covers a session the broker lost).
            await conn.subscribe(self.subscriptions, qos=1)
        except BaseException:
            await conn.close(end_session=False)
            raise
        return conn

    async def redial(self, previous: Connection, first_wait: float) -> Connection:
        """A new connection, subscribed, after ``first_wait`` seconds; each attempt takes over the session of the one
        before (``previous``, then the attempt that failed). Raises only what the broker said no retry heals (0x8E,
        credentials refused :data:`CREDENTIAL_TRIES` times in a row); anything else is tried again, for as long as
        the client is open."""
        backoff = self.backoff()
        attempt = refused = 0
        if first_wait > 0:
            await asyncio.sleep(first_wait)
        while True:
            attempt += 1
            conn = self.new_connection()
            conn.carry_over(previous)
            previous = conn
            try:
                await self.open(conn)
                log.info("reconnected to %s after %d attempt(s)", self.url, attempt)
                return conn
            except SessionTakenOverError:
                raise
            except CredentialsRefusedError as exc:
                refused += 1
                if refused >= CREDENTIAL_TRIES:
                    raise
                log.warning("reconnect attempt %d: credentials refused (%d of %d): %s", attempt, refused,
                            CREDENTIAL_TRIES, exc)  # fmt: skip
            except Exception as exc:  # a refused TCP connect, a reset, a TLS error, a timeout: try again
                refused = 0
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
            await asyncio.sleep(backoff.next())  # full jitter: a crowd of clients does not come back in lock step


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
        fail_calls: Callable[[BaseException], object] = lambda exc: None,
    ) -> None:
        self._dialer = _Dialer(new_connection, list(subscriptions), url, backoff)
        self._reconnect = reconnect
        self._on_drop = on_drop
        self._on_reconnect = on_reconnect
        self._fail_calls = fail_calls
        self._name = name
        self.conn: Connection | None = None
        self._connected_evt: asyncio.Event | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._state = ConnectionState.DISCONNECTED
        self._listeners: list[StateListener] = []
        #: reconnects done
        self.reconnects = 0
        #: reconnects that found the broker without our session (the calls in flight then failed)
        self.sessions_lost = 0
        #: why the client stopped for good (state FAILED), else None
        self.failure: TransportError | None = None
        self.suspicion = TakeoverSuspicion(name, url)

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

    def _fail(self, exc: TransportError) -> None:
        """Stop for good: FAILED, every caller (now and later) gets ``exc``."""
        log.error("%s: not reconnecting: %s", self._name, exc)
        self.failure = exc
        self._fail_calls(copy.copy(exc))
        self._set_state(ConnectionState.FAILED)
        if self._connected_evt is not None:
            self._connected_evt.set()  # wake waiters: they see FAILED

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise copy.copy(self.failure)

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
            conn = await self._dialer.open(self._dialer.new_connection())
        except BaseException:
            self._set_state(ConnectionState.DISCONNECTED)
            raise
        self.conn = conn
        self.suspicion.connected(loop.time())
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
            fatal: TransportError | None = None
            try:
                await conn.wait_closed()
                return  # closed on purpose
            except SessionTakenOverError as exc:
                fatal = exc  # the broker's own word (0x8E): the one take-over that stops the client
            except TransportError as exc:
                log.warning("connection to %s lost: %s", self._dialer.url, exc)
            silent = self.suspicion.silent(conn.closed_by_broker, asyncio.get_running_loop().time())
            suspected = fatal is None and self.suspicion.at_drop(silent)
            assert self._connected_evt is not None
            self._connected_evt.clear()
            self.conn = None
            # With a session that outlives the connection, the calls in flight keep waiting (within their own
            # deadlines): what was not acknowledged is sent again, and the responses wait in the session.
            kept = fatal is None and self._reconnect and conn.keeps_session
            if not kept and fatal is None:
                self._fail_calls(ConnectionLostError(f"connection to {self._dialer.url} lost"))
            self._on_drop()
            with contextlib.suppress(Exception):
                await conn.close(end_session=False)
            if fatal is not None:
                self._fail(fatal)
                return
            if not self._reconnect:
                self._set_state(ConnectionState.DISCONNECTED)
                self._connected_evt.set()  # wake waiters: they see DISCONNECTED and fail
                return
            if suspected:
                self._set_state(ConnectionState.TAKEOVER_SUSPECTED)
            self._set_state(ConnectionState.RECONNECTING)
            try:
                wait = self.suspicion.wait(self._dialer.backoff()) if suspected else 0.0
                conn = await self._dialer.redial(conn, wait)
            except (SessionTakenOverError, CredentialsRefusedError) as exc:
                self._fail(exc)
                return
            self.suspicion.reconnected(silent and conn.session_present)
            if kept and not conn.session_present:
                # The broker lost the session: what was in flight may or may not have been carried out, and
                # its response is gone. Only those calls fail; the listeners hear it before CONNECTED.
                self.sessions_lost += 1
                log.warning("%s: the broker at %s no longer had our session", self._name, self._dialer.url)
                self._fail_calls(
                    SessionLostError(
                        f"the broker at {self._dialer.url} no longer had the session of {self._name!r} after a "
                        "reconnect: the request may or may not have been carried out"
                    )
                )
                self._set_state(ConnectionState.SESSION_LOST)
            self.conn = conn
            self.suspicion.connected(asyncio.get_running_loop().time())
            self.reconnects += 1
            self._connected_evt.set()
            self._set_state(ConnectionState.CONNECTED)
            self._on_reconnect()

    async def connection(self, timeout: float | None) -> Connection:
        """The connection, waiting up to ``timeout`` while it is being re-established."""
        if self._state is ConnectionState.CLOSED:
            raise ClientStateError("this client was closed")
        self._raise_failure()
        conn = self.conn
        if conn is not None and self._state is ConnectionState.CONNECTED and conn.connected:
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
                        raise ConnectionLostError(f"disconnected from {self._dialer.url} (reconnect is off)")
                    if state is ConnectionState.FAILED:
                        self._raise_failure()
                    conn = self.conn
                    if conn is not None and state is ConnectionState.CONNECTED:
                        if conn.connected:
                            return conn
                        # it dropped a moment ago and the supervisor has not run yet: let it notice
                        await asyncio.sleep(0)
                        continue
                    await self._connected_evt.wait()
        except TimeoutError:
            raise ConnectionLostError(f"not connected to {self._dialer.url} (reconnecting)") from None
