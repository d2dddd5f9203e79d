"""Layer 2 (transport): the ONLY module that imports aiomqtt/paho.

One :class:`MqttConnection` is one MQTT 5 session with a broker, owned by an ``aiomqtt.Client``. Inbound
PUBLISHes are converted to plain :class:`InboundMessage` values and handed to a callback *synchronously*,
inside the read callback (no queue hop, no pump task per message: the request path stays short). Foreign
exceptions are mapped to the sskv_mapping tree here (``raise X from exc``) and never leak.

Reconnection is the caller's business (the client layer): a connection that dropped reports it through
:meth:`MqttConnection.wait_closed` and is then discarded.

Must not import anything above ``_transport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from .._protocol.errors import (
    BrokerConnectError,
    ClientStateError,
    ConfigurationError,
    ConnectionLostError,
    RequestTimeoutError,
    TransportError,
)
from .base import InboundMessage
from .settings import ConnectionSettings

__all__ = ["InboundMessage", "MqttConnection"]

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


class _PackedPublishProperties(Properties):
    """PUBLISH properties encoded once, up front.

    paho's ``Properties`` validates every attribute assignment by scanning its whole name table, and
    ``pack()`` scans it again: that was about a third of the CPU time of a request/response round trip.
    paho only ever calls ``pack()`` on outgoing PUBLISH properties (also when it resends after a
    reconnect), so precomputed bytes are equivalent.
    """

    _packed: bytes
    _summary: str

    def __init__(self, packed: bytes, summary: str) -> None:  # no super().__init__: nothing to validate
        object.__setattr__(self, "packetType", PacketTypes.PUBLISH)
        object.__setattr__(self, "_packed", packed)
        object.__setattr__(self, "_summary", summary)

    def pack(self) -> bytes:
        return self._packed

    def __str__(self) -> str:
        return self._summary

    __repr__ = __str__


def _mqtt_bytes(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ConfigurationError("an MQTT property value may be at most 65,535 bytes")
    return struct.pack("!H", len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _publish_properties(
    correlation_data: bytes | None,
    response_topic: str | None,
    user_properties: UserProperties,
    content_type: str | None,
    message_expiry: int | None,
) -> _PackedPublishProperties:
    parts: list[bytes] = []
    if message_expiry is not None:
        parts.append(b"\x02" + struct.pack("!I", message_expiry))
    if content_type is not None:
        parts.append(b"\x03" + _mqtt_bytes(content_type.encode()))
    if response_topic is not None:
        parts.append(b"\x08" + _mqtt_bytes(response_topic.encode()))
    if correlation_data is not None:
        parts.append(b"\x09" + _mqtt_bytes(bytes(correlation_data)))
    for name, value in user_properties:
        parts.append(b"\x26" + _mqtt_bytes(name.encode()) + _mqtt_bytes(value.encode()))
    body = b"".join(parts)
    summary = f"[{len(user_properties)} user properties, {len(body)} bytes]"
    return _PackedPublishProperties(_varint(len(body)) + body, summary)


def _ssl_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    tls = settings.tls
    if tls is None:
        return None
    try:
        ctx = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"TLS settings could not be loaded: {exc}") from None
    if not tls.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _connect_properties(settings: ConnectionSettings) -> Properties | None:
    if settings.sat_token_file is None:
        return None
    try:
        with open(settings.sat_token_file, "rb") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise BrokerConnectError(f"cannot read the K8S-SAT token file: {exc.strerror}") from None
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
        self._watch_task: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._closing = False

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def connected(self) -> bool:
        return self._client is not None and self._closed is not None and not self._closed.done()

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
            tls_context=_ssl_context(s),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            timeout=s.connect_timeout,
            queue_type=_dispatching_queue(self._on_message),
            max_inflight_messages=65535,
            logger=log,
        )
        client.pending_calls_threshold = 1_000_000  # many requests in flight is the point
        try:
            await asyncio.wait_for(client.__aenter__(), s.connect_timeout)
        except (aiomqtt.MqttError, OSError, ssl.SSLError, TimeoutError) as exc:
            raise BrokerConnectError(f"could not connect to {s.url}: {exc or type(exc).__name__}") from exc
        self._client = client
        self._watch_task = loop.create_task(self._watch(), name=f"sskv-mqtt-watch-{s.client_id}")

    async def _watch(self) -> None:
        """Wait for the connection to end. aiomqtt's iterator raises when it does (we never queue)."""
        assert self._client is not None and self._closed is not None
        exc: BaseException | None = None
        try:
            async for _ in self._client.messages:  # pragma: no cover - nothing is ever queued
                pass
        except aiomqtt.MqttError as err:
            exc = err
        except asyncio.CancelledError:
            if not self._closed.done():
                self._closed.set_result(None)
            raise
        if not self._closed.done():
            if self._closing:
                self._closed.set_result(None)
            else:
                self._closed.set_exception(ConnectionLostError(f"connection to {self.settings.url} lost: {exc}"))

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
        """Publish and, at QoS 1, wait for PUBACK."""
        client = self._require()
        props = _publish_properties(correlation_data, response_topic, user_properties, content_type, message_expiry)
        try:
            await client.publish(topic, payload, qos=qos, properties=props, timeout=timeout)
        except aiomqtt.MqttError as exc:
            raise self._error(exc, "publish") from exc

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
    ) -> None:
        """Queue a publish and return at once, without waiting for its PUBACK.

        For a responder that must not serialise on acknowledgements (the emulator): packets go out in
        call order, no task is created per message. Raises :class:`ConnectionLostError` when not connected
        or when paho refuses the message; a PUBACK that never comes is not reported.
        """
        client = self._require()
        props = _publish_properties(correlation_data, response_topic, user_properties, content_type, message_expiry)
        info = client._client.publish(topic, payload, qos, False, props)
        if info.rc != 0:  # MQTT_ERR_SUCCESS
            raise ConnectionLostError(f"publish failed on {self.settings.url}: paho error {info.rc}")

    def _error(self, exc: aiomqtt.MqttError, what: str) -> TransportError:
        if "timed out" in str(exc).lower():
            return RequestTimeoutError(f"{what} timed out on {self.settings.url}")
        return ConnectionLostError(f"{what} failed on {self.settings.url}: {exc}")

    async def close(self) -> None:
        """Disconnect cleanly (DISCONNECT); safe to call twice and after a drop."""
        client, self._client = self._client, None
        self._closing = True
        if client is not None:
            with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
                await asyncio.wait_for(client.__aexit__(None, None, None), 5)
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        if self._closed is not None and self._closed.done() and not self._closed.cancelled():
            self._closed.exception()  # mark retrieved: a drop before close() is no longer news
