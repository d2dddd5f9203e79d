"""The state store client, :class:`AsyncStateStoreClient`, and its blocking twin :class:`StateStoreClient`.

One connection, many requests in flight, shared watches, its own reconnection (docs/design/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from .._blocking import BlockingTwin
from .._fork import in_child_after_fork
from .._keys import escape_glob, scan_pattern, store_key
from .._protocol import headers, limits, topics
from .._protocol.commands import Delete, Get, KeyNotify, Set, SetCondition, VDelete, VDeleteResult, _Base
from .._protocol.hlc import Clock, HlcClock, HybridLogicalClock, system_clock_ms
from .._protocol.hlc import HybridLogicalClock as Hlc
from .._protocol.mqtt_publish import OutgoingMessage, message_size
from .._protocol.notifications import KeyEvent
from .._telemetry import attach as attach_telemetry
from .._transport.backoff import Backoff
from .._transport.base import ConnectionFactory
from .._transport.factory import new_connection
from .._transport.settings import (
    DEFAULT_URL,
    ENV_LOCATION,
    ConnectionSettings,
    TlsSettings,
    pop_connection_options,
    settings_for,
    settings_from_options,
)
from .._transport.settings import Broker as Broker
from .._ttl import TtlLike, ttl_to_ms
from .._unset import UNSET, UnsetType
from ..errors import (
    ClientStateError,
    ClockDriftError,
    ConfigurationError,
    StateStoreError,
    ValueTooLargeError,
)
from ._home_loop import close_from_elsewhere
from ._in_flight import DEFAULT_MAX_IN_FLIGHT, InFlightGate
from ._inbound import InboundRouter
from ._keeper import ConnectionKeeper, ConnectionState, StateListener
from ._requests import RequestSender
from ._scan import ScanSupport, keys_of, scan_pages
from ._watches import AsyncKeyWatch, EventSink, KeySubscription, Watches

__all__ = [
    "UNSET",
    "AsyncKeyWatch",
    "AsyncStateStoreClient",
    "ClientStats",
    "Connecting",
    "ConnectionState",
    "Entry",
    "KeySubscription",
    "KeyWatch",
    "SetResult",
    "StateStoreClient",
    "TlsSettings",
    "UnsetType",
    "escape_glob",
    "ttl_to_ms",
]

log = logging.getLogger("sskv_mapping.client")

R = TypeVar("R")


#: The faces' ``connect()`` default: the one :data:`~sskv_mapping._transport.settings.DEFAULT_URL`, under the name
#: cache/ and mapping/ import.
DEFAULT_BROKER_URL = DEFAULT_URL


class _Face(Protocol):
    async def open(self) -> object: ...

    async def close(self) -> None: ...


AF = TypeVar("AF", bound=_Face)


class Connecting(Generic[AF]):
    """What an async face's ``connect()`` returns: await it for the opened face (close it yourself), or use it
    with ``async with`` (the face is closed at the block's end), as websockets' and aiosqlite's ``connect``.

    Example:
        >>> async def main() -> None:  # doctest: +SKIP
        ...     async with AsyncStateStoreDict.connect("mqtt://127.0.0.1:1883", namespace="app") as d:
        ...         await d.set("k", 1)
        ...     d = await AsyncStateStoreDict.connect("mqtt://127.0.0.1:1883", namespace="app")
        ...     await d.close()
    """

    __slots__ = ("_args", "_face")

    def __init__(
        self, face: Callable[..., AF], broker: Broker, client_options: dict[str, Any], face_options: dict[str, Any]
    ) -> None:
        client_options, face_options = dict(client_options), dict(face_options)
        settings = settings_for(broker, client_options)  # the connection options (keepalive...) popped first
        _route_options(face, AsyncStateStoreClient, client_options, face_options)  # a bad option: TypeError now
        self._args = (face, settings, client_options, face_options)
        self._face: AF | None = None

    async def _connect(self) -> AF:
        """A client of its own (``settings_for``), connected, then the face built on it, opened, and owning it
        (closed with the face; closed at once if the face fails to open)."""
        face, settings, client_options, face_options = self._args
        client = AsyncStateStoreClient(settings=settings, **client_options)
        await client.connect()
        try:
            opened = face(client, _owns_client=True, **face_options)
            await opened.open()
        except BaseException:
            await client.close()
            raise
        return opened

    def __await__(self) -> Generator[Any, None, AF]:
        return self._connect().__await__()

    async def __aenter__(self) -> AF:
        if self._face is not None:
            raise ClientStateError("this connect() is entered already; call connect() again for another face")
        self._face = await self._connect()
        return self._face

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        face, self._face = self._face, None
        if face is not None:
            await face.close()


@functools.cache
def _parameters(target: Callable[..., Any]) -> frozenset[str]:
    """The keyword parameters of a class's constructor (or a function), private ones left out."""
    return frozenset(
        name
        for name, p in inspect.signature(target).parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and not name.startswith("_")
    )


def _route_options(
    face: Callable[..., Any], client_class: type, client_options: dict[str, Any], face_options: dict[str, Any]
) -> None:
    """A face's ``connect(**options)``: an option of the face's own constructor that ``connect()`` does not list
    (``cache_ttl``, ``monotonic``...) goes to the face, not to the client; one that neither takes is a
    :class:`TypeError` naming the face, before anything connects."""
    mine, clients = _parameters(face), _parameters(client_class)
    for name in list(client_options):
        if name in clients:
            continue
        if name in mine and name not in ("client", "broker"):
            face_options[name] = client_options.pop(name)
            continue
        face_name = getattr(face, "__name__", repr(face))
        raise TypeError(
            f"{face_name}.connect() got an unexpected keyword argument {name!r}: it takes {face_name}'s own options "
            f"and {client_class.__name__}'s (timeout, client_id, username, tls...)"
        )


def connect_blocking_face(
    face: Callable[..., F], broker: Broker, client_options: dict[str, Any], **face_options: Any
) -> F:
    """:class:`Connecting` for a blocking face (its constructor opens it): the face, connected."""
    settings = settings_for(broker, client_options)  # the connection options (keepalive...) popped first
    _route_options(face, StateStoreClient, client_options, face_options)
    client = StateStoreClient(settings=settings, **client_options)
    client.connect()
    try:
        return face(client, _owns_client=True, **face_options)
    except BaseException:
        client.close()
        raise


KeyLike = str | bytes | bytearray | memoryview
F = TypeVar("F")


#: A listing's default time budget (``scan(timeout=UNSET)``): this many times the client's request timeout.
SCAN_TIMEOUT_FACTOR = 6

#: check_set's margin over its packet size estimate: the timestamp's counter may grow a digit or two by the send
_PACKET_SIZE_SLACK = 8
#: more than a SET request's packet adds to its key and value, besides four copies of the client id (in the
#: response topic, __srcId, __partition and __ts): the request topic, command framing, the other properties
_ROUGH_OVERHEAD = 2048
#: the longest wait between two tries to register the watches again on a live connection
_WATCH_RESTORE_CAP = 2.0


def _check_max_payload(verb: bytes, payload: bytes, max_payload: int | None) -> None:
    if max_payload is not None and len(payload) > max_payload:
        raise ValueTooLargeError(
            f"the {verb.decode()} request is {len(payload)} bytes, more than max_payload={max_payload}",
            size=len(payload),
            limit=max_payload,
        )


def _check_limits(key: bytes, value: bytes, max_packet_size: int | None) -> None:
    """Raise :class:`ValueTooLargeError` if ``key`` or ``value`` is over its documented limit
    (:mod:`~sskv_mapping._protocol.limits`): a SET that could never be answered or notified is not sent."""
    reason = limits.key_too_long(key)
    if reason is not None:
        raise ValueTooLargeError(reason, size=len(key), limit=limits.MAX_KEY_BYTES)
    reason = limits.value_too_large(key, len(value), max_packet_size)
    if reason is not None:  # counted as the notification's packet, from above, against the bound it must fit
        bound = limits.WRITE_BOUND if max_packet_size is None else min(limits.WRITE_BOUND, max_packet_size)
        raise ValueTooLargeError(reason, size=len(value) + limits.NOTIFY_OVERHEAD + 2 * len(key), limit=bound)


def _check_packet_estimate(response_topic: str, props: headers.UserProperties, payload: bytes, limit: int) -> None:
    """Raise :class:`ValueTooLargeError` if a request PUBLISH with ``payload`` would be over ``limit`` bytes
    (an upper bound: the correlation data and expiry have fixed sizes, the timestamp gets a few bytes' slack)."""
    request = OutgoingMessage(
        topics.REQUEST_TOPIC, payload, 1, bytes(16), response_topic, props, headers.CONTENT_TYPE, 0xFFFFFFFF
    )
    size = message_size(request) + _PACKET_SIZE_SLACK
    if size > limit:
        raise ValueTooLargeError(
            f"a SET of this value makes a PUBLISH of about {size} bytes, over the broker's maximum packet size "
            f"({limit} bytes)",
            size=size,
            limit=limit,
        )


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


def _value_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ConfigurationError(
        f"client values are bytes, not {type(value).__name__} (use StateStoreDict or a codec for objects)"
    )


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


@dataclass(frozen=True, slots=True)
class ClientStats:
    """A snapshot of a client's counters, each since it was made (see :meth:`AsyncStateStoreClient.stats`).

    ``requests_sent``: requests published (each resend counts; one refused before sending does not);
    ``undelivered_resends``: requests the broker delivered to nobody (PUBACK 0x10, the service away), sent again;
    ``reconnects``: reconnects done; ``suspected_takeovers``: streaks of connections the broker closed without a
    word right after connecting; ``sessions_lost``: reconnects that found the broker without this client's
    session (the calls in flight failed); ``duplicate_notifications``: notifications dropped as not newer than
    one delivered; ``clock_drift_warnings``: responses whose version was too far ahead of this machine's clock to
    merge; ``bad_notifications``: malformed notifications dropped; ``previous_session_messages``: messages the
    broker kept for a previous process with this client id, dropped.
    """

    requests_sent: int
    undelivered_resends: int
    reconnects: int
    suspected_takeovers: int
    sessions_lost: int
    duplicate_notifications: int
    clock_drift_warnings: int
    bad_notifications: int
    previous_session_messages: int


# How get and set make their command and result (one of each per call): a frozen dataclass's __init__ sets each field
# through object.__setattr__; its slots' own setters do the same without the name lookup and argument parsing.
_new = object.__new__
_set_get_key = Get.__dict__["key"].__set__
_set_set_fields = tuple(Set.__dict__[name].__set__ for name in ("key", "value", "condition", "expiry_ms"))
_set_entry_value = Entry.__dict__["value"].__set__
_set_entry_version = Entry.__dict__["version"].__set__
_set_result_applied = SetResult.__dict__["applied"].__set__
_set_result_version = SetResult.__dict__["version"].__set__


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
        sat_token_provider: instead of ``sat_token_file``, a callable returning the current K8S-SAT token (for a
            token that lives in no file); called on the event loop at each connect and re-authentication.
        timeout: default per-call timeout in seconds (``None``: wait forever).
        reconnect: reconnect automatically after a drop, for as long as the client is open: the waits between
            attempts double from ``backoff_initial`` (0.05 s) up to ``backoff_max`` (30 s), each drawn with full
            jitter from ``[0, wait]``. Only the broker's word stops it: 0x8E (session taken over), or credentials
            refused three times in a row (docs/reliability.md).
        wall_clock_ms: the wall clock (int milliseconds since the epoch) of the hybrid logical clock; inject a fake
            one in tests.
        settings: a complete :class:`ConnectionSettings` instead of the individual arguments.
        connection_factory: how to build a connection (default: our MQTT 5 ``StreamConnection``).
        max_payload: a limit of the client's own on the request payload (the encoded command: key + value +
            a few dozen bytes); a larger request raises :class:`ValueTooLargeError` before anything is sent.
            Default ``None``: only the broker's limit applies -- its Maximum Packet Size from CONNACK
            (mosquitto's ``max_packet_size``, Azure IoT Operations' ``maxPacketSizeBytes``), counted on the whole
            PUBLISH packet (topic and properties add a few hundred bytes), raises the same error. Either way
            the connection stays up and other calls are untouched.
        max_in_flight: the most requests awaiting an answer at once, on every path; past it a call waits its turn
            within its own timeout (:class:`RequestTimeoutError` if it runs out, nothing sent). A broker queues only
            so much per session and drops the rest silently (mosquitto: 20 in flight + 1,000 queued). Default 256.
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
        backoff_max: float = 30.0,
        wall_clock_ms: Clock = system_clock_ms,
        settings: ConnectionSettings | None = None,
        connection_factory: ConnectionFactory | None = None,
        max_payload: int | None = None,
        sat_token_provider: Callable[[], str | bytes] | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
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
                sat_token_provider=sat_token_provider,
                **extra,
            )
        _check_timeout(timeout)
        if max_payload is not None and (isinstance(max_payload, bool) or not isinstance(max_payload, int)):
            raise ConfigurationError(f"max_payload must be an int or None, not {max_payload!r}")
        if backoff_initial <= 0 or backoff_max < backoff_initial:
            raise ConfigurationError("need 0 < backoff_initial <= backoff_max")
        self.settings = settings = settings.for_this_process()  # made before a fork: not the parent's id
        self.in_flight = InFlightGate(max_in_flight)  #: requests awaiting an answer (``.in_flight``), the bound
        self.timeout = timeout
        self.max_payload = max_payload
        self._reconnect = reconnect
        self.hlc = HlcClock(settings.client_id, wall_clock_ms)
        factory = connection_factory if connection_factory is not None else new_connection
        self._keeper = ConnectionKeeper(
            lambda: factory(settings, self._inbound.on_message),
            [topics.response_topic(settings.client_id), topics.notification_filter(settings.client_id)],
            url=settings.url,
            reconnect=reconnect,
            backoff=functools.partial(Backoff, backoff_initial, backoff_max),
            on_drop=self._dropped,
            on_reconnect=self._reconnected,
            name=settings.client_id,
            fail_calls=lambda exc: self._sender.pending.fail_all(exc),  # a drop without a session, a session lost
        )
        self._watches = Watches(
            self._request,
            connected=lambda: self._keeper.connected,
            connection=lambda: self._keeper.conn,
            timeout=lambda: self.timeout,
            # restoring watches on a live connection: a service that answers again is met within 2 s, whatever the cap
            backoff=functools.partial(
                Backoff, backoff_initial, max(backoff_initial, min(backoff_max, _WATCH_RESTORE_CAP))
            ),
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sender = RequestSender(settings, self.hlc, self._keeper, self.in_flight, self._clock_behind)
        self._inbound = InboundRouter(settings.client_id, self.hlc, self._keeper, self._sender, self._watches)
        #: responses whose version was too far ahead of this machine's clock to merge (its clock is behind)
        self.clock_drift_warnings = 0
        self._scan = ScanSupport(self._keeper)
        self._closed = asyncio.Event()
        in_child_after_fork(self._forget_parent_connection)

    # -- lifecycle ----------------------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> AsyncStateStoreClient:
        """``AsyncStateStoreClient.from_url("mqtt://127.0.0.1:1883")`` (``mqtts://`` for TLS); also a
        connection string (``"HostName=aio-broker;TcpPort=1883;UseTls=false"``) or ``"env:"`` (the ``AIO_*``
        variables), see :meth:`ConnectionSettings.from_url`."""
        return cls(settings=settings_from_options(url, pop_connection_options(kwargs)), **kwargs)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> AsyncStateStoreClient:
        """A client configured as Azure IoT Operations apps are: from the ``AIO_*`` environment variables
        (``os.environ`` unless ``environ`` is given; see :meth:`ConnectionSettings.from_environment`).
        ``kwargs``: the client's other arguments (``timeout``, ``reconnect``...) and connection options that
        replace what the environment says."""
        return cls(
            settings=settings_from_options(ENV_LOCATION, pop_connection_options(kwargs), environ=environ), **kwargs
        )

    @property
    def client_id(self) -> str:
        """The MQTT client id (the service's notifications and locks name it)."""
        return self.settings.client_id

    @property
    def state(self) -> ConnectionState:
        """Where the connection is now (connected, reconnecting, closed, ...)."""
        return self._keeper.state

    @property
    def requests_sent(self) -> int:
        """Requests published so far (each resend counts; a request refused before sending does not)."""
        return self._sender.requests_sent

    @property
    def undelivered_resends(self) -> int:
        """Requests the broker delivered to nobody (PUBACK 0x10, the service away) and that were sent again."""
        return self._sender.undelivered_resends

    @property
    def reconnects(self) -> int:
        """Reconnects done since :meth:`connect`."""
        return self._keeper.reconnects

    @property
    def suspected_takeovers(self) -> int:
        """Streaks of connections the broker closed without a word right after connecting (another process with
        this client id, or a network that closes connections), each logged once at WARNING. Never fatal: the
        client goes on reconnecting, after longer waits while a streak lasts."""
        return self._keeper.suspicion.streaks

    @property
    def sessions_lost(self) -> int:
        """Reconnects that found the broker without this client's MQTT session (it restarted, or the session
        expired): the calls in flight then failed with :class:`SessionLostError`; the client went on."""
        return self._keeper.sessions_lost

    @property
    def bad_notifications(self) -> int:
        """Malformed notifications received (each dropped and logged at WARNING)."""
        return self._inbound.bad_notifications

    @property
    def previous_session_messages(self) -> int:
        """Messages the broker kept in the session for a previous process with this client id: dropped, counted."""
        return self._inbound.previous_session_messages

    def stats(self) -> ClientStats:
        """A snapshot of this client's counters (what each one counts: docs/guide/client.md, "Counters")."""
        sender, keeper, inbound = self._sender, self._keeper, self._inbound
        return ClientStats(
            requests_sent=sender.requests_sent,
            undelivered_resends=sender.undelivered_resends,
            reconnects=keeper.reconnects,
            suspected_takeovers=keeper.suspicion.streaks,
            sessions_lost=keeper.sessions_lost,
            duplicate_notifications=self._watches.duplicate_notifications,
            clock_drift_warnings=self.clock_drift_warnings,
            bad_notifications=inbound.bad_notifications,
            previous_session_messages=inbound.previous_session_messages,
        )

    @property
    def failure(self) -> StateStoreError | None:
        """Why the client stopped for good (state ``FAILED``): :class:`SessionTakenOverError` (another process
        uses this client id) or :class:`CredentialsRefusedError`; ``None`` otherwise."""
        return self._keeper.failure

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.client_id!r} {self.settings.url} {self.state.value}>"

    def add_state_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(state)`` on the loop thread at every state change; returns an unsubscribe function.

        A reconnection shows as ``RECONNECTING`` then ``CONNECTED``: the cache layer stops serving on the
        first and clears on the second (notifications were lost meanwhile)."""
        return self._keeper.add_listener(listener)

    @property
    def closed(self) -> asyncio.Event:
        """Set when :meth:`close` begins, never cleared: what every wait of the layers above races against
        (``unless_closed`` in ``client/_closing.py``), so a closed client ends them at once. Only read it."""
        return self._closed

    def _abandon(self) -> None:
        # close() from another loop once this client's is gone: nothing can be written on a dead loop
        self._keeper.abandon()
        with contextlib.suppress(RuntimeError):  # a waiter's callbacks belong to the dead loop
            self._sender.pending.fail_all(ClientStateError("the client was closed"))
        self._watches.close()

    def _forget_parent_connection(self) -> None:
        # in a forked child the connection (its socket) is the parent's: never write to it (sskv_mapping._fork)
        self._keeper.abandon()

    async def connect(self) -> None:
        """Connect; raises :class:`BrokerConnectError` if the broker cannot be reached or refuses us."""
        self._sender.telemetry = attach_telemetry(self)  # OpenTelemetry, or None: then a request costs one test
        self._sender.home = asyncio.get_running_loop()  # where requests are sent from (client/_home_loop.py)
        await self._keeper.connect()

    async def close(self) -> None:
        """Stop watches, disconnect, and fail whatever is still in flight. Safe to call twice."""
        if self._keeper.state is ConnectionState.CLOSED:
            return
        if (home := self._sender.home) is not None and asyncio.get_running_loop() is not home:
            return await close_from_elsewhere(home, self.close, self._abandon)  # client/_home_loop.py

        self._closed.set()

        def fail_in_flight() -> None:
            self._sender.pending.fail_all(ClientStateError("the client was closed"))

        await self._keeper.close(fail_in_flight)
        self._sender.pending.stop()
        for task in list(self._tasks):
            task.cancel()
        self._watches.close()
        self._keeper.wake()  # waiters see CLOSED

    async def __aenter__(self) -> AsyncStateStoreClient:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the client is connected (e.g. after a drop); :class:`ConnectionLostError` on timeout."""
        await self._keeper.connection(_check_timeout(timeout))

    def _dropped(self) -> None:
        self._scan.forget()  # the next connection may reach another service version
        self._watches.dropped()  # the service dropped our registrations
        if not self._reconnect:
            self._watches.lost_for_good()  # no reconnect will restore them: the watches' iterations end

    def _reconnected(self) -> None:
        task = asyncio.get_running_loop().create_task(self._watches.restore(), name=f"sskv-restore-{self.client_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- requests -----------------------------------------------------------------------------------------

    def _timeout(self, timeout: float | UnsetType | None) -> float | None:
        if timeout is UNSET:
            return self.timeout
        return _check_timeout(timeout)

    def _request(
        self, cmd: _Base[Any], *, timeout: float | None, fencing_token: Hlc | None = None, persist: bool = False
    ) -> Coroutine[Any, Any, tuple[bytes, HybridLogicalClock | None]]:
        """:meth:`_send_request`, in a client span when OpenTelemetry is on (sskv_mapping/_telemetry.py). A plain
        function returning the coroutine to await: no frame of its own between a call and its request."""
        telemetry = self._sender.telemetry
        if telemetry is None:
            return self._send_request(cmd, timeout, fencing_token, persist)
        return telemetry.request(self._send_request, cmd, timeout, fencing_token, persist)

    def _send_request(
        self,
        cmd: _Base[Any],
        timeout: float | None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
    ) -> Coroutine[Any, Any, tuple[bytes, HybridLogicalClock | None]]:
        """Send one command: the coroutine giving ``(reply payload, response __ts)``; header errors raise there.
        The arguments are checked here, at once; :meth:`RequestSender.request` does the rest (architecture.md)."""
        if fencing_token is not None and not isinstance(fencing_token, HybridLogicalClock):
            raise ConfigurationError(f"fencing_token must be a HybridLogicalClock, not {type(fencing_token).__name__}")
        payload = cmd.encode()
        if self.max_payload is not None:
            _check_max_payload(cmd.VERB, payload, self.max_payload)
        if type(cmd) is Set:  # the key and value limits: a SET that could never be read back or notified
            conn = self._keeper.conn
            _check_limits(cmd.key, cmd.value, conn.max_packet_size if conn is not None else None)
        elif type(cmd) is KeyNotify and not cmd.stop and (reason := limits.watch_too_long(self.client_id, cmd.key)):
            raise ValueTooLargeError(reason, size=len(cmd.key), limit=limits.MAX_KEY_BYTES)  # never notified: refused
        return self._sender.request(cmd, payload, timeout, fencing_token, persist)

    def _clock_behind(self, exc: ClockDriftError) -> None:
        self.clock_drift_warnings += 1
        if self.clock_drift_warnings == 1 or self.clock_drift_warnings % 1000 == 0:
            log.warning(
                "this machine's clock is behind the state store's (%d time(s)): %s", self.clock_drift_warnings, exc
            )

    async def get(self, key: KeyLike, *, timeout: float | UnsetType | None = UNSET) -> Entry | None:
        """The key's value and version, or ``None`` if it does not exist."""
        cmd = _new(Get)  # Get(store_key(key))
        _set_get_key(cmd, store_key(key))
        sender = self._sender
        if sender.telemetry is None:
            # _request's and _send_request's work for a GET, in this frame (one per read): the timeout checked, the
            # request encoded and held to max_payload, then sent
            seconds = self.timeout if timeout is UNSET else _check_timeout(timeout)
            request = cmd.encode()
            if self.max_payload is not None:
                _check_max_payload(b"GET", request, self.max_payload)
            payload, version = await sender.request(cmd, request, seconds, None, False)
        else:
            payload, version = await self._request(cmd, timeout=self._timeout(timeout))
        value = cmd.decode(payload)
        if value is None:
            return None
        entry = _new(Entry)  # Entry(value, version)
        _set_entry_value(entry, value)
        _set_entry_version(entry, version)
        return entry

    async def set(
        self,
        key: KeyLike,
        value: bytes,
        *,
        condition: SetCondition | None = None,
        ttl: TtlLike = None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
        timeout: float | UnsetType | None = UNSET,
    ) -> SetResult:
        """Store ``value``. ``condition=SetCondition.NX`` only if absent, ``NEX`` only if absent or equal;
        ``ttl`` in seconds (``None``: never expires); ``fencing_token`` for keys protected by a lock."""
        if condition is not None and not isinstance(condition, SetCondition):
            raise ConfigurationError(f"condition must be a SetCondition or None, not {condition!r}")
        if fencing_token is not None and not isinstance(fencing_token, HybridLogicalClock):
            raise ConfigurationError("fencing_token must be a HybridLogicalClock")
        cmd = _new(Set)  # Set(store_key(key), _value_bytes(value), condition, ttl_to_ms(ttl))
        set_key, set_value, set_condition, set_expiry = _set_set_fields
        set_key(cmd, data_key := store_key(key))
        set_value(cmd, data := value if type(value) is bytes else _value_bytes(value))
        set_condition(cmd, condition)
        set_expiry(cmd, None if ttl is None else ttl_to_ms(ttl))
        sender = self._sender
        if sender.telemetry is None:
            # _request's and _send_request's work for a SET, in this frame (one per write): the timeout checked,
            # the request encoded and held to max_payload and the key and value limits, then sent
            seconds = self.timeout if timeout is UNSET else _check_timeout(timeout)
            request = cmd.encode()
            if self.max_payload is not None:
                _check_max_payload(b"SET", request, self.max_payload)
            conn = self._keeper.conn
            most = conn.max_packet_size if conn is not None else None
            # _check_limits' two tests (limits.key_too_long, value_too_large), inline: it raises when one fails
            bound = limits.WRITE_BOUND if most is None or most > limits.WRITE_BOUND else most
            key_length = len(data_key)
            if key_length > limits.MAX_KEY_BYTES or len(data) > bound - limits.NOTIFY_OVERHEAD - 2 * key_length:
                _check_limits(data_key, data, most)
            payload, version = await sender.request(cmd, request, seconds, fencing_token, persist)
        else:
            payload, version = await self._request(
                cmd, timeout=self._timeout(timeout), fencing_token=fencing_token, persist=persist
            )
        result = _new(SetResult)  # SetResult(cmd.decode(payload), version)
        _set_result_applied(result, cmd.decode(payload))
        _set_result_version(result, version)
        return result

    def check_set(
        self,
        key: KeyLike,
        value: bytes,
        *,
        condition: SetCondition | None = None,
        ttl: TtlLike = None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
    ) -> None:
        """Raise :class:`ValueTooLargeError` if :meth:`set` with these arguments would be refused for its size,
        without sending anything: over ``max_payload``, a key or value over its limit (docs/reliability.md,
        "Limits"), or a PUBLISH over the broker's Maximum Packet Size
        (estimated from above, within a few bytes). For callers that write something else first (the dict's
        index entry of a new key): a value that cannot be stored must not leave that behind. Not connected:
        only ``max_payload`` is checked (the broker's limit is known after CONNACK)."""
        conn = self._keeper.conn
        # the transports' max_packet_size (the Connection protocol gains it with the stream transport's limits)
        limit = conn.max_packet_size if conn is not None else None
        skey, svalue = store_key(key), _value_bytes(value)
        if self.max_payload is None and (
            not isinstance(limit, int)
            or len(skey) + len(svalue) + 4 * len(self.client_id.encode()) + _ROUGH_OVERHEAD < limit
        ):
            _check_limits(skey, svalue, limit)
            return  # the usual case, without encoding anything: far under the limit, or no limit
        payload = Set(skey, svalue, condition, ttl_to_ms(ttl)).encode()
        _check_max_payload(b"SET", payload, self.max_payload)
        _check_limits(skey, svalue, limit)
        if isinstance(limit, int):
            props = headers.request_properties(self.client_id, self.hlc.current, fencing_token, persist)
            _check_packet_estimate(self._sender.response_topic, props, payload, limit)

    async def delete(
        self,
        key: KeyLike,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> bool:
        """Delete the key; ``True`` if it existed."""
        cmd = Delete(store_key(key))
        payload, _ = await self._request(cmd, timeout=self._timeout(timeout), fencing_token=fencing_token)
        return cmd.decode(payload)

    async def vdelete(
        self,
        key: KeyLike,
        value: bytes,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> VDeleteResult:
        """Delete the key only if its value equals ``value``: DELETED, NOT_FOUND or VALUE_MISMATCH."""
        cmd = VDelete(store_key(key), _value_bytes(value))
        payload, _ = await self._request(cmd, timeout=self._timeout(timeout), fencing_token=fencing_token)
        return cmd.decode(payload)

    # -- listing (the pager lives in _scan) ---------------------------------------------------------------

    def scan_pages(
        self,
        pattern: KeyLike,
        *,
        timeout: float | UnsetType | None = UNSET,
        page_timeout: float | UnsetType | None = UNSET,
    ) -> AsyncIterator[list[bytes]]:
        """The keys matching the glob ``pattern`` (docs/design/protocol.md §8), a list per service page (empty too);
        ``timeout`` bounds the listing (default ``SCAN_TIMEOUT_FACTOR`` x the client's), ``page_timeout`` a page
        (a failed page is asked again with its token). Pattern checked now (empty: ConfigurationError)."""
        return self._scan_pages(scan_pattern(pattern), timeout, page_timeout)

    def scan(
        self,
        pattern: KeyLike,
        *,
        timeout: float | UnsetType | None = UNSET,
        page_timeout: float | UnsetType | None = UNSET,
    ) -> AsyncIterator[bytes]:
        """Every key matching ``pattern``, page after page: ``async for key in client.scan(escape_glob(ns) + b"*")``.
        Like :meth:`scan_pages`; no order, and keys written during the listing may be missed or seen twice."""
        return keys_of(self._scan_pages(scan_pattern(pattern), timeout, page_timeout))

    def _scan_pages(self, pattern: bytes, timeout: Any, page_timeout: Any) -> AsyncGenerator[list[bytes], None]:
        default = None if self.timeout is None else SCAN_TIMEOUT_FACTOR * self.timeout
        listing = default if timeout is UNSET else _check_timeout(timeout)
        return scan_pages(self._request, pattern, listing, self._timeout(page_timeout), self._scan)

    @property
    def supports_scan(self) -> bool | None:
        """Does the service on this connection answer SCAN? ``None`` until a first page told (reset on reconnect)."""
        return self._scan.supported

    # -- watches (the registrations live in _watches.Watches) ----------------------------------------------

    def watch(self, key: KeyLike) -> AsyncKeyWatch:
        """Watch one key: ``async with client.watch("k") as w: async for ev in w: ...``.

        Events come in version order, each change at most once, and after every reconnect the key's latest value
        is delivered (:class:`AsyncKeyWatch` says how)."""
        return AsyncKeyWatch(self.subscribe_key, store_key(key))

    async def subscribe_key(
        self, key: KeyLike, callback: EventSink, *, timeout: float | UnsetType | None = UNSET
    ) -> KeySubscription:
        """Call ``callback(event)`` on the loop thread for every change of ``key`` until closed.

        Many subscribers of one key share one KEYNOTIFY registration; the last to leave sends STOP.
        Returns once the service has confirmed the registration. Events come as :meth:`watch` promises: in version
        order, each change at most once, the latest value after every reconnect.
        """
        return await self._watches.add(store_key(key), callback, self._timeout(timeout))

    @property
    def watched_keys(self) -> list[bytes]:
        """The keys with a KEYNOTIFY registration held by this client."""
        return self._watches.keys

    @property
    def duplicate_notifications(self) -> int:
        """Notifications dropped as duplicates (a version not newer than one already delivered for the key)."""
        return self._watches.duplicate_notifications


# -------------------------------------------------------------------------------------------------------
# the blocking twin


class KeyWatch(BlockingTwin):
    """Blocking iterator over the changes of one key (see :class:`AsyncKeyWatch`)."""

    def __init__(self, client: StateStoreClient, key: bytes) -> None:
        super().__init__()
        self._watch = client.async_client.watch(key)
        self.key = key

    def start(self) -> KeyWatch:
        """Register the watch (KEYNOTIFY) now; iterating or ``with`` does it too. Returns the watch."""
        self._run(self._watch.start())
        return self

    def __enter__(self) -> KeyWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[KeyEvent]:
        while True:
            try:
                yield self._run(self._watch.__anext__())
            except StopAsyncIteration:
                return

    def next(self, timeout: float | None = None) -> KeyEvent:
        """The next event, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        return self._run(self._watch.next(timeout))

    def close(self) -> None:
        """Stop watching: the iteration ends after the events already queued."""
        self._run(self._watch.aclose())


class StateStoreClient(BlockingTwin):
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
        backoff_max: float = 30.0,
        wall_clock_ms: Clock = system_clock_ms,
        settings: ConnectionSettings | None = None,
        connection_factory: ConnectionFactory | None = None,
        max_payload: int | None = None,
        sat_token_provider: Callable[[], str | bytes] | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        super().__init__()
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
            wall_clock_ms=wall_clock_ms,
            settings=settings,
            connection_factory=connection_factory,
            max_payload=max_payload,
            sat_token_provider=sat_token_provider,
            max_in_flight=max_in_flight,
        )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> StateStoreClient:
        """``StateStoreClient.from_url("mqtt://127.0.0.1:1883")``; also a connection string or ``"env:"``."""
        return cls(settings=settings_from_options(url, pop_connection_options(kwargs)), **kwargs)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> StateStoreClient:
        """The blocking twin of :meth:`AsyncStateStoreClient.from_environment`."""
        return cls(
            settings=settings_from_options(ENV_LOCATION, pop_connection_options(kwargs), environ=environ), **kwargs
        )

    @property
    def async_client(self) -> AsyncStateStoreClient:
        """The async client this facade drives (lives on the background loop thread)."""
        return self._async

    @property
    def client_id(self) -> str:
        """The MQTT client id (the service's notifications and locks name it)."""
        return self._async.client_id

    @property
    def state(self) -> ConnectionState:
        """Where the connection is now (connected, reconnecting, closed, ...)."""
        return self._async.state

    @property
    def settings(self) -> ConnectionSettings:
        """The connection settings this client was made with."""
        return self._async.settings

    def stats(self) -> ClientStats:
        return self._async.stats()

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

    def get(self, key: KeyLike, *, timeout: float | UnsetType | None = UNSET) -> Entry | None:
        return self._run(self._async.get(key, timeout=timeout))

    def set(
        self,
        key: KeyLike,
        value: bytes,
        *,
        condition: SetCondition | None = None,
        ttl: TtlLike = None,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
        timeout: float | UnsetType | None = UNSET,
    ) -> SetResult:
        return self._run(
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

    def delete(
        self,
        key: KeyLike,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> bool:
        return self._run(self._async.delete(key, fencing_token=fencing_token, timeout=timeout))

    def vdelete(
        self,
        key: KeyLike,
        value: bytes,
        *,
        fencing_token: HybridLogicalClock | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> VDeleteResult:
        return self._run(self._async.vdelete(key, value, fencing_token=fencing_token, timeout=timeout))

    def scan_pages(
        self,
        pattern: KeyLike,
        *,
        timeout: float | UnsetType | None = UNSET,
        page_timeout: float | UnsetType | None = UNSET,
    ) -> Iterator[list[bytes]]:
        """Like the async twin: one list per service page; the pattern is checked now, before any I/O."""
        return self._pages(self._async.scan_pages(pattern, timeout=timeout, page_timeout=page_timeout))

    def _pages(self, pages: AsyncIterator[list[bytes]]) -> Iterator[list[bytes]]:
        try:
            while True:
                try:
                    yield self._run(_next_page(pages))
                except StopAsyncIteration:
                    return
        finally:
            self._run(_close_pages(pages))

    def scan(
        self,
        pattern: KeyLike,
        *,
        timeout: float | UnsetType | None = UNSET,
        page_timeout: float | UnsetType | None = UNSET,
    ) -> Iterator[bytes]:
        """Like the async twin: every key matching ``pattern`` (one hop to the loop thread per page, not per key)."""
        pages = self.scan_pages(pattern, timeout=timeout, page_timeout=page_timeout)
        return (key for page in pages for key in page)

    @property
    def supports_scan(self) -> bool | None:
        return self._async.supports_scan

    def watch(self, key: KeyLike) -> KeyWatch:
        return KeyWatch(self, store_key(key))

    def subscribe_key(
        self, key: KeyLike, callback: EventSink, *, timeout: float | UnsetType | None = UNSET
    ) -> KeySubscription:
        """Like the async twin; ``callback`` runs on the background loop thread and must not block."""
        return self._run(self._async.subscribe_key(key, callback, timeout=timeout))

    def add_state_listener(self, listener: StateListener) -> Callable[[], None]:
        return self._async.add_state_listener(listener)

    @property
    def timeout(self) -> float | None:
        """The default per-request timeout (seconds; ``None``: wait forever)."""
        return self._async.timeout

    @property
    def watched_keys(self) -> list[bytes]:
        """The keys with a KEYNOTIFY registration held by this client."""
        return self._async.watched_keys


async def _next_page(pages: AsyncIterator[list[bytes]]) -> list[bytes]:
    return await pages.__anext__()


async def _close_pages(pages: AsyncIterator[list[bytes]]) -> None:
    aclose = getattr(pages, "aclose", None)
    if aclose is not None:
        await aclose()
