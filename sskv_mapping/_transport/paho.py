"""The paho transport, over aiomqtt and paho: the ONLY module that imports them.

An independent implementation of the same contract, selected by ``SSKV_MQTT_TRANSPORT=paho`` (docs/design/transport.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

import aiomqtt
import paho.mqtt.client as paho_client
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from .._protocol.mqtt_packets import BAD_CREDENTIALS, SESSION_TAKEN_OVER
from .._protocol.mqtt_publish import InboundMessage, OutgoingMessage, message_size
from ..errors import (
    BrokerConnectError,
    ClientStateError,
    ConfigurationError,
    ConnectionLostError,
    CredentialsRefusedError,
    PublishRefusedError,
    RequestTimeoutError,
    ServiceUnavailableError,
    SessionTakenOverError,
    TransportError,
    ValueTooLargeError,
)
from .base import Connection
from .sat import read_sat_token
from .settings import ConnectionSettings
from .tls import ssl_context

__all__ = ["InboundMessage", "PahoConnection", "PahoHooks", "paho_client_of"]


# -- the correctness hooks on paho (the only code that touches aiomqtt's or paho's private names) -------------

#: Every private name of aiomqtt's and paho's ``Client`` this module touches, as ``(owner, name)``, and what for.
_INTERNALS: tuple[tuple[str, str], ...] = (
    # aiomqtt.Client
    ("aiomqtt", "_client"),  # its paho client: where the hooks go, and paho's own publish (no per-message wait)
    ("aiomqtt", "_connected"),  # the CONNACK future: failed at once when the broker closes before CONNACK
    ("aiomqtt", "_pending_publishes"),  # its publish()'s PUBACK waits: its on_publish runs only if there are some
    # paho.Client
    ("paho", "_max_inflight_messages"),  # the in-flight limit, set from CONNACK (the public setter refuses then)
)

_NO_MATCHING_SUBSCRIBERS = 0x10  # a PUBACK reason code: accepted, but no subscription matched


def paho_client_of(client: aiomqtt.Client) -> paho_client.Client:
    """The paho client that ``client`` drives."""
    paho: paho_client.Client = client._client  # noqa: SLF001
    return paho


def _fail_connect(connected: asyncio.Future[Any]) -> None:
    if not connected.done():
        connected.set_exception(aiomqtt.MqttError("the broker closed the connection before CONNACK"))


class PahoHooks:
    """The hooks of one ``aiomqtt.Client``'s paho client, installed before CONNECT; paho's public callbacks,
    each calling aiomqtt's own on.

    aiomqtt keeps owning the connection: CONNECT/TLS/auth, SUBSCRIBE, keepalive, DISCONNECT, reading and
    writing the socket, and reporting the end of the connection.

    * **PUBACK waits**: :meth:`PahoConnection.publish` waits on one future per packet id in :attr:`acks`,
      resolved from paho's ``on_publish`` and failed when the connection ends (aiomqtt's wait only times out);
      a refusing PUBACK fails it, or the future a ``publish_nowait`` caller left in :attr:`refusals`.
    * **Receive Maximum**: paho ignores the server's (CONNACK); MQTT 5 says a client must not have more
      unacknowledged QoS 1 PUBLISHes than that ([MQTT-3.3.4-7]). It becomes paho's in-flight limit: publishes
      beyond it wait in paho's queue and go out as PUBACKs come back.
    * **Maximum Packet Size**: the server's, from CONNACK, kept in :attr:`max_packet_size` for
      :class:`PahoConnection` to refuse a larger PUBLISH before paho sends it ([MQTT-3.2.2-15]).
    * **disconnect before CONNACK**: fails the connect at once instead of after ``connect_timeout``.
    """

    def __init__(self, client: aiomqtt.Client, loop: asyncio.AbstractEventLoop) -> None:
        paho = paho_client_of(client)
        self._aiomqtt = client
        self._loop = loop
        self._thread = threading.get_ident()
        #: packet id -> future of a :meth:`PahoConnection.publish` waiting for its PUBACK
        self.acks: dict[int, asyncio.Future[None]] = {}
        #: packet id -> future that a refusing PUBACK fails (see :meth:`PahoConnection.publish_nowait`)
        self.refusals: dict[int, asyncio.Future[Any]] = {}
        #: the server's Maximum Packet Size from CONNACK (None: it stated none, or no CONNACK yet)
        self.max_packet_size: int | None = None
        #: CONNACK's session present flag
        self.session_present = False
        # aiomqtt's pending-publish table: only its own publish() fills it, and we never call that one.
        self._aiomqtt_pending_publishes: dict[int, Any] = client._pending_publishes  # noqa: SLF001
        # aiomqtt's own callbacks, called on from ours (paho types them as a union of its callback API versions)
        self._aiomqtt_on_publish = cast(Callable[..., None], paho.on_publish)
        self._aiomqtt_on_connect = cast(Callable[..., None], paho.on_connect)
        self._aiomqtt_on_disconnect = cast(Callable[..., None], paho.on_disconnect)
        paho.on_publish = self._on_publish
        paho.on_connect = self._on_connect
        paho.on_disconnect = self._on_disconnect

    def _on_publish(
        self, client: paho_client.Client, userdata: Any, mid: int, reason_code: ReasonCode, properties: Properties
    ) -> None:
        fut = self.acks.pop(mid, None)
        refusal = self.refusals.pop(mid, None) if self.refusals else None
        if reason_code.is_failure:
            # e.g. 0x87 Not authorized: mosquitto's ACL denied the PUBLISH, nothing was delivered
            error = PublishRefusedError(
                f"the broker refused the PUBLISH: {reason_code.getName()} (0x{reason_code.value:02X})"
            )
            for waiter in (fut, refusal):
                if waiter is not None and not waiter.done():
                    waiter.set_exception(error)
        else:
            if reason_code.value == _NO_MATCHING_SUBSCRIBERS and refusal is not None and not refusal.done():
                # Accepted, but delivered to nobody: the state store is not subscribed (not started, or
                # restarting and not yet re-subscribed). A definite "not delivered", unlike a lost response: the
                # requester may send it again. (A plain publish is still acknowledged: it was accepted.)
                refusal.set_exception(ServiceUnavailableError("no subscriber took the PUBLISH (PUBACK 0x10)"))
            if fut is not None and not fut.done():
                fut.set_result(None)
        if self._aiomqtt_pending_publishes:
            self._aiomqtt_on_publish(client, userdata, mid, reason_code, properties)

    def _on_connect(
        self,
        client: paho_client.Client,
        userdata: Any,
        flags: paho_client.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None = None,
    ) -> None:
        maximum = getattr(properties, "ReceiveMaximum", None) if properties is not None else None
        # Nothing is in flight yet (clean start, a new client). 0 is paho's "no limit": what an absent Receive
        # Maximum (65,535) amounts to with 16-bit packet ids, and it spares paho a scan of all in-flight
        # messages per PUBACK.
        limit = maximum if isinstance(maximum, int) and 0 < maximum < 65535 else 0
        client._max_inflight_messages = limit  # noqa: SLF001
        size = getattr(properties, "MaximumPacketSize", None) if properties is not None else None
        self.max_packet_size = size if isinstance(size, int) and size > 0 else None
        self.session_present = bool(getattr(flags, "session_present", False))
        self._aiomqtt_on_connect(client, userdata, flags, reason_code, properties)

    def _on_disconnect(self, client: paho_client.Client, userdata: Any, *args: Any) -> None:
        """End a CONNECT that the broker closed before its CONNACK at once, not after ``connect_timeout``.

        aiomqtt ignores a disconnect before CONNACK (its ``__aenter__`` then waits for the timeout). It happens
        when the TCP connection lands on a broker that is dying or restarting, or when a TLS broker drops a
        client whose certificate it refuses after the handshake.
        """
        connected: asyncio.Future[Any] = self._aiomqtt._connected  # noqa: SLF001
        if threading.get_ident() == self._thread:
            _fail_connect(connected)
        else:  # pragma: no cover - paho reports from the loop thread; be safe if it ever does not
            self._loop.call_soon_threadsafe(_fail_connect, connected)
        self._aiomqtt_on_disconnect(client, userdata, *args)

    def fail_acks(self, exc: BaseException) -> None:
        acks, self.acks = self.acks, {}
        self.refusals = {}  # their owners learn of the drop otherwise (a requester: its pending call fails)
        for fut in acks.values():
            if not fut.done():
                fut.set_exception(exc)


log = logging.getLogger("sskv_mapping.transport")


class _RedactAuthenticationData(logging.Filter):
    """paho (logging through ``log``) writes each CONNECT's properties at DEBUG, the K8S-SAT token in
    Authentication Data included: show those properties with that one value replaced."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, Properties) for arg in record.args):
            record.args = tuple(_redacted(arg) if isinstance(arg, Properties) else arg for arg in record.args)
        return True


def _redacted(props: Properties) -> object:
    if getattr(props, "AuthenticationData", None) is None:
        return props
    shown: dict[str, object] = props.json()  # type: ignore[no-untyped-call]
    shown["AuthenticationData"] = "<redacted>"
    return shown


log.addFilter(_RedactAuthenticationData())


def _convert(message: aiomqtt.Message) -> InboundMessage:
    props = getattr(message, "properties", None)
    if props is not None:
        user = getattr(props, "UserProperty", None) or ()
        corr = getattr(props, "CorrelationData", None)
        response = getattr(props, "ResponseTopic", None)
        ctype = getattr(props, "ContentType", None)
        expiry = getattr(props, "MessageExpiryInterval", None)
    else:
        user, corr, response, ctype, expiry = (), None, None, None, None
    return InboundMessage(
        topic=message.topic.value,
        payload=message.payload if isinstance(message.payload, bytes) else bytes(str(message.payload), "utf-8"),
        qos=message.qos,
        correlation_data=bytes(corr) if corr is not None else None,
        response_topic=response,
        user_properties=tuple((str(k), str(v)) for k, v in user),
        content_type=ctype,
        message_expiry=expiry,
    )


def _dispatching_queue(handler: Callable[[InboundMessage], None]) -> type[asyncio.Queue[Any]]:
    """An ``asyncio.Queue`` class whose ``put_nowait`` hands each message straight to ``handler``.

    aiomqtt's documented ``queue_type`` hook: aiomqtt calls ``put_nowait`` from paho's read callback on the
    event loop thread, so delivering there saves a queue hop and a task wake-up per message.
    """

    class _DispatchQueue(asyncio.Queue[Any]):
        def put_nowait(self, item: Any) -> None:
            try:
                converted = _convert(item)
            except Exception:  # a broken packet must not kill the read loop
                log.exception("dropping an inbound message that could not be converted")
                return
            try:
                handler(converted)
            except Exception:
                log.exception("message handler failed on topic %r", converted.topic)

    return _DispatchQueue


def _publish_properties(message: OutgoingMessage) -> Properties:
    """The PUBLISH properties as paho's own ``Properties`` (paho encodes them: an independent implementation
    of what ``_protocol/mqtt_publish.py`` encodes for the stream transport)."""
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if message.message_expiry is not None:
        props.MessageExpiryInterval = message.message_expiry
    if message.content_type is not None:
        props.ContentType = message.content_type
    if message.response_topic is not None:
        props.ResponseTopic = message.response_topic
    if message.correlation_data is not None:
        props.CorrelationData = message.correlation_data
    for pair in message.user_properties:
        props.UserProperty = pair
    return props


def _reraise_lost_cancel() -> None:
    """Raise ``CancelledError`` if this task was cancelled and the cancel got lost in aiomqtt.

    aiomqtt waits for CONNACK, SUBACK and UNSUBACK with ``asyncio.wait_for``, which on Python 3.11 returns
    the result when the cancel arrives in the loop iteration where the awaited packet did: the caller goes on
    as if never cancelled (fixed in 3.12). The request (``Task.cancel``) is still counted by ``cancelling()``:
    this is how asyncio.timeout and TaskGroup tell their own cancellations apart, too.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _connect_properties(settings: ConnectionSettings) -> Properties | None:
    token = read_sat_token(settings)
    if token is None and not settings.session_expiry:
        return None
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    if settings.session_expiry:
        props.SessionExpiryInterval = settings.session_expiry
    if token is not None:
        props.AuthenticationMethod = "K8S-SAT"
        props.AuthenticationData = token
    return props


def _end_session_on_disconnect(paho: paho_client.Client) -> None:
    """aiomqtt's ``__aexit__`` calls paho's ``disconnect()`` with no arguments: make that one DISCONNECT carry
    Session Expiry 0, so that the broker frees the session now (the instance attribute shadows the method)."""
    disconnect = paho.disconnect
    props = Properties(PacketTypes.DISCONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 0
    paho.disconnect = functools.partial(disconnect, properties=props)  # type: ignore[method-assign]


def _refusal(
    settings: ConnectionSettings, exc: BaseException | None, text: str
) -> SessionTakenOverError | CredentialsRefusedError | None:
    """The typed error for a reason code that no reconnect heals (0x8E, refused credentials), else None."""
    rc = exc.rc if isinstance(exc, aiomqtt.MqttCodeError) else None
    code = rc.value if isinstance(rc, ReasonCode) else None
    if code == SESSION_TAKEN_OVER:
        return SessionTakenOverError(
            f"{text}: Session taken over (0x8E): another connection uses the client id {settings.client_id!r} -- "
            "give each process its own client id",
            client_id=settings.client_id,
        )
    if code in BAD_CREDENTIALS:
        return CredentialsRefusedError(f"{text}: {exc}")
    return None


class PahoConnection:
    """One MQTT 5 connection. Not reusable: after it closes or drops, make a new one.

    ``on_message`` is called on the event loop thread for every inbound PUBLISH; it must not block.
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        on_message: Callable[[InboundMessage], None],
    ) -> None:
        self.settings = settings
        self._on_message = on_message
        self._client: aiomqtt.Client | None = None
        self._hooks: PahoHooks | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._closing = False
        self._carried = False

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def connected(self) -> bool:
        return self._client is not None and self._closed is not None and not self._closed.done()

    @property
    def max_packet_size(self) -> int | None:
        """The broker's Maximum Packet Size from CONNACK; None before CONNACK or when it stated none."""
        return self._hooks.max_packet_size if self._hooks is not None else None

    @property
    def session_present(self) -> bool:
        """Whether the broker resumed a session it kept for our client id (CONNACK session present)."""
        return self._hooks is not None and self._hooks.session_present

    @property
    def keeps_session(self) -> bool:
        """False: each connection is a new paho client, which cannot send again what the previous one had not
        seen acknowledged, so the calls in flight at a drop fail (the broker still keeps the session: the
        subscriptions, and the messages queued while away)."""
        return False

    @property
    def closed_by_broker(self) -> bool:
        """False: paho does not tell a clean close from a reset (only a 0x8E DISCONNECT is seen)."""
        return False

    def carry_over(self, previous: Connection) -> None:
        """Before :meth:`connect`: a reconnect, which asks the broker for the session (CleanStart=0). What
        ``previous`` had in flight is not taken over (see :attr:`keeps_session`)."""
        self._carried = True

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<PahoConnection {self.settings.client_id!r} {self.settings.url} {state}>"

    async def connect(self) -> None:
        """Connect (CONNECT/CONNACK); raises :class:`BrokerConnectError`."""
        if self._client is not None:
            raise ClientStateError("PahoConnection.connect() may be called once")
        s = self.settings
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        client = aiomqtt.Client(
            hostname=s.host,
            port=s.port,
            identifier=s.client_id,
            username=s.username,
            password=s.password,
            protocol=aiomqtt.ProtocolVersion.V5,
            clean_start=s.clean_start and not self._carried,
            keepalive=s.keepalive,
            properties=_connect_properties(s),
            tls_context=ssl_context(s),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            timeout=s.connect_timeout,
            queue_type=_dispatching_queue(self._on_message),
            max_inflight_messages=65535,
            logger=log,
        )
        client.pending_calls_threshold = 1_000_000  # many requests in flight is the point
        # before CONNECT: CONNACK sets the in-flight limit and the packet size limit
        hooks = PahoHooks(client, loop)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the inner result when a cancel arrives as
            # the connect attempt ends, losing the cancel (a client's close() then waited for ever on its
            # reconnect loop).
            async with asyncio.timeout(s.connect_timeout):
                await client.__aenter__()
        except (aiomqtt.MqttError, OSError, ssl.SSLError, TimeoutError) as exc:
            refused = _refusal(s, exc, f"could not connect to {s.url}")
            if refused is not None:
                raise refused from exc
            why = str(exc) or f"no CONNACK within the connect timeout ({s.connect_timeout:g} s)"
            raise BrokerConnectError(f"could not connect to {s.url}: {why}") from exc
        try:
            _reraise_lost_cancel()
        except asyncio.CancelledError:
            paho_client_of(client).disconnect()  # queued and sent without waiting: nobody will use this connection
            raise
        self._client = client
        self._hooks = hooks
        self._watch_task = loop.create_task(self._watch(client), name=f"sskv-mqtt-watch-{s.client_id}")

    async def _watch(self, client: aiomqtt.Client) -> None:
        """Wait for the connection to end. aiomqtt's iterator raises when it does (we never queue)."""
        # The client is passed in: close() may have cleared self._client before this task first runs.
        assert self._closed is not None
        exc: BaseException | None = None
        try:
            async for _ in client.messages:  # pragma: no cover - nothing is ever queued
                pass
        except aiomqtt.MqttError as err:
            exc = err
        except asyncio.CancelledError:
            if not self._closed.done():
                self._closed.set_result(None)
            raise
        self._fail_acks()
        if not self._closed.done():
            if self._closing:
                self._closed.set_result(None)
            else:
                taken = _refusal(self.settings, exc, "the broker disconnected us")
                if isinstance(taken, SessionTakenOverError):
                    self._closed.set_exception(taken)
                else:
                    self._closed.set_exception(ConnectionLostError(f"connection to {self.settings.url} lost: {exc}"))

    def _fail_acks(self) -> None:
        if self._hooks is not None:
            self._hooks.fail_acks(ConnectionLostError(f"connection to {self.settings.url} ended before the PUBACK"))

    async def wait_closed(self) -> None:
        """Return when the connection ended cleanly; raise :class:`ConnectionLostError` if it dropped."""
        if self._closed is None:
            raise ClientStateError("not connected")
        await asyncio.shield(self._closed)

    def _require(self) -> aiomqtt.Client:
        if self._client is None or self._closed is None or self._closed.done():
            raise ConnectionLostError(f"not connected to {self.settings.url}")
        return self._client

    async def subscribe(self, filters: Iterable[str], qos: int = 1, timeout: float = 10.0) -> None:
        """Subscribe and wait for SUBACK; a refused filter raises :class:`TransportError`."""
        client = self._require()
        topics = [(f, qos) for f in filters]
        if not topics:
            return
        try:
            codes = await client.subscribe(topics, timeout=timeout)
        except aiomqtt.MqttError as exc:
            raise self._error(exc, "subscribe") from exc
        _reraise_lost_cancel()
        bad = [c for c in codes if (c.value if isinstance(c, ReasonCode) else c) >= 0x80]
        if bad:
            raise TransportError(f"broker refused subscription {[f for f, _ in topics]}: {bad}")

    async def unsubscribe(self, filters: Iterable[str], timeout: float = 10.0) -> None:
        client = self._require()
        topics = list(filters)
        if not topics:
            return
        try:
            await client.unsubscribe(topics, timeout=timeout)
        except aiomqtt.MqttError as exc:
            raise self._error(exc, "unsubscribe") from exc
        _reraise_lost_cancel()

    def _send(self, message: OutgoingMessage) -> int:
        """Hand one PUBLISH to paho (which numbers, queues and tracks it until its PUBACK); its packet id."""
        client = self._require()
        topic = message.topic
        limit = self.max_packet_size
        if limit is not None:  # [MQTT-3.2.2-15]: the broker would drop the whole connection on a larger packet
            # our encoding of the properties is byte-identical to paho's (tests/transport/test_paho.py), and
            # paho's own pack() costs ~50 times more and would run twice
            size = message_size(message)
            if size > limit:
                raise ValueTooLargeError(
                    f"a PUBLISH of {size} bytes to {topic[:200]!r} is over the broker's maximum packet size "
                    f"({limit} bytes)",
                    size=size,
                    limit=limit,
                )
        props = _publish_properties(message)
        try:
            # paho's own publish, not aiomqtt's: that one adds an asyncio.Event, a wait_for task and a scan of
            # every pending call per message, for a PUBACK the request path does not need to wait for.
            info = paho_client_of(client).publish(topic, message.payload, message.qos, False, props)
        except ValueError as exc:  # a topic with wildcards, a bad QoS, a payload over 256 MB
            raise ConfigurationError(f"cannot publish to {topic[:200]!r}: {exc}") from None
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise ConnectionLostError(f"publish failed on {self.settings.url}: {paho_client.error_string(info.rc)}")
        return info.mid

    async def publish(self, message: OutgoingMessage, *, timeout: float = 10.0) -> None:
        """Publish and, at QoS 1, wait for PUBACK (:class:`ConnectionLostError` if the connection ends first)."""
        mid = self._send(message)
        hooks = self._hooks
        if message.qos == 0 or hooks is None:
            return
        fut = asyncio.get_running_loop().create_future()
        hooks.acks[mid] = fut
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            raise RequestTimeoutError(f"publish timed out on {self.settings.url}") from None
        finally:
            if hooks.acks.get(mid) is fut:
                del hooks.acks[mid]

    def publish_nowait(self, message: OutgoingMessage, *, refusal: asyncio.Future[Any] | None = None) -> None:
        """Queue a publish and return at once, without waiting for its PUBACK.

        QoS 1 stays QoS 1: paho keeps the message until the broker acknowledges it; only nobody waits. For a
        caller that waits for something else anyway (a response) or must not serialise on acknowledgements
        (the emulator): packets go out in call order, no future or task is created per message. Raises
        :class:`ConnectionLostError` when not connected or when paho refuses the message; a PUBACK that never
        comes is not reported (a connection that drops is, through :meth:`wait_closed`). A PUBACK that refuses
        the message (reason code >= 0x80, e.g. an ACL denial) fails ``refusal`` with
        :class:`PublishRefusedError`, when given (a requester passes the future of its response).
        """
        mid = self._send(message)
        if refusal is not None and message.qos and self._hooks is not None:
            self._hooks.refusals[mid] = refusal

    def _error(self, exc: aiomqtt.MqttError, what: str) -> TransportError:
        if "timed out" in str(exc).lower():
            return RequestTimeoutError(f"{what} timed out on {self.settings.url}")
        return ConnectionLostError(f"{what} failed on {self.settings.url}: {exc}")

    async def close(self, *, end_session: bool = True) -> None:
        """Disconnect cleanly (DISCONNECT, with Session Expiry 0 when ``end_session``: the broker frees the
        session now); safe to call twice and after a drop."""
        client, self._client = self._client, None
        self._closing = True
        self._fail_acks()
        if client is not None:
            if end_session and self.settings.session_expiry:
                _end_session_on_disconnect(paho_client_of(client))
            with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
                async with asyncio.timeout(5):
                    await client.__aexit__(None, None, None)
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        if self._closed is not None and self._closed.done() and not self._closed.cancelled():
            self._closed.exception()  # mark retrieved: a drop before close() is no longer news
