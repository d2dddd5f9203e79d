"""Layer 2 (transport): the ONLY package that imports aiomqtt/paho (this module and ``_fastpath``).

The stock transport. The client and the emulator use :class:`~sskv_mapping._transport.stream.StreamConnection`
(our own MQTT 5 on an asyncio ``Protocol``) unless ``SSKV_MQTT_FASTPATH=0`` is set (``_transport/choice.py``):
then they use this one, with none of its shortcuts, and ``nox -s stock-paho`` runs the client/emulator suites so --
a second, independent implementation of the same contract. Tools and tests may also build it directly.

One :class:`MqttConnection` is one MQTT 5 session with a broker, owned by an ``aiomqtt.Client``. Inbound
PUBLISHes are converted to plain :class:`InboundMessage` values and handed to a callback *synchronously*,
inside the read callback. Foreign exceptions are mapped to the sskv_mapping tree here (``raise X from exc``) and
never leak. PUBLISH properties are encoded by the pure codec ``_protocol/mqtt_publish.py`` (byte-identical to
paho, ``tests/transport/test_mqtt_fastpath.py``). With the variable unset, :class:`~._fastpath.PahoHooks` also
shortcuts a few paho steps (packet handlers, batched reads and writes) for the callers that use this transport
directly; ``_fastpath.py`` is the only module that touches aiomqtt's or paho's private names. What correctness needs
is there either way (PUBACK waits and refusals, Receive Maximum, a disconnect before CONNACK failing at once).

Reconnection is the caller's business (the client layer): a connection that dropped reports it through
:meth:`MqttConnection.wait_closed` and is then discarded.

Must not import anything above ``_transport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiomqtt
import paho.mqtt.client as paho_client
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from ..._protocol.mqtt_publish import InboundMessage, publish_properties
from ...errors import (
    BrokerConnectError,
    ClientStateError,
    ConfigurationError,
    ConnectionLostError,
    RequestTimeoutError,
    TransportError,
)
from ..choice import FASTPATH_ENV
from ..settings import ConnectionSettings
from ..tls import read_sat_token, ssl_context
from ._fastpath import PahoHooks, paho_client_of

__all__ = ["FASTPATH_ENV", "InboundMessage", "MqttConnection"]


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

UserProperties = Sequence[tuple[str, str]]


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
        content_type=ctype,
        user_properties=tuple((str(k), str(v)) for k, v in user),
        message_expiry=expiry,
    )


def _dispatching_queue(handler: Callable[[InboundMessage], None]) -> type[asyncio.Queue[Any]]:
    """An ``asyncio.Queue`` class whose ``put_nowait`` hands each message straight to ``handler``.

    aiomqtt's documented ``queue_type`` hook: aiomqtt calls ``put_nowait`` from paho's read callback on the
    event loop thread, so delivering there saves a queue hop and a task wake-up per message. Only the
    messages :class:`~._fastpath.PahoHooks` leaves to paho take this way (QoS 2; all of them with
    ``SSKV_MQTT_FASTPATH=0`` or if paho's internals changed).
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


class _PackedPublishProperties(Properties):
    """PUBLISH properties encoded once, up front.

    paho's ``Properties`` validates every attribute assignment by scanning its whole name table, and
    ``pack()`` scans it again: that was about a third of the CPU time of a request/response round trip.
    paho only ever calls ``pack()`` on outgoing PUBLISH properties (also when it resends after a
    reconnect), so precomputed bytes are equivalent.
    """

    _packed: bytes
    _user_count: int

    def __init__(self, packed: bytes, user_count: int) -> None:  # no super().__init__: nothing to validate
        object.__setattr__(self, "packetType", PacketTypes.PUBLISH)
        object.__setattr__(self, "_packed", packed)
        object.__setattr__(self, "_user_count", user_count)

    def pack(self) -> bytes:
        return self._packed

    def __str__(self) -> str:  # paho's debug log line of each PUBLISH it sends
        return f"[{self._user_count} user properties, {len(self._packed)} bytes]"

    __repr__ = __str__


def _publish_properties(
    correlation_data: bytes | None,
    response_topic: str | None,
    user_properties: UserProperties,
    content_type: str | None,
    message_expiry: int | None,
) -> _PackedPublishProperties:
    """The PUBLISH properties as paho's ``Properties.pack()`` would encode them (``tests/transport`` compares),
    encoded once by the pure codec and wrapped for paho."""
    packed = publish_properties(correlation_data, response_topic, user_properties, content_type, message_expiry)
    return _PackedPublishProperties(packed, len(user_properties))


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
    if token is None:
        return None
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.AuthenticationMethod = "K8S-SAT"
    props.AuthenticationData = token
    return props


class MqttConnection:
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

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def connected(self) -> bool:
        return self._client is not None and self._closed is not None and not self._closed.done()

    @property
    def max_packet_size(self) -> int | None:
        """The broker's CONNACK Maximum Packet Size: not read on this transport yet (branch h-config's)."""
        return None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<MqttConnection {self.settings.client_id!r} {self.settings.url} {state}>"

    async def connect(self) -> None:
        """Connect (CONNECT/CONNACK); raises :class:`BrokerConnectError`."""
        if self._client is not None:
            raise ClientStateError("MqttConnection.connect() may be called once")
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
            clean_start=True,
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
        # before CONNECT: CONNACK sets the in-flight limit
        hooks = PahoHooks(client, loop, self._on_message, shortcuts=os.environ.get(FASTPATH_ENV, "1") != "0")
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the inner result when a cancel arrives as
            # the connect attempt ends, losing the cancel (a client's close() then waited for ever on its
            # reconnect loop).
            async with asyncio.timeout(s.connect_timeout):
                await client.__aenter__()
        except (aiomqtt.MqttError, OSError, ssl.SSLError, TimeoutError) as exc:
            raise BrokerConnectError(f"could not connect to {s.url}: {exc or type(exc).__name__}") from exc
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

    def _send(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        correlation_data: bytes | None,
        response_topic: str | None,
        user_properties: UserProperties,
        content_type: str | None,
        message_expiry: int | None,
    ) -> int:
        """Hand one PUBLISH to paho (which numbers, queues and tracks it until its PUBACK); its packet id."""
        client = self._require()
        props = _publish_properties(correlation_data, response_topic, user_properties, content_type, message_expiry)
        try:
            # paho's own publish, not aiomqtt's: that one adds an asyncio.Event, a wait_for task and a scan of
            # every pending call per message, for a PUBACK the request path does not need to wait for.
            info = paho_client_of(client).publish(topic, payload, qos, False, props)
        except ValueError as exc:  # a topic with wildcards, a bad QoS, a payload over 256 MB
            raise ConfigurationError(f"cannot publish to {topic[:200]!r}: {exc}") from None
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise ConnectionLostError(f"publish failed on {self.settings.url}: {paho_client.error_string(info.rc)}")
        if self._hooks is not None:
            self._hooks.published = True
        return info.mid

    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        correlation_data: bytes | None = None,
        response_topic: str | None = None,
        user_properties: UserProperties = (),
        content_type: str | None = None,
        message_expiry: int | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Publish and, at QoS 1, wait for PUBACK (:class:`ConnectionLostError` if the connection ends first)."""
        mid = self._send(
            topic, payload, qos, correlation_data, response_topic, user_properties, content_type, message_expiry
        )
        hooks = self._hooks
        if qos == 0 or hooks is None:
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

    def publish_nowait(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        correlation_data: bytes | None = None,
        response_topic: str | None = None,
        user_properties: UserProperties = (),
        content_type: str | None = None,
        message_expiry: int | None = None,
        refusal: asyncio.Future[Any] | None = None,
    ) -> None:
        """Queue a publish and return at once, without waiting for its PUBACK.

        QoS 1 stays QoS 1: paho keeps the message until the broker acknowledges it; only nobody waits. For a
        caller that waits for something else anyway (a response) or must not serialise on acknowledgements
        (the emulator): packets go out in call order, no future or task is created per message. Raises
        :class:`ConnectionLostError` when not connected or when paho refuses the message; a PUBACK that never
        comes is not reported (a connection that drops is, through :meth:`wait_closed`). A PUBACK that refuses
        the message (reason code >= 0x80, e.g. an ACL denial) fails ``refusal`` with
        :class:`PublishRefusedError`, when given (a requester passes the future of its response).
        """
        mid = self._send(
            topic, payload, qos, correlation_data, response_topic, user_properties, content_type, message_expiry
        )
        if refusal is not None and qos and self._hooks is not None:
            self._hooks.refusals[mid] = refusal

    def _error(self, exc: aiomqtt.MqttError, what: str) -> TransportError:
        if "timed out" in str(exc).lower():
            return RequestTimeoutError(f"{what} timed out on {self.settings.url}")
        return ConnectionLostError(f"{what} failed on {self.settings.url}: {exc}")

    async def close(self) -> None:
        """Disconnect cleanly (DISCONNECT); safe to call twice and after a drop."""
        client, self._client = self._client, None
        self._closing = True
        self._fail_acks()
        if client is not None:
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
