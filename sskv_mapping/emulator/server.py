"""Serves an :class:`~sskv_mapping.emulator.core.EmulatorCore` over MQTT, like the real service.

What it does and where it is more lenient: docs/design/architecture.md, "The emulator's parts".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._protocol import headers
from .._protocol.hlc import HybridLogicalClock, system_clock_ms
from .._protocol.mqtt_publish import OutgoingMessage, PackedUserProperties
from .._protocol.resp3 import encode_request
from .._protocol.topics import REQUEST_TOPIC, is_forbidden_response_topic, is_topic_name, response_topic
from .._transport.backoff import Backoff
from .._transport.base import Connection, ConnectionFactory, InboundMessage
from .._transport.factory import new_connection
from .._transport.settings import ConnectionSettings
from .._transport.stream import StreamConnection
from ..errors import ServiceUnavailableError, StateStoreError, TransportError
from . import _telemetry as otel
from ._persistence import PersistenceFile
from .broker import LOG_TOPIC_FILTER, parse_connection_log
from .core import CoreResult, EmulatorCore, Notification
from .outbox import Outbox

__all__ = ["READY_TEXT", "EmulatorServer", "RequestTap", "client_id_from_response_topic", "serving_already"]

#: In the line the emulator prints once its request subscription is acknowledged: what every launcher waits for.
READY_TEXT = "serving state store on"

#: What :attr:`EmulatorServer.tap` is called with after each request served: the requester's client id, the request
#: payload (``None``: keys expired on the timer), the core's answer and the request's W3C ``traceparent`` (if any).
RequestTap = Callable[[str | None, bytes | None, CoreResult, str | None], None]

log = logging.getLogger("sskv_mapping.emulator")

_LOG_TOPIC_PREFIX = "$SYS/broker/log/"
_RESPONSE_CONTENT_TYPE = headers.CONTENT_TYPE
#: the properties of a 200 reply without a __ts (shared: never changed; encoded once, PackedUserProperties)
_NO_VERSION_PROPERTIES = PackedUserProperties(headers.response_properties(None))
_UNSUPPORTED_VERSION_MESSAGE = "unsupported protocol version {!r}; this service supports major version 1"
_RECONNECT_MIN_S = 0.05
_RECONNECT_MAX_S = 2.0
#: how long a probe waits for the answer of a subscriber of the request topic (one that does not answer: not a service)
PROBE_WAIT_S = 1.0
_PROBE_KEY = b"__sskv-emulator-probe"
# mosquitto's log line when a session's queue is full: "Outgoing messages are being dropped for client X."
_DROPPING = "Outgoing messages are being dropped for client "


#: the last response topic that passed is_forbidden_response_topic (any server of this process; a str: replaced whole)
_allowed_topic = ""
#: the last version a reply carried and that reply's properties (one tuple, replaced whole: safe across threads)
_last_reply: tuple[HybridLogicalClock | None, Sequence[tuple[str, str]]] = (None, ())


def _reply_properties(version: HybridLogicalClock | None) -> Sequence[tuple[str, str]]:
    """``headers.response_properties(version)``, built and encoded once per version: every GET of an unchanged key
    answers with the same ``__ts``."""
    global _last_reply
    if version is None:
        return _NO_VERSION_PROPERTIES
    last = _last_reply
    if last[0] is version:
        return last[1]
    props = PackedUserProperties(headers.response_properties(version))
    _last_reply = (version, props)
    return props


def client_id_from_response_topic(topic: str) -> str | None:
    """``clients/{id}/...`` → ``id`` (``clients/{id}/services/...`` is preferred: ids may contain ``/``)."""
    if not topic.startswith("clients/"):
        return None
    rest = topic[len("clients/") :]
    end = rest.find("/services/")
    if end < 0:
        end = rest.find("/")
    client_id = rest[:end] if end >= 0 else rest
    return client_id or None


def _protocol_major_ok(version: str) -> bool:
    head = version.split(".", 1)[0]
    return head == "1" or (head.isascii() and head.isdigit() and len(head) < 10 and int(head) == 1)


class EmulatorServer:
    """Serves the state store on an MQTT broker until :meth:`stop` is called.

    Args:
        settings: how to reach the broker and the emulator's own MQTT client id.
        core: the state machine to serve (a new one with the real clock when ``None``).
        connection_factory: builds the connection (``_transport.choice.new_connection`` by default: the fast
            path, or the paho transport with ``SSKV_MQTT_TRANSPORT=paho``; tests may wrap it).
        persist_file: where entries written with ``aio-persistence: true`` are kept; loaded by
            :meth:`run` if it exists, rewritten shortly after each persistent change and at shutdown.
        now_ms: the wall clock the expiry timer compares ``core.next_expiry()`` with (default: the core's).
        on_ready: called once with :meth:`ready_message` when the first subscriptions are acknowledged.

    Example::

        server = EmulatorServer(ConnectionSettings("127.0.0.1", 1883, client_id="sskv-emulator"))
        task = asyncio.create_task(server.run())
        await server.wait_ready()
        ...
        server.stop()
        await task
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        core: EmulatorCore | None = None,
        *,
        connection_factory: ConnectionFactory | None = None,
        persist_file: str | os.PathLike[str] | None = None,
        now_ms: Callable[[], int] | None = None,
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.core = core if core is not None else EmulatorCore(now_ms=now_ms or system_clock_ms)
        self._factory: ConnectionFactory = connection_factory or new_connection
        self._on_ready = on_ready
        self._conn: Connection | None = None
        # asyncio.Event binds to the running loop on first use, not here.
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._timer = _ExpiryTimer(self.core, now_ms or self.core.now_ms, self._expire_due)
        self._publishes: set[asyncio.Task[None]] = set()
        #: Counters for logs and tests.
        self.stats: dict[str, int] = {
            "requests": 0,
            "ignored": 0,
            "errors": 0,
            "notifications": 0,
            "publish_failures": 0,
            "too_large": 0,
            "duplicates": 0,
            "dropped_clients": 0,
            "connections": 0,
            "broker_drops_reported": 0,
            "persist_failures": 0,
        }
        self._persistence = None if persist_file is None else PersistenceFile(Path(persist_file), self.core, self.stats)
        #: the reply and notification side: publishes in order, waiting for room rather than dropping
        self.outbox = Outbox(lambda: self._conn, self.stats, self._publishes)
        # clients mosquitto said it drops messages for, so that each is reported once at WARNING
        self._dropping_for: set[str] = set()
        #: Called after every request served and every expiry, while an inspector page listens (``None``
        #: otherwise: then serving a request costs one attribute test and builds nothing for it).
        self.tap: RequestTap | None = None
        otel.refresh()  # OpenTelemetry in this process, looked at again (emulator/_telemetry.py)

    # -- lifecycle ------------------------------------------------------------------------------------

    def ready_message(self) -> str:
        """The readiness line: every launcher waits for its :data:`READY_TEXT`."""
        return (
            f"sskv emulator: {READY_TEXT} {self.settings.url} "
            f"(topic {REQUEST_TOPIC}, client id {self.settings.client_id})"
        )

    @property
    def ready(self) -> bool:
        """True once the first request subscription was acknowledged."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        """Return once the first request subscription is acknowledged (``run`` must be running)."""
        await self._ready.wait()

    def stop(self) -> None:
        """Ask :meth:`run` to finish: flush pending publishes, disconnect, save. Safe from signal handlers."""
        self._stop.set()

    async def run(self) -> None:
        """Serve until :meth:`stop`. Connection drops are retried with backoff; a failure to connect the
        very first time raises :class:`~sskv_mapping.errors.TransportError` (nothing was served yet)."""
        persistence = self._persistence
        if persistence is not None:
            persistence.load()
        helpers = [asyncio.create_task(self._timer.run(), name="sskv-emulator-expiry")]
        if persistence is not None:
            helpers.append(asyncio.create_task(persistence.run(), name="sskv-emulator-persist"))
        try:
            await self._serve()
        finally:
            for task in helpers:
                task.cancel()
            for task in helpers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._shutdown_connection()
            if persistence is not None:
                persistence.save()

    async def _serve(self) -> None:
        backoff = Backoff(_RECONNECT_MIN_S, _RECONNECT_MAX_S, jitter=False)
        previous: Connection | None = None
        while not self._stop.is_set():
            conn = self._factory(self.settings, self._on_message)
            if previous is not None:  # the session's replies not yet acknowledged go again (a kept session)
                conn.carry_over(previous)
            previous = conn
            if isinstance(conn, StreamConnection):
                # no new requests while our replies cannot leave: the reply backlog stays bounded
                conn.read_flow_control = True
            try:
                await conn.connect()
                self._conn = conn
                # SETs whose value could not be notified through this broker are refused (protocol limits)
                self.core.max_packet_size = conn.max_packet_size
                await self._subscribe(conn)
            except (TransportError, OSError) as exc:
                self._conn = None
                with contextlib.suppress(Exception):
                    await conn.close(end_session=False)
                if not self._ready.is_set():
                    raise TransportError(f"cannot serve on {self.settings.url}: {exc}") from exc
                delay = backoff.next()
                log.warning("reconnecting to %s failed (%s); retrying in %.2f s", self.settings.url, exc, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                continue
            backoff.reset()
            self.stats["connections"] += 1
            if not self._ready.is_set():
                self._ready.set()
                if self._on_ready is not None:
                    self._on_ready(self.ready_message())
                log.info("%s", self.ready_message())
            else:
                log.warning("reconnected to %s; serving again", self.settings.url)
            if await self._wait_closed_or_stopped(conn):
                return
            self._conn = None
            log.warning("lost the connection to %s; reconnecting", self.settings.url)

    async def _subscribe(self, conn: Connection) -> None:
        # The log subscription first: once requests flow, every disconnect must already be visible.
        try:
            await conn.subscribe([LOG_TOPIC_FILTER], qos=1)
        except TransportError as exc:
            if "refused" not in str(exc):
                raise
            log.warning(
                "the broker refused %s (%s): registrations of disconnected clients will not be dropped",
                LOG_TOPIC_FILTER,
                exc,
            )
        await conn.subscribe([REQUEST_TOPIC], qos=1)

    async def _wait_closed_or_stopped(self, conn: Connection) -> bool:
        """True when stop() was called, False when the connection dropped."""
        closed = asyncio.ensure_future(conn.wait_closed())
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (closed, stopped):
                fut.cancel()
            for fut in (closed, stopped):
                with contextlib.suppress(asyncio.CancelledError, StateStoreError):
                    await fut
        return self._stop.is_set()

    async def _shutdown_connection(self) -> None:
        pending = list(self._publishes)
        if pending:  # responses already started: give them a moment to be acknowledged
            await asyncio.wait(pending, timeout=2.0)
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        for task in list(self._publishes):
            task.cancel()

    # -- inbound --------------------------------------------------------------------------------------

    def _on_message(self, message: InboundMessage) -> None:
        try:
            if message.topic == REQUEST_TOPIC:
                if otel.current is None:
                    self._handle_request(message)
                else:  # OpenTelemetry: the request in a server span continuing the caller's trace
                    otel.current.serve(self._handle_request, message)
            elif message.topic.startswith(_LOG_TOPIC_PREFIX):
                self._handle_log(message.payload)
        except Exception:  # never let one message stop the service
            self.stats["errors"] += 1
            log.exception("failed to handle a message on %r", message.topic)

    def _handle_log(self, payload: bytes) -> None:
        text = payload.decode("utf-8", "replace")
        if _DROPPING in text:
            self._broker_drops(text)
            return
        event = parse_connection_log(text)
        if event is None or event[0] != "disconnected":
            return
        dropped = self.core.drop_client(event[1])
        if dropped:
            self.stats["dropped_clients"] += 1
            log.debug("client %r disconnected: dropped %d registration(s)", event[1], dropped)

    def _broker_drops(self, line: str) -> None:
        """mosquitto says it drops messages for a client (its queue is full): replies or notifications are being
        lost, which the client sees as timeouts and the local cache as missed changes. Said once per client."""
        self.stats["broker_drops_reported"] += 1
        client = line.split(_DROPPING, 1)[1].rstrip(" .\r\n")
        if client in self._dropping_for or len(self._dropping_for) > 1000:
            return
        self._dropping_for.add(client)
        log.warning(
            "the broker is dropping messages for client %r: its queue is full (mosquitto's max_queued_messages, "
            "default 1,000). Raise the broker's limits (sskv emulator --with-broker does; see the README's "
            "'The emulator'), and check that client keeps up",
            client[:200],
        )

    def _handle_request(self, message: InboundMessage) -> None:
        correlation = message.correlation_data
        response_topic = message.response_topic
        if correlation is None or not response_topic:
            self.stats["ignored"] += 1
            log.debug(
                "ignoring a request without %s",
                "correlation data" if correlation is None else "a response topic",
            )
            return
        global _allowed_topic
        if response_topic != _allowed_topic:
            if is_forbidden_response_topic(response_topic):
                # The real service disconnects such a client; the emulator cannot, so it stays silent.
                self.stats["ignored"] += 1
                log.warning("ignoring a request with the forbidden response topic %r", response_topic[:200])
                return
            if not is_topic_name(response_topic):
                # MQTT 5 [MQTT-3.3.2-14]: a Response Topic holds no wildcard. No reply can go there, and what the
                # service does is not documented (docs/design/protocol.md): not applied, so no write goes unanswered.
                self.stats["ignored"] += 1
                log.warning("ignoring a request whose response topic %r is not a topic name", response_topic[:200])
                return
        _allowed_topic = response_topic  # a requester's next requests: the same topic, not checked again
        # the first occurrence of a name wins, as InboundMessage.user_property: built from the last pair to the first
        props: dict[str, str] = dict(reversed(message.user_properties))
        self.stats["requests"] += 1
        version = props.get(headers.PROT_VER)
        if version is not None and version != headers.PROTOCOL_VERSION and not _protocol_major_ok(version):
            self.outbox.publish(
                response_topic,
                b"",
                correlation,
                [
                    *headers.response_properties(None, 505, _UNSUPPORTED_VERSION_MESSAGE.format(version[:40])),
                    (headers.SUPPORTED_MAJOR, "1"),
                ],
                _RESPONSE_CONTENT_TYPE,
            )
            return
        client_id = props.get(headers.SOURCE_ID) or client_id_from_response_topic(response_topic)
        try:
            result = self.core.handle(client_id, message.payload, props, correlation)
        except Exception as exc:  # a bug in the core: answer 500 rather than leave the caller waiting
            self.stats["errors"] += 1
            log.exception("the core failed on a request")
            self.outbox.publish(
                response_topic,
                b"",
                correlation,
                headers.response_properties(None, 500, f"internal error: {type(exc).__name__}"),
                _RESPONSE_CONTENT_TYPE,
            )
            return
        stamp, last = result.version, _last_reply
        self.outbox.publish_on(  # self.outbox.publish, without its calls
            self._conn,
            response_topic,
            result.payload,
            correlation,
            last[1] if stamp is last[0] and stamp is not None else _reply_properties(stamp),
            _RESPONSE_CONTENT_TYPE,
        )
        if result.duplicate:  # answered again; nothing changed, nothing to notify or show
            self.stats["duplicates"] += 1
            return
        if result.notifications:
            self._publish_notifications(result.notifications)
        # self._after_change(), inline: once per request served
        nxt = self.core.next_expiry()
        if nxt is not None and (self._timer.deadline is None or nxt < self._timer.deadline):
            self._timer.wake.set()
        if self._persistence is not None and self.core.persistence_generation != self._persistence.saved_generation:
            self._persistence.wake.set()
        tap = self.tap
        if tap is not None:
            tap(client_id, message.payload, result, props.get("traceparent"))

    def handle_local(self, payload: bytes, props: dict[str, str]) -> CoreResult:
        """Serve one request that did not come over MQTT (the inspector's writes): the core answers it, and its
        notifications go to the watchers as for any request. KEYNOTIFY is refused (no client id to notify)."""
        self.stats["requests"] += 1
        result = self.core.handle(None, payload, props)
        if result.notifications:
            self._publish_notifications(result.notifications)
        self._after_change()
        tap = self.tap
        if tap is not None:
            tap(props.get(headers.SOURCE_ID), payload, result, props.get("traceparent"))
        return result

    # -- outbound (sskv_mapping.emulator.outbox) --------------------------------------------------------------

    def _publish_notifications(self, notes: list[Notification]) -> None:
        if otel.current is not None:  # a producer span per notification, linked to the write's span
            otel.current.notified([(note.topic, note.payload) for note in notes])
        self.outbox.notify(notes)

    # -- expiry and persistence -------------------------------------------------------------------------

    def clock_jumped(self) -> None:
        """Look at the expiry timer again now: the injected clock moved (a test's fake clock was advanced).

        Call it on the server's event loop. Keys whose expiry time has come are deleted, and their watchers
        notified, as soon as the loop runs; without it the timer would sleep out the real-time delay it computed.
        """
        self._timer.wake.set()

    def _after_change(self) -> None:
        nxt = self.core.next_expiry()
        if nxt is not None and (self._timer.deadline is None or nxt < self._timer.deadline):
            self._timer.wake.set()
        if self._persistence is not None and self.core.persistence_generation != self._persistence.saved_generation:
            self._persistence.wake.set()

    def _expire_due(self) -> None:
        notes = self.core.expire_due()
        if notes:
            self._publish_notifications(notes)
        self._after_change()
        tap = self.tap
        if tap is not None:
            tap(None, None, CoreResult(b"", None, notes), None)


class _ExpiryTimer:
    """Sleeps until the core's next expiry time (``core.next_expiry()``, against ``now_ms``), then has ``expire``
    delete the keys due: their watchers get DELETE even when nobody touches them. ``wake``: look again now."""

    def __init__(self, core: EmulatorCore, now_ms: Callable[[], int], expire: Callable[[], None]) -> None:
        self._core = core
        self._now_ms = now_ms
        self._expire = expire
        self.wake = asyncio.Event()  # binds to the running loop on first use, not here
        self.deadline: int | None = None  # the expiry time slept until

    async def run(self) -> None:
        wake = self.wake
        while True:
            wake.clear()
            nxt = self.deadline = self._core.next_expiry()
            if nxt is None:
                await wake.wait()
                continue
            delay = (nxt - self._now_ms()) / 1000
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), delay)
                continue
            try:
                self._expire()
            except Exception:
                log.exception("expiring keys failed")
                await asyncio.sleep(0.1)  # do not spin on a persistent failure


async def serving_already(
    settings: ConnectionSettings, factory: ConnectionFactory = new_connection, wait: float = PROBE_WAIT_S
) -> str | None:
    """Whether a state store already serves the broker of ``settings``: what to say if one does, else ``None``.

    One GET of a probe key is sent to the request topic from a connection of its own. A broker that delivers it to
    nobody says so at once (PUBACK 0x10): nothing is waited for. Delivered, the answer is waited for up to ``wait``
    seconds; a subscriber that stays silent (a sniffer on ``#``, the kept session of a stopped emulator) is not a
    service, and is logged at WARNING. The real service is one per broker."""
    probe_id = f"sskv-emulator-probe-{uuid.uuid4().hex[:12]}"
    correlation = uuid.uuid4().bytes
    answered: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def on_message(message: InboundMessage) -> None:
        if message.correlation_data == correlation and not answered.done():
            answered.set_result(time.monotonic())

    conn = factory(replace(settings, client_id=probe_id, session_expiry=0), on_message)
    try:
        await conn.connect()
        topic = response_topic(probe_id)
        await conn.subscribe([topic], qos=1)
        props = headers.request_properties(probe_id, HybridLogicalClock(system_clock_ms(), 0, probe_id))
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sent = time.monotonic()
        conn.publish_nowait(
            OutgoingMessage(
                REQUEST_TOPIC,
                encode_request(b"GET", _PROBE_KEY),
                1,
                correlation,
                topic,
                props,
                headers.CONTENT_TYPE,
                max(1, int(wait) + 1),
            ),
            refusal=refused,  # fails with ServiceUnavailableError on PUBACK 0x10; never resolves otherwise
        )
        outcomes: set[asyncio.Future[Any]] = {answered, refused}
        await asyncio.wait(outcomes, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        if refused.done():
            if isinstance(refused.exception(), ServiceUnavailableError):
                return None  # PUBACK 0x10: nobody is subscribed to the request topic
            refused.result()  # the broker refused the PUBLISH: raised
        if not answered.done():
            refused.cancel()
            log.warning(
                "a subscriber of %s on %s did not answer a probe within %g s: not a state store, serving anyway",
                REQUEST_TOPIC,
                settings.url,
                wait,
            )
            return None
        refused.cancel()
        at = answered.result()
    except (TransportError, OSError) as exc:
        raise TransportError(f"cannot serve on {settings.url}: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
    return (
        f"a state store already serves on {settings.url} (it answered a probe in {(at - sent) * 1000:.0f} ms): "
        "two would both answer every request, and versions could go backwards. Stop it, or use another broker "
        "(--allow-second-emulator starts anyway)"
    )
