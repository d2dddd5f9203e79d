"""Layer 3: the state store client, :class:`AsyncStateStoreClient`, and its blocking twin
:class:`StateStoreClient`.

The async client owns one broker connection (through the ``_transport`` layer; it never sees aiomqtt),
many requests in flight on it, KEYNOTIFY watches shared per key, and reconnection: aiomqtt has none, so
the client reconnects with backoff, re-subscribes, re-registers every watched key and — because
notifications sent while it was away are lost — re-reads each watched key and delivers a synthetic event
when the key changed meanwhile.

The blocking :class:`StateStoreClient` runs the async client on one background event-loop thread
(``_sync.py``); every public async method has a sync twin with the same parameters (a test checks).

Must not import aiomqtt/paho, nor the layers above (codecs, mapping, cache, emulator).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Final, TypeVar

from ._protocol import headers, topics
from ._protocol.commands import Delete, Get, KeyNotify, Set, SetCondition, VDelete, VDeleteResult, _Base
from ._protocol.errors import (
    ClientStateError,
    ClockDriftError,
    ConfigurationError,
    ConnectionLostError,
    ProtocolError,
    RequestTimeoutError,
    ServiceUnavailableError,
    StateStoreError,
    TransportError,
)
from ._protocol.hlc import Clock, HlcClock, HybridLogicalClock, system_clock_ms
from ._protocol.notifications import KeyEvent, KeyOperation, parse_notification
from ._sync import get_loop_thread
from ._transport.base import Connection, ConnectionFactory, InboundMessage
from ._transport.rpc import PendingCalls
from ._transport.settings import ConnectionSettings, TlsSettings

__all__ = [
    "UNSET",
    "AsyncKeyWatch",
    "AsyncStateStoreClient",
    "ConnectionState",
    "Entry",
    "KeySubscription",
    "KeyWatch",
    "SetResult",
    "StateStoreClient",
    "TlsSettings",
    "normalize_key",
    "ttl_to_ms",
]

log = logging.getLogger("sskv_mapping.client")

R = TypeVar("R")


#: The connection options (the fields of :class:`ConnectionSettings` besides host and port) that the URL
#: constructors and every framework adapter accept.
CONNECTION_OPTIONS: tuple[str, ...] = (
    "client_id",
    "username",
    "password",
    "tls",
    "sat_token_file",
    "keepalive",
    "connect_timeout",
)
_CONNECTION_KEYS = frozenset(CONNECTION_OPTIONS)


def _settings_from_url(url: str, kwargs: dict[str, Any]) -> ConnectionSettings:
    """Split connection arguments out of ``kwargs`` (in place) and build settings from the URL."""
    conn = {k: kwargs.pop(k) for k in list(kwargs) if k in _CONNECTION_KEYS}
    return ConnectionSettings.from_url(url, **{k: v for k, v in conn.items() if v is not None})


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: "Use the client default" (distinct from ``None``, which means "no limit" / "never expires").
UNSET: Final = _Unset.UNSET

KeyLike = str | bytes | bytearray | memoryview
TtlLike = float | int | timedelta | None

#: PX is milliseconds as a signed 64-bit integer on the service; refuse what cannot be meant.
MAX_TTL_MS = 100 * 365 * 24 * 3600 * 1000

#: Default ``max_payload``: MQTT's absolute packet limit (256 MiB) less 1 MiB of room for the PUBLISH headers
#: (topic, correlation data, user properties). A broker with a smaller maximum packet size drops the whole
#: connection on a larger request, so set ``max_payload`` below that broker's limit (see the client docstring).
DEFAULT_MAX_PAYLOAD = 255 * 1024 * 1024

# A request the broker delivered to nobody (PUBACK 0x10) is sent again after these pauses (seconds, doubling),
# within the call's deadline; where the service never answered this client, for about _FAIL_FAST seconds.
_RESEND_BACKOFF_INITIAL = 0.01
_RESEND_BACKOFF_MAX = 0.2
_FAIL_FAST = 0.75
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _check_timeout(timeout: object) -> float | None:
    """``None`` (no limit) or a finite number of seconds > 0, else :class:`ConfigurationError`."""
    if timeout is None:
        return None
    try:
        ok = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        ok = ok and timeout > 0 and math.isfinite(timeout)  # type: ignore[operator, arg-type]
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise ConfigurationError(f"timeout must be a positive, finite number of seconds or None, not {timeout!r:.40}")
    return timeout  # type: ignore[return-value]


def normalize_key(key: object) -> bytes:
    """``str`` (UTF-8) or bytes-like -> ``bytes``; anything else or empty -> :class:`ConfigurationError`."""
    if isinstance(key, str):
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates: not typed otherwise
            raise ConfigurationError(f"state store key is not valid UTF-8 text: {exc.reason}") from None
    elif isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
    else:
        raise ConfigurationError(f"state store keys are str or bytes, not {type(key).__name__}")
    if not data:
        raise ConfigurationError("state store keys may not be empty")
    return data


def _value_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ConfigurationError(
        f"client values are bytes, not {type(value).__name__} (use StateStoreDict or a codec for objects)"
    )


def ttl_to_ms(ttl: TtlLike) -> int | None:
    """Seconds (or a timedelta) -> PX milliseconds, rounded up; ``None`` -> never expires."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float | timedelta):
        raise ConfigurationError(f"ttl must be seconds (int/float), a timedelta or None, not {type(ttl).__name__}")
    try:
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if math.isnan(seconds) or seconds <= 0:
        raise ConfigurationError(f"ttl must be positive (got {ttl!r}); use None for 'never expires'")
    if seconds * 1000 > MAX_TTL_MS:  # also inf, which math.ceil() cannot take
        raise ConfigurationError(f"ttl {ttl!r} is absurdly large (more than 100 years)")
    return math.ceil(seconds * 1000)


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored value and its version (the HLC the service gave the last write)."""

    value: bytes
    version: HybridLogicalClock | None


@dataclass(frozen=True, slots=True)
class SetResult:
    """Outcome of a SET: ``applied`` is False when NX/NEX skipped it; ``version`` is the key's version
    (the new one if applied, the stored one if skipped). For a lock acquisition the version is the fencing
    token."""

    applied: bool
    version: HybridLogicalClock | None

    def __bool__(self) -> bool:
        return self.applied


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"


_UNKNOWN = object()

StateListener = Callable[[ConnectionState], None]
EventSink = Callable[[KeyEvent], None]


class _Registration:
    """One KEYNOTIFY registration shared by every local watcher of a key."""

    __slots__ = ("key", "last_seen", "lock", "newest", "registered", "resync", "sinks")

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.sinks: list[EventSink] = []
        #: the service confirmed our KEYNOTIFY on the current connection (notifications flow)
        self.registered = False
        #: a reconnect happened and the key was not re-read since (changes meanwhile are not reported yet)
        self.resync = False
        #: the version of the last event delivered; ``None``: known absent; ``_UNKNOWN``: no event yet
        self.last_seen: HybridLogicalClock | object | None = _UNKNOWN
        #: the newest version of any change delivered (SET or DELETE): older or equal ones are duplicates
        self.newest: HybridLogicalClock | None = None
        self.lock = asyncio.Lock()


class KeySubscription:
    """A callback watching one key; :meth:`close` (or ``async with``) unregisters it."""

    def __init__(self, client: AsyncStateStoreClient, key: bytes, sink: EventSink) -> None:
        self._client = client
        self.key = key
        self._sink = sink
        self._closed = False

    @property
    def active(self) -> bool:
        """Whether changes of the key are being notified now: the service confirmed the registration on
        the current connection. False while disconnected and after a reconnect until the watch is restored
        (a value read then may change unnoticed, so caches must not keep it)."""
        return not self._closed and self._client._watch_active(self.key)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client._remove_sink(self.key, self._sink)

    async def __aenter__(self) -> KeySubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


_CLOSED = object()


class _QueueSink:
    """Feeds an :class:`AsyncKeyWatch`; the client ends it when it closes."""

    __slots__ = ("queue",)

    def __init__(self, queue: asyncio.Queue[object]) -> None:
        self.queue = queue

    def __call__(self, event: KeyEvent) -> None:
        self.queue.put_nowait(event)

    def close(self) -> None:
        self.queue.put_nowait(_CLOSED)


class AsyncKeyWatch:
    """``async for event in client.watch(key)``: the changes of one key as :class:`KeyEvent` values.

    Registration happens on ``async with`` (or the first iteration); events of changes made after that are
    delivered, including this client's own writes. After a reconnect, a synthetic event (``synthetic=True``)
    reports a change that happened while disconnected.
    """

    def __init__(self, client: AsyncStateStoreClient, key: bytes) -> None:
        self._client = client
        self.key = key
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._sub: KeySubscription | None = None
        self._done = False

    async def start(self) -> AsyncKeyWatch:
        if self._sub is None and not self._done:
            self._sub = await self._client.subscribe_key(self.key, _QueueSink(self._queue))
        return self

    async def __aenter__(self) -> AsyncKeyWatch:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncKeyWatch:
        return self

    async def __anext__(self) -> KeyEvent:
        if self._sub is None:
            await self.start()
        if self._done and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _CLOSED:
            self._done = True
            raise StopAsyncIteration
        assert isinstance(item, KeyEvent)
        return item

    async def next(self, timeout: float | None = None) -> KeyEvent:
        """The next event, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    async def aclose(self) -> None:
        self._done = True
        sub, self._sub = self._sub, None
        self._queue.put_nowait(_CLOSED)
        if sub is not None:
            await sub.close()


class AsyncStateStoreClient:
    """Async client of the Azure IoT Operations state store.

    Example:
        >>> async def main() -> None:  # doctest: +SKIP
        ...     async with AsyncStateStoreClient("127.0.0.1", 1883) as client:
        ...         await client.set("greeting", b"hello", ttl=60)
        ...         entry = await client.get("greeting")
        ...         print(entry.value, entry.version)
        ...         async with client.watch("greeting") as changes:
        ...             async for event in changes:
        ...                 print(event.op, event.value)

    Args:
        host, port: the broker. ``client_id`` defaults to a random ``sskv-…`` id.
        username, password, tls, sat_token_file: authentication (see :class:`ConnectionSettings`).
        timeout: default per-call timeout in seconds (``None``: wait forever).
        reconnect: reconnect automatically with exponential backoff after a drop.
        clock: wall clock in ms for the hybrid logical clock (injectable for tests).
        settings: a complete :class:`ConnectionSettings` instead of the individual arguments.
        connection_factory: how to build a connection (default: MQTT via aiomqtt).
        max_payload: the largest request payload (the encoded command: key + value + a few dozen bytes)
            the client sends; a larger request raises :class:`ConfigurationError` before anything is sent.
            A broker drops the whole connection on a packet above its maximum packet size (mosquitto's
            ``max_packet_size``, Azure IoT Operations' ``maxPacketSizeBytes``), which in-flight calls would
            only see as a timeout: set this about 1 KiB below that limit. ``None``: no check. Default
            ``DEFAULT_MAX_PAYLOAD`` (just under MQTT's own 256 MiB packet limit).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: TlsSettings | None = None,
        sat_token_file: str | None = None,
        timeout: float | None = 10.0,
        reconnect: bool = True,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        clock: Clock = system_clock_ms,
        settings: ConnectionSettings | None = None,
        connection_factory: ConnectionFactory | None = None,
        max_payload: int | None = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        if settings is None:
            extra: dict[str, Any] = {}
            if client_id is not None:
                extra["client_id"] = client_id
            settings = ConnectionSettings(
                host=host,
                port=port,
                username=username,
                password=password,
                tls=tls,
                sat_token_file=sat_token_file,
                **extra,
            )
        _check_timeout(timeout)
        if max_payload is not None and (isinstance(max_payload, bool) or not isinstance(max_payload, int)):
            raise ConfigurationError(f"max_payload must be an int or None, not {max_payload!r}")
        if backoff_initial <= 0 or backoff_max < backoff_initial:
            raise ConfigurationError("need 0 < backoff_initial <= backoff_max")
        self.settings = settings
        self.timeout = timeout
        self.max_payload = max_payload
        self._reconnect = reconnect
        self._backoff = (backoff_initial, backoff_max)
        self._factory = connection_factory
        self.hlc = HlcClock(settings.client_id, clock)
        self._response_topic = topics.response_topic(settings.client_id)
        self._notify_filter = topics.notification_filter(settings.client_id)
        self._pending = PendingCalls()
        self._conn: Connection | None = None
        self._connected_evt: asyncio.Event | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._state = ConnectionState.DISCONNECTED
        self._listeners: list[StateListener] = []
        self._registrations: dict[bytes, _Registration] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: counters: requests sent, reconnects done, notifications that failed to parse
        self.requests_sent = 0
        #: requests the broker acknowledged as delivered to nobody (PUBACK 0x10) and that were sent again
        self.undelivered_resends = 0
        # whether the state store ever answered this client: a broker where it never did fails fast
        self._service_answered = False
        #: responses whose version was too far ahead of this machine's clock to merge (its clock is behind)
        self.clock_drift_warnings = 0
        self.reconnects = 0
        self.bad_notifications = 0
        #: notifications dropped as duplicates (a version not newer than one already delivered for the key)
        self.duplicate_notifications = 0

    # -- lifecycle ----------------------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> AsyncStateStoreClient:
        """``AsyncStateStoreClient.from_url("mqtt://127.0.0.1:1883")`` (``mqtts://`` for TLS)."""
        return cls(settings=_settings_from_url(url, kwargs), **kwargs)

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def state(self) -> ConnectionState:
        return self._state

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.client_id!r} {self.settings.url} {self._state.value}>"

    def add_state_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(state)`` on the loop thread at every state change; returns an unsubscribe function.

        A reconnection shows as ``RECONNECTING`` then ``CONNECTED``: the cache layer stops serving on the
        first and clears on the second (notifications were lost meanwhile)."""
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

    def _new_connection(self) -> Connection:
        if self._factory is not None:
            return self._factory(self.settings, self._on_message)
        from ._transport.mqtt import MqttConnection

        return MqttConnection(self.settings, self._on_message)

    async def _open(self) -> Connection:
        conn = self._new_connection()
        await conn.connect()
        try:
            # Responses and notifications in one SUBSCRIBE, acknowledged before the first request.
            await conn.subscribe([self._response_topic, self._notify_filter], qos=1)
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
        self._loop = asyncio.get_running_loop()
        self._connected_evt = asyncio.Event()
        self._set_state(ConnectionState.CONNECTING)
        try:
            conn = await self._open()
        except BaseException:
            self._set_state(ConnectionState.DISCONNECTED)
            raise
        self._conn = conn
        self._connected_evt.set()
        self._set_state(ConnectionState.CONNECTED)
        self._supervisor = self._loop.create_task(self._supervise(conn), name=f"sskv-supervisor-{self.client_id}")

    async def close(self) -> None:
        """Stop watches, disconnect, and fail whatever is still in flight. Safe to call twice."""
        if self._state is ConnectionState.CLOSED:
            return
        self._set_state(ConnectionState.CLOSED)
        sup, self._supervisor = self._supervisor, None
        if sup is not None:
            sup.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sup
        conn, self._conn = self._conn, None
        self._pending.fail_all(ClientStateError("the client was closed"))
        if conn is not None:
            await conn.close()
        for task in list(self._tasks):
            task.cancel()
        for reg in self._registrations.values():
            for sink in list(reg.sinks):
                if isinstance(sink, _QueueSink):
                    sink.close()
        self._registrations.clear()
        if self._connected_evt is not None:
            self._connected_evt.set()  # wake waiters so they see CLOSED

    async def __aenter__(self) -> AsyncStateStoreClient:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the client is connected (e.g. after a drop); :class:`ConnectionLostError` on timeout."""
        await self._connection(_check_timeout(timeout))

    # -- the connection supervisor ------------------------------------------------------------------------

    async def _supervise(self, conn: Connection) -> None:
        while True:
            try:
                await conn.wait_closed()
                return  # closed on purpose
            except TransportError as exc:
                log.warning("connection to %s lost: %s", self.settings.url, exc)
            assert self._connected_evt is not None
            self._connected_evt.clear()
            self._conn = None
            self._pending.fail_all(ConnectionLostError(f"connection to {self.settings.url} lost"))
            for reg in self._registrations.values():
                reg.registered = False  # the service dropped our registrations
                reg.resync = True
            with contextlib.suppress(Exception):
                await conn.close()
            if not self._reconnect:
                self._set_state(ConnectionState.DISCONNECTED)
                self._connected_evt.set()  # wake waiters: they see DISCONNECTED and fail
                return
            self._set_state(ConnectionState.RECONNECTING)
            conn = await self._reconnect_with_backoff()
            self._conn = conn
            self.reconnects += 1
            self._connected_evt.set()
            self._set_state(ConnectionState.CONNECTED)
            self._loop_task(self._restore_watches(), "restore-watches")

    def _loop_task(self, coro: Any, what: str) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro, name=f"sskv-{what}-{self.client_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reconnect_with_backoff(self) -> Connection:
        delay, cap = self._backoff
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = await self._open()
                log.info("reconnected to %s after %d attempt(s)", self.settings.url, attempt)
                return conn
            except StateStoreError as exc:
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
            # full jitter keeps a crowd of clients from reconnecting in lock step
            await asyncio.sleep(random.uniform(delay / 2, delay))
            delay = min(cap, delay * 2)

    def _watch_active(self, key: bytes) -> bool:
        reg = self._registrations.get(key)
        return reg is not None and reg.registered and self._state is ConnectionState.CONNECTED

    async def _restore_watches(self) -> None:
        """Re-register every watched key, then re-read it and report changes missed while away.

        Retried with backoff until every watch is back or this connection is gone: the broker may return
        before the service does (a KEYNOTIFY sent then is never answered), and a watch given up after one
        try would leave the caches above it fed by no notification at all, serving old values forever.
        """
        conn = self._conn
        delay, cap = self._backoff
        while True:
            failed = False
            for reg in list(self._registrations.values()):
                if self._conn is not conn or self._state is not ConnectionState.CONNECTED:
                    return  # dropped again (or closed): the next reconnect restores what is left
                try:
                    async with reg.lock:
                        if not reg.sinks or not reg.resync:
                            continue
                        if not reg.registered:
                            await self._keynotify(reg.key, timeout=self.timeout)
                            reg.registered = True
                        payload, version = await self._request(Get(reg.key), timeout=self.timeout)
                        value = Get(reg.key).decode(payload)
                        reg.resync = False
                        # Deliver when the key differs from the last event we delivered, or when we never
                        # delivered one (we cannot know what the watcher missed).
                        if value is None:
                            changed = reg.last_seen is not None
                            event = KeyEvent(reg.key, KeyOperation.DELETE, None, None, synthetic=True)
                        else:
                            changed = reg.last_seen is _UNKNOWN or version != reg.last_seen
                            event = KeyEvent(reg.key, KeyOperation.SET, value, version, synthetic=True)
                        if changed:
                            self._deliver(reg, event)
                except StateStoreError as exc:
                    failed = True
                    log.warning("could not restore the watch on %r yet: %s", reg.key, exc)
            if not failed:
                return
            await asyncio.sleep(random.uniform(delay / 2, delay))
            delay = min(cap, delay * 2)

    # -- requests -----------------------------------------------------------------------------------------

    async def _connection(self, timeout: float | None) -> Connection:
        if self._state is ConnectionState.CLOSED:
            raise ClientStateError("this client was closed")
        conn = self._conn
        if conn is not None and self._state is ConnectionState.CONNECTED:
            return conn
        if self._connected_evt is None:
            raise ClientStateError("not connected: call connect() or use 'async with'")
        try:
            async with asyncio.timeout(timeout):
                while True:
                    # the event is set while connected (and on close/give-up), cleared while reconnecting
                    state = self.state
                    if state is ConnectionState.CLOSED:
                        raise ClientStateError("this client was closed")
                    if state is ConnectionState.DISCONNECTED:
                        raise ConnectionLostError(f"disconnected from {self.settings.url} (reconnect is off)")
                    conn = self._conn
                    if conn is not None and state is ConnectionState.CONNECTED:
                        return conn
                    await self._connected_evt.wait()
        except TimeoutError:
            raise ConnectionLostError(f"not connected to {self.settings.url} (reconnecting)") from None

    def _timeout(self, timeout: float | _Unset | None) -> float | None:
        if timeout is UNSET:
            return self.timeout
        return _check_timeout(timeout)

    async def _request(
        self,
        cmd: _Base[Any],
        *,
        timeout: float | None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
    ) -> tuple[bytes, HybridLogicalClock | None]:
        """Send one command and return ``(reply payload, response __ts)``; header errors raise here."""
        # Argument errors first: nothing may be sent (nor waited for) when the request cannot be right.
        if fencing_token is not None and not isinstance(fencing_token, HybridLogicalClock):
            raise ConfigurationError(f"fencing_token must be a HybridLogicalClock, not {type(fencing_token).__name__}")
        payload = cmd.encode()
        if self.max_payload is not None and len(payload) > self.max_payload:
            raise ConfigurationError(
                f"the {cmd.VERB.decode()} request is {len(payload)} bytes, more than max_payload={self.max_payload}"
                " (the broker would drop the connection on it)"
            )
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        backoff = _RESEND_BACKOFF_INITIAL
        fail_fast: float | None = None
        while True:
            conn = await self._connection(None if deadline is None else max(deadline - loop.time(), 0.001))
            try:
                message = await self._send_once(cmd, conn, timeout, deadline, fencing_token, persist)
                break
            except ServiceUnavailableError:
                # PUBACK 0x10: the broker delivered the request to nobody -- a definite "not sent", not an
                # unknown outcome -- so it is safe to send it again once the service (re)subscribes.
                now = loop.time()
                if fail_fast is None:
                    fail_fast = now + _FAIL_FAST
                give_up = deadline
                if not self._service_answered:  # it never answered here: a bare broker, say so quickly
                    give_up = fail_fast if deadline is None else min(deadline, fail_fast)
                if give_up is not None and now + backoff >= give_up:
                    raise ServiceUnavailableError(self._unavailable_text(cmd)) from None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RESEND_BACKOFF_MAX)
                self.undelivered_resends += 1
        self._service_answered = True
        version = headers.check_response(message.user_properties, message.content_type)
        if version is not None:
            try:
                self.hlc.update(version)
            except ClockDriftError as exc:
                # The request was carried out: failing the call now would report an applied write as failed.
                # The service's clock (the version it returned) is far ahead of ours; our clock stays as it
                # was (our next requests carry older timestamps, which the service accepts).
                self._clock_behind(exc)
        return message.payload, version

    async def _send_once(
        self,
        cmd: _Base[Any],
        conn: Connection,
        timeout: float | None,
        deadline: float | None,
        fencing_token: HybridLogicalClock | None,
        persist: bool,
    ) -> InboundMessage:
        """Publish the request once and wait for its response until ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        self.requests_sent += 1
        with self._pending.call() as (corr, fut):
            props = headers.request_properties(self.client_id, self.hlc.tick(), fencing_token, persist)
            remaining = None if deadline is None else max(deadline - loop.time(), 0.001)
            try:
                async with asyncio.timeout(remaining):
                    # No PUBACK wait: the response is what we wait for, and a connection that drops fails this
                    # call through _supervise. A refusing PUBACK (an ACL denial) or one that delivered to nobody
                    # (0x10) fails the response future at once: no wait for the timeout.
                    conn.publish_nowait(
                        topics.REQUEST_TOPIC,
                        cmd.encode(),
                        qos=1,
                        correlation_data=corr,
                        response_topic=self._response_topic,
                        user_properties=props,
                        content_type=headers.CONTENT_TYPE,
                        message_expiry=headers.expiry_seconds(remaining if remaining is not None else 3600),
                        refusal=fut,
                    )
                    message: InboundMessage = await fut
                    return message
            except TimeoutError:
                raise RequestTimeoutError(
                    f"no response to {cmd.VERB.decode()} within {timeout} s from {self.settings.url}"
                ) from None

    def _unavailable_text(self, cmd: _Base[Any]) -> str:
        text = (
            f"the state store did not answer on {self.settings.url}: the broker delivered the "
            f"{cmd.VERB.decode()} request to no subscriber; nothing was written"
        )
        if not self._service_answered and self.settings.host in _LOCAL_HOSTS:
            text += " (is the emulator running? start it with: sskv emulator)"
        return text

    def _clock_behind(self, exc: ClockDriftError) -> None:
        self.clock_drift_warnings += 1
        if self.clock_drift_warnings == 1 or self.clock_drift_warnings % 1000 == 0:
            log.warning(
                "this machine's clock is behind the state store's (%d time(s)): %s", self.clock_drift_warnings, exc
            )

    async def get(self, key: KeyLike, *, timeout: float | _Unset | None = UNSET) -> Entry | None:
        """The key's value and version, or ``None`` if it does not exist."""
        cmd = Get(normalize_key(key))
        payload, version = await self._request(cmd, timeout=self._timeout(timeout))
        value = cmd.decode(payload)
        return None if value is None else Entry(value, version)

    async def set(
        self,
        key: KeyLike,
        value: bytes,
        *,
        condition: SetCondition | None = None,
        ttl: TtlLike = None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
        timeout: float | _Unset | None = UNSET,
    ) -> SetResult:
        """Store ``value``. ``condition=SetCondition.NX`` only if absent, ``NEX`` only if absent or equal;
        ``ttl`` in seconds (``None``: never expires); ``fencing_token`` for keys protected by a lock."""
        if condition is not None and not isinstance(condition, SetCondition):
            raise ConfigurationError(f"condition must be a SetCondition or None, not {condition!r}")
        if fencing_token is not None and not isinstance(fencing_token, HybridLogicalClock):
            raise ConfigurationError("fencing_token must be a HybridLogicalClock")
        cmd = Set(normalize_key(key), _value_bytes(value), condition, ttl_to_ms(ttl))
        payload, version = await self._request(
            cmd, timeout=self._timeout(timeout), fencing_token=fencing_token, persist=persist
        )
        return SetResult(cmd.decode(payload), version)

    async def delete(
        self,
        key: KeyLike,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | _Unset | None = UNSET,
    ) -> bool:
        """Delete the key; ``True`` if it existed."""
        cmd = Delete(normalize_key(key))
        payload, _ = await self._request(cmd, timeout=self._timeout(timeout), fencing_token=fencing_token)
        return cmd.decode(payload)

    async def vdelete(
        self,
        key: KeyLike,
        value: bytes,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | _Unset | None = UNSET,
    ) -> VDeleteResult:
        """Delete the key only if its value equals ``value``: DELETED, NOT_FOUND or VALUE_MISMATCH."""
        cmd = VDelete(normalize_key(key), _value_bytes(value))
        payload, _ = await self._request(cmd, timeout=self._timeout(timeout), fencing_token=fencing_token)
        return cmd.decode(payload)

    # -- watches ------------------------------------------------------------------------------------------

    def watch(self, key: KeyLike) -> AsyncKeyWatch:
        """Watch one key: ``async with client.watch("k") as w: async for ev in w: ...``."""
        return AsyncKeyWatch(self, normalize_key(key))

    async def subscribe_key(
        self, key: KeyLike, callback: EventSink, *, timeout: float | _Unset | None = UNSET
    ) -> KeySubscription:
        """Call ``callback(event)`` on the loop thread for every change of ``key`` until closed.

        Many subscribers of one key share one KEYNOTIFY registration; the last to leave sends STOP.
        Returns once the service has confirmed the registration.
        """
        k = normalize_key(key)
        reg = self._registrations.get(k)
        if reg is None:
            reg = self._registrations[k] = _Registration(k)
        reg.sinks.append(callback)
        try:
            async with reg.lock:
                if not reg.registered:
                    await self._keynotify(k, timeout=self._timeout(timeout))
                    reg.registered = True
        except BaseException:
            await self._remove_sink(k, callback)
            raise
        return KeySubscription(self, k, callback)

    async def _keynotify(self, key: bytes, *, timeout: float | None, stop: bool = False) -> bool:
        """KEYNOTIFY (or STOP) with its reply checked: a service error (clock skew...) raises here."""
        cmd = KeyNotify(key, stop=stop)
        payload, _ = await self._request(cmd, timeout=timeout)
        return cmd.decode(payload)

    async def _remove_sink(self, key: bytes, sink: EventSink) -> None:
        reg = self._registrations.get(key)
        if reg is None:
            return
        with contextlib.suppress(ValueError):
            reg.sinks.remove(sink)
        if reg.sinks:
            return
        async with reg.lock:
            if reg.sinks or self._registrations.get(key) is not reg:
                return
            del self._registrations[key]
            if reg.registered and self._state is ConnectionState.CONNECTED:
                reg.registered = False
                try:
                    await self._keynotify(key, stop=True, timeout=self.timeout)
                except StateStoreError as exc:
                    log.debug("KEYNOTIFY STOP for %r failed: %s", key, exc)

    @property
    def watched_keys(self) -> list[bytes]:
        return list(self._registrations)

    def _deliver(self, reg: _Registration, event: KeyEvent) -> None:
        version = event.version
        if version is not None:
            newest = reg.newest
            if newest is not None and version <= newest and not event.synthetic:
                # QoS 1 may deliver twice, and a redelivery may come after a newer change: either way the
                # watcher has seen this change (or a later one) already.
                self.duplicate_notifications += 1
                return
            if newest is None or version > newest:
                reg.newest = version
        if event.op is KeyOperation.DELETE:
            reg.last_seen = None
        else:
            reg.last_seen = event.version
        for sink in list(reg.sinks):
            try:
                sink(event)
            except Exception:
                log.exception("watch callback failed for key %r", reg.key)

    # -- inbound ------------------------------------------------------------------------------------------

    def _on_message(self, message: InboundMessage) -> None:
        if message.topic == self._response_topic:
            self._pending.resolve(message)
            return
        if message.topic.startswith(topics.NOTIFY_PREFIX):
            try:
                client_id, event = parse_notification(
                    message.topic, message.payload, message.user_property(headers.TIMESTAMP)
                )
            except ProtocolError as exc:
                self.bad_notifications += 1
                log.warning("dropping a malformed notification on %r: %s", message.topic, exc)
                return
            if client_id != self.client_id:
                return
            if event.version is not None:
                with contextlib.suppress(StateStoreError):
                    self.hlc.update(event.version)
            reg = self._registrations.get(event.key)
            if reg is not None:
                self._deliver(reg, event)


# -------------------------------------------------------------------------------------------------------
# the blocking twin


class KeyWatch:
    """Blocking iterator over the changes of one key (see :class:`AsyncKeyWatch`)."""

    def __init__(self, client: StateStoreClient, key: bytes) -> None:
        self._client = client
        self._watch = AsyncKeyWatch(client._async, key)
        self.key = key

    def start(self) -> KeyWatch:
        self._client._run(self._watch.start())
        return self

    def __enter__(self) -> KeyWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[KeyEvent]:
        while True:
            try:
                yield self._client._run(self._watch.__anext__())
            except StopAsyncIteration:
                return

    def next(self, timeout: float | None = None) -> KeyEvent:
        """The next event, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        event: KeyEvent = self._client._run(self._watch.next(timeout))
        return event

    def close(self) -> None:
        self._client._run(self._watch.aclose())


class StateStoreClient:
    """Blocking client of the state store: the :class:`AsyncStateStoreClient` run on a background loop.

    Example:
        >>> with StateStoreClient("127.0.0.1", 1883) as client:  # doctest: +SKIP
        ...     client.set("greeting", b"hello")
        ...     print(client.get("greeting"))

    Takes exactly the arguments of :class:`AsyncStateStoreClient`. Calls made from the background loop
    thread itself raise :class:`ClientStateError` (they would deadlock).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: TlsSettings | None = None,
        sat_token_file: str | None = None,
        timeout: float | None = 10.0,
        reconnect: bool = True,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        clock: Clock = system_clock_ms,
        settings: ConnectionSettings | None = None,
        connection_factory: ConnectionFactory | None = None,
        max_payload: int | None = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self._portal = get_loop_thread()
        self._async = AsyncStateStoreClient(
            host,
            port,
            client_id=client_id,
            username=username,
            password=password,
            tls=tls,
            sat_token_file=sat_token_file,
            timeout=timeout,
            reconnect=reconnect,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            clock=clock,
            settings=settings,
            connection_factory=connection_factory,
            max_payload=max_payload,
        )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> StateStoreClient:
        """``StateStoreClient.from_url("mqtt://127.0.0.1:1883")``."""
        return cls(settings=_settings_from_url(url, kwargs), **kwargs)

    def _run(self, coro: Any) -> Any:
        return self._portal.run(coro)

    @property
    def async_client(self) -> AsyncStateStoreClient:
        """The async client this facade drives (lives on the background loop thread)."""
        return self._async

    @property
    def client_id(self) -> str:
        return self._async.client_id

    @property
    def state(self) -> ConnectionState:
        return self._async.state

    @property
    def settings(self) -> ConnectionSettings:
        return self._async.settings

    def __repr__(self) -> str:
        return f"<StateStoreClient {self.client_id!r} {self.settings.url} {self.state.value}>"

    def connect(self) -> None:
        self._run(self._async.connect())

    def close(self) -> None:
        self._run(self._async.close())

    def __enter__(self) -> StateStoreClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_connected(self, timeout: float | None = None) -> None:
        self._run(self._async.wait_connected(timeout))

    def get(self, key: KeyLike, *, timeout: float | _Unset | None = UNSET) -> Entry | None:
        result: Entry | None = self._run(self._async.get(key, timeout=timeout))
        return result

    def set(
        self,
        key: KeyLike,
        value: bytes,
        *,
        condition: SetCondition | None = None,
        ttl: TtlLike = None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
        timeout: float | _Unset | None = UNSET,
    ) -> SetResult:
        result: SetResult = self._run(
            self._async.set(
                key,
                value,
                condition=condition,
                ttl=ttl,
                fencing_token=fencing_token,
                persist=persist,
                timeout=timeout,
            )
        )
        return result

    def delete(
        self,
        key: KeyLike,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | _Unset | None = UNSET,
    ) -> bool:
        result: bool = self._run(self._async.delete(key, fencing_token=fencing_token, timeout=timeout))
        return result

    def vdelete(
        self,
        key: KeyLike,
        value: bytes,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | _Unset | None = UNSET,
    ) -> VDeleteResult:
        result: VDeleteResult = self._run(self._async.vdelete(key, value, fencing_token=fencing_token, timeout=timeout))
        return result

    def watch(self, key: KeyLike) -> KeyWatch:
        return KeyWatch(self, normalize_key(key))

    def subscribe_key(
        self, key: KeyLike, callback: EventSink, *, timeout: float | _Unset | None = UNSET
    ) -> KeySubscription:
        """Like the async twin; ``callback`` runs on the background loop thread and must not block."""
        result: KeySubscription = self._run(self._async.subscribe_key(key, callback, timeout=timeout))
        return result

    def add_state_listener(self, listener: StateListener) -> Callable[[], None]:
        return self._async.add_state_listener(listener)

    @property
    def timeout(self) -> float | None:
        """The default per-request timeout (seconds; ``None``: wait forever)."""
        return self._async.timeout

    @property
    def watched_keys(self) -> list[bytes]:
        return self._async.watched_keys
