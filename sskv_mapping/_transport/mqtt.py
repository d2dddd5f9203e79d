"""Layer 2 (transport): the ONLY module that imports aiomqtt/paho.

One :class:`MqttConnection` is one MQTT 5 session with a broker, owned by an ``aiomqtt.Client``. Inbound
PUBLISHes are converted to plain :class:`InboundMessage` values and handed to a callback *synchronously*,
inside the read callback (no queue hop, no pump task per message: the request path stays short). Foreign
exceptions are mapped to the sskv_mapping tree here (``raise X from exc``) and never leak.

The request path does not go through aiomqtt's per-message machinery nor paho's ``Properties``: PUBLISH
properties are encoded and decoded here (byte-identical to paho, ``tests/transport/test_mqtt_fastpath.py``),
and :class:`_PahoHooks` shortcuts a few paho steps per connection. aiomqtt still owns the connection
(CONNECT/TLS/auth, SUBSCRIBE, keepalive, DISCONNECT, reading the socket); see :class:`_PahoHooks` for what
changed and why.

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
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import aiomqtt
import paho.mqtt.client as paho_client
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from ..errors import (
    BrokerConnectError,
    ClientStateError,
    ConfigurationError,
    ConnectionLostError,
    PublishRefusedError,
    RequestTimeoutError,
    ServiceUnavailableError,
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


def _read_utf8(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    """An MQTT UTF-8 string at ``pos`` that must end by ``end``: ``(value, next position)``.

    paho's ``readUTF`` rules: the length must fit, the bytes must be strict UTF-8 (which already excludes
    the surrogates D800-DFFF), and U+0000 and U+FEFF are refused.
    """
    if pos + 2 > end:
        raise MalformedPacket("Not enough data to read string length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacket("Length delimited string too long")
    value = buf[pos + 2 : stop].decode("utf-8")
    if "\x00" in value or "\ufeff" in value:
        raise MalformedPacket("[MQTT-1.5.4-2] Null or U+FEFF found in UTF-8 data")
    return value, stop


def _decode_publish(header: int, packet: bytes | bytearray) -> tuple[InboundMessage, int]:
    """A PUBLISH packet's variable header and payload -> ``(message, packet id)``, QoS 0 and 1.

    What paho's ``decode_publish`` + ``Properties.unpack`` + aiomqtt's ``Message``/``Topic`` + :func:`_convert`
    compute, without them: paho's property decoder scans its whole name table several times per property and
    checks strings one character at a time in Python (about 150 us for one request's properties on a 2-core
    test machine, the largest single cost of a round trip). Every packet that path accepts decodes to the same
    :class:`InboundMessage`; what it refuses is refused here too, as :class:`MalformedPacket` (paho raises it
    from ``decode_publish`` as well): unknown or non-PUBLISH property ids, a repeated single-valued property,
    out-of-range values, lengths that overrun, bad UTF-8, an empty or wildcard topic (aiomqtt's ``Topic``).
    One deliberate difference: a fixed-size value that runs past the declared property length is refused
    here; paho reads on into the payload.
    """
    try:
        return _decode_publish_unchecked(header, bytes(packet))
    except MalformedPacket:
        raise
    except (IndexError, ValueError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedPacket(f"malformed PUBLISH: {exc}") from exc


def _decode_publish_unchecked(header: int, buf: bytes) -> tuple[InboundMessage, int]:
    qos = (header >> 1) & 3
    size = len(buf)
    pos = 2 + ((buf[0] << 8) | buf[1])
    if pos > size:
        raise MalformedPacket("topic longer than the packet")
    topic = buf[2:pos].decode("utf-8")
    if not topic or "+" in topic or "#" in topic:
        raise MalformedPacket(f"invalid topic {topic[:80]!r}")  # as aiomqtt's Topic (aliases are never enabled)
    mid = 0
    if qos:
        if pos + 2 > size:
            raise MalformedPacket("no packet identifier")
        mid = (buf[pos] << 8) | buf[pos + 1]
        pos += 2
    # Property Length, a Variable Byte Integer of at most four bytes.
    length = shift = 0
    for _ in range(4):
        byte = buf[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    else:
        raise MalformedPacket("Variable Byte Integer is more than four bytes long")
    end = pos + length
    if end > size:
        raise MalformedPacket("properties longer than the packet")
    correlation: bytes | None = None
    response_topic: str | None = None
    content_type: str | None = None
    expiry: int | None = None
    user: list[tuple[str, str]] = []
    seen_single = 0  # bit set of the single-valued ids seen (all PUBLISH ids are < 64)
    while pos < end:
        ident = buf[pos]
        pos += 1
        if ident == 0x26:  # User Property (may repeat)
            name, pos = _read_utf8(buf, pos, end)
            value, pos = _read_utf8(buf, pos, end)
            user.append((name, value))
            continue
        if ident == 0x0B:  # Subscription Identifier (may repeat): a VBI, 1..268435455
            sub_id = shift = 0
            for _ in range(4):
                if pos >= end:
                    raise MalformedPacket("Not enough data to decode Variable Byte Integer")
                byte = buf[pos]
                pos += 1
                sub_id |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            else:
                raise MalformedPacket("Variable Byte Integer is more than four bytes long")
            if sub_id < 1:
                raise MalformedPacket("SubscriptionIdentifier property value must be in the range 1-268435455")
            continue
        bit = 1 << ident if ident < 64 else 0
        if seen_single & bit:
            raise MalformedPacket(f"Property {ident:#04x} must not exist more than once")
        seen_single |= bit
        if ident == 0x09:  # Correlation Data
            if pos + 2 > end:
                raise MalformedPacket("Not enough data to read binary data length")
            stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
            if stop > end:
                raise MalformedPacket("Length delimited binary data too long")
            correlation = buf[pos + 2 : stop]
            pos = stop
        elif ident == 0x08:  # Response Topic
            response_topic, pos = _read_utf8(buf, pos, end)
        elif ident == 0x03:  # Content Type
            content_type, pos = _read_utf8(buf, pos, end)
        elif ident == 0x02:  # Message Expiry Interval
            if pos + 4 > end:
                raise MalformedPacket("Four Byte Integer runs past the properties")
            expiry = int.from_bytes(buf[pos : pos + 4], "big")
            pos += 4
        elif ident == 0x01:  # Payload Format Indicator: 0 or 1, not reported
            if pos >= end or buf[pos] > 1:
                raise MalformedPacket("PayloadFormatIndicator property value must be 0 or 1")
            pos += 1
        elif ident == 0x23:  # Topic Alias: 1..65535, not reported (aliases are never enabled)
            if pos + 2 > end or not (buf[pos] or buf[pos + 1]):
                raise MalformedPacket("TopicAlias property value must be in the range 1-65535")
            pos += 2
        else:
            raise MalformedPacket(f"property {ident:#04x} is not allowed in a PUBLISH")
    message = InboundMessage(
        topic=topic,
        payload=buf[end:],
        qos=qos,
        correlation_data=correlation,
        response_topic=response_topic,
        content_type=content_type,
        user_properties=tuple(user),
        message_expiry=expiry,
    )
    return message, mid


def _dispatching_queue(handler: Callable[[InboundMessage], None]) -> type[asyncio.Queue[Any]]:
    """An ``asyncio.Queue`` class whose ``put_nowait`` hands each message straight to ``handler``.

    aiomqtt's documented ``queue_type`` hook: aiomqtt calls ``put_nowait`` from paho's read callback on the
    event loop thread, so delivering there saves a queue hop and a task wake-up per message. Only the
    messages :class:`_PahoHooks` leaves to paho take this way (QoS 2, or all if paho's internals changed).
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


def _mqtt_bytes(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ConfigurationError("an MQTT property value may be at most 65,535 bytes")
    return len(data).to_bytes(2, "big") + data


#: Encoded (length-prefixed) short strings. Most of a request's or response's property strings repeat from one
#: message to the next (names, client id, response topic, content type); a timestamp churns it, and it is
#: emptied when full rather than managed as an LRU.
_ENCODED: dict[str, bytes] = {}
_ENCODED_MAX = 1024


def _mqtt_str(text: str) -> bytes:
    field = _ENCODED.get(text)
    if field is None:
        field = _mqtt_bytes(text.encode())
        if len(text) <= 256:
            if len(_ENCODED) >= _ENCODED_MAX:
                _ENCODED.clear()
            _ENCODED[text] = field
    return field


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
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
    """The PUBLISH properties paho's ``Properties.pack()`` would produce for these values, in its order (its
    name table's: 0x02, 0x03, 0x08, 0x09, then every 0x26 in the given order); ``tests/transport`` compares."""
    parts: list[bytes] = []
    if message_expiry is not None:
        parts.append(b"\x02" + message_expiry.to_bytes(4, "big"))
    if content_type is not None:
        parts.append(b"\x03" + _mqtt_str(content_type))
    if response_topic is not None:
        parts.append(b"\x08" + _mqtt_str(response_topic))
    if correlation_data is not None:
        parts.append(b"\x09" + _mqtt_bytes(bytes(correlation_data)))
    for name, value in user_properties:
        parts.append(b"\x26" + _mqtt_str(name) + _mqtt_str(value))
    body = b"".join(parts)
    return _PackedPublishProperties(_varint(len(body)) + body, len(user_properties))


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


class _NamedServerContext(ssl.SSLContext):
    """A client context that checks (and sends as SNI) ``expected_hostname`` instead of the host dialled.

    paho passes the host it connects to as ``server_hostname``; behind a port-forward or a load balancer the
    broker's certificate names another host (e.g. ``aio-broker`` while dialling ``127.0.0.1``).
    """

    expected_hostname: str = ""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["server_hostname"] = self.expected_hostname
        return super().wrap_socket(sock, *args, **kwargs)


def _ssl_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    tls = settings.tls
    if tls is None:
        return None
    try:
        ctx: ssl.SSLContext
        if tls.server_hostname:
            named = _NamedServerContext(ssl.PROTOCOL_TLS_CLIENT)  # what create_default_context() sets up, plus:
            named.expected_hostname = tls.server_hostname
            if tls.ca_file:
                named.load_verify_locations(cafile=tls.ca_file)
            else:
                named.load_default_certs(ssl.Purpose.SERVER_AUTH)
            ctx = named
        else:
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


_PUBACK_SUCCESS = ReasonCode(PacketTypes.PUBACK)
_NO_MATCHING_SUBSCRIBERS = 0x10  # a PUBACK reason code: accepted, but no subscription matched
_PUBACK_NO_PROPERTIES = Properties(PacketTypes.PUBACK)  # type: ignore[no-untyped-call]
_MQTT_LOG_DEBUG = paho_client.MQTT_LOG_DEBUG

#: The paho internals the two packet-handler shortcuts of :class:`_PahoHooks` use. Without any of them (another
#: paho release), paho's own handlers stay in place: slower, same behaviour.
_PAHO_INTERNALS = (
    "_in_packet",
    "_handle_publish",
    "_handle_pubackcomp",
    "_send_puback",
    "_manual_ack",
    "_out_messages",
    "_out_message_mutex",
    "_do_on_publish",
    "_easy_log",
    "_out_packet",
    "_sock_recv",
)

#: How much one ``recv`` asks for; paho itself asks for 1 byte (packet type), 1 byte at a time (remaining
#: length), then the rest: three system calls per packet, which :meth:`_PahoHooks._sock_recv` turns into one.
_RECV_SIZE = 65536

_PUBLISH = 0x30
_DISCONNECT = 0xE0


def _fail_connect(connected: asyncio.Future[Any]) -> None:
    if not connected.done():
        connected.set_exception(aiomqtt.MqttError("the broker closed the connection before CONNACK"))


class _PahoHooks:
    """The request path's shortcuts, installed on the paho client of one ``aiomqtt.Client``.

    aiomqtt keeps owning the connection: CONNECT/TLS/auth, SUBSCRIBE, keepalive, DISCONNECT, reading the
    socket (its reader callback runs paho's ``loop_read``) and reporting the end of the connection. What
    changes, and why (each one measured on the request path; see ``benchmarks/bench_rpc.py``):

    * **inbound PUBLISH** (QoS 0/1): decoded by :func:`_decode_publish` straight into an
      :class:`InboundMessage` and handed to the handler, then PUBACKed by paho's own ``_send_puback``.
      paho's property decoder was ~150 us per message here; also skipped: paho's ``MQTTMessage`` and
      topic matcher, aiomqtt's ``Message``/``Topic``. QoS 2 still goes through paho.
    * **inbound PUBACK** (the common 2-byte "success" form): paho's ``_do_on_publish`` is called with shared
      success/no-properties values instead of decoding a ``ReasonCode`` and a ``Properties`` per packet.
    * **outbound writes**: paho queues packets and asks for the socket to be watched for writability;
      aiomqtt answers by ``call_soon_threadsafe(add_writer)`` (a self-pipe write, an epoll_ctl pair and two
      loop iterations per burst). On the loop thread the queue is instead flushed once by a ``call_soon``
      callback, so a response and its PUBACK, or a burst of requests, leave together. When the socket
      cannot take everything, or off the loop thread (CONNECT is sent from an executor), aiomqtt's writer
      does it as before.
    * **PUBACK waits**: :meth:`MqttConnection.publish` waits on one future per packet id in :attr:`acks`,
      resolved from paho's ``on_publish`` and failed when the connection ends (aiomqtt's wait only times out).
    * **Receive Maximum**: paho ignores the server's (CONNACK); MQTT 5 says a client must not have more
      unacknowledged QoS 1 PUBLISHes than that ([MQTT-3.3.4-7]). It becomes paho's in-flight limit: publishes
      beyond it wait in paho's queue and go out as PUBACKs come back.
    """

    def __init__(
        self,
        client: aiomqtt.Client,
        loop: asyncio.AbstractEventLoop,
        handler: Callable[[InboundMessage], None],
    ) -> None:
        paho = client._client
        self._aiomqtt = client
        self._paho = paho
        self._loop = loop
        self._thread = threading.get_ident()
        self._handler = handler
        #: packet id -> future of a :meth:`MqttConnection.publish` waiting for its PUBACK
        self.acks: dict[int, asyncio.Future[None]] = {}
        #: packet id -> future that a refusing PUBACK fails (see :meth:`MqttConnection.publish_nowait`)
        self.refusals: dict[int, asyncio.Future[Any]] = {}
        self._flush_handle: asyncio.Handle | None = None
        #: a PUBLISH was queued since the last flush (see _loop_read)
        self.published = False
        # aiomqtt's pending-publish table: only its own publish() fills it, and we never call that one.
        self._aiomqtt_pending_publishes: dict[int, Any] | None = getattr(client, "_pending_publishes", None)
        # aiomqtt's own callbacks, called on from ours (paho types them as a union of its callback API versions)
        self._aiomqtt_register_write = cast(Callable[..., None], paho.on_socket_register_write)
        self._aiomqtt_unregister_write = cast(Callable[..., None], paho.on_socket_unregister_write)
        self._aiomqtt_writer = False  # aiomqtt's writer callback is (being) added for the socket
        self._aiomqtt_on_publish = cast(Callable[..., None], paho.on_publish)
        self._aiomqtt_on_connect = cast(Callable[..., None], paho.on_connect)
        self._aiomqtt_on_disconnect = cast(Callable[..., None], paho.on_disconnect)
        paho.on_socket_register_write = self._register_write
        paho.on_socket_unregister_write = self._unregister_write
        paho.on_publish = self._on_publish
        paho.on_connect = self._on_connect
        paho.on_disconnect = self._on_disconnect
        self.packet_shortcuts = all(hasattr(paho, name) for name in _PAHO_INTERNALS)
        if self.packet_shortcuts:
            self._paho_handle_publish = paho._handle_publish
            self._paho_handle_pubackcomp = paho._handle_pubackcomp
            self._paho_sock_recv = paho._sock_recv
            self._paho_loop_read = paho.loop_read
            self._rbuf = b""
            self._rpos = 0
            # Instance attributes shadow the methods for this one client: paho calls self._handle_publish().
            setattr(paho, "_handle_publish", self._handle_publish)  # noqa: B010
            setattr(paho, "_handle_pubackcomp", self._handle_pubackcomp)  # noqa: B010
            setattr(paho, "_sock_recv", self._sock_recv)  # noqa: B010
            setattr(paho, "loop_read", self._loop_read)  # noqa: B010
        else:  # pragma: no cover - another paho release
            log.debug("paho internals changed: inbound packets take paho's own (slower) path")

    # -- inbound --------------------------------------------------------------------------------------

    def _sock_recv(self, bufsize: int) -> bytes:
        """paho's ``_sock_recv`` (same errors, ``b""`` at end of stream), served from one large read."""
        buf, pos = self._rbuf, self._rpos
        if pos >= len(buf):
            buf = self._paho_sock_recv(_RECV_SIZE)
            if not buf:
                return buf
            self._rbuf, pos = buf, 0
        self._rpos = end = pos + bufsize
        return buf[pos:end]

    def _loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        """paho's ``loop_read``, repeated while bytes wait in the read buffer.

        paho reads at most ``max(1, messages in flight)`` packets per call, and epoll cannot know about
        bytes already taken off the socket: without this they would wait for the next packet to arrive.
        """
        paho = self._paho
        rc: MQTTErrorCode = self._paho_loop_read(max_packets)
        while rc == MQTTErrorCode.MQTT_ERR_SUCCESS and self._rpos < len(self._rbuf) and paho._sock is not None:
            rc = self._paho_loop_read(max_packets)
        if self._flush_handle is not None and self.published:
            # A handler answered (the emulator): send now rather than one loop iteration later. Only PUBACKs
            # queued (a requester): wait for that iteration, where the tasks just woken add their requests.
            self._flush_handle.cancel()
            self._flush()
        return rc

    def _handle_publish(self) -> MQTTErrorCode:
        paho = self._paho
        header: int = paho._in_packet["command"]
        if header & 0x06 > 0x02:  # QoS 2 (or the invalid 3): paho's own handling
            return self._paho_handle_publish()
        message, mid = _decode_publish(header, paho._in_packet["packet"])
        if log.isEnabledFor(logging.DEBUG):
            paho._easy_log(
                _MQTT_LOG_DEBUG,
                "Received PUBLISH (q%d, m%d), '%s', ... (%d bytes)",
                message.qos,
                mid,
                message.topic,
                len(message.payload),
            )
        try:
            self._handler(message)
        except Exception:
            log.exception("message handler failed on topic %r", message.topic)
        if header & 0x06 and not paho._manual_ack:
            return paho._send_puback(mid)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _handle_pubackcomp(self, cmd: str) -> MQTTErrorCode:
        paho = self._paho
        packet = paho._in_packet["packet"]
        if cmd != "PUBACK" or len(packet) != 2:  # a reason code or properties: paho decodes them
            return self._paho_handle_pubackcomp(cmd)  # type: ignore[arg-type]
        mid = (packet[0] << 8) | packet[1]
        if log.isEnabledFor(logging.DEBUG):
            paho._easy_log(_MQTT_LOG_DEBUG, "Received PUBACK (Mid: %d)", mid)
        with paho._out_message_mutex:
            if mid in paho._out_messages:
                return paho._do_on_publish(mid, _PUBACK_SUCCESS, _PUBACK_NO_PROPERTIES)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _on_publish(
        self, client: paho_client.Client, userdata: Any, mid: int, reason_code: ReasonCode, properties: Properties
    ) -> None:
        fut = self.acks.pop(mid, None)
        refusal = self.refusals.pop(mid, None) if self.refusals else None
        if reason_code is not _PUBACK_SUCCESS and reason_code.is_failure:
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
        if self._aiomqtt_pending_publishes is None or self._aiomqtt_pending_publishes:
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
        client._max_inflight_messages = maximum if isinstance(maximum, int) and 0 < maximum < 65535 else 0
        self._aiomqtt_on_connect(client, userdata, flags, reason_code, properties)

    def _on_disconnect(self, client: paho_client.Client, userdata: Any, *args: Any) -> None:
        """End a CONNECT that the broker closed before its CONNACK at once, not after ``connect_timeout``.

        aiomqtt ignores a disconnect before CONNACK (its ``__aenter__`` then waits for the timeout). It happens
        when the TCP connection lands on a broker that is dying or restarting, or when a TLS broker drops a
        client whose certificate it refuses after the handshake.
        """
        connected: asyncio.Future[Any] = self._aiomqtt._connected
        if threading.get_ident() == self._thread:
            _fail_connect(connected)
        else:  # pragma: no cover - paho reports from the loop thread; be safe if it ever does not
            self._loop.call_soon_threadsafe(_fail_connect, connected)
        self._aiomqtt_on_disconnect(client, userdata, *args)

    # -- outbound -------------------------------------------------------------------------------------

    def _register_write(self, client: paho_client.Client, userdata: Any, sock: Any) -> None:
        if threading.get_ident() != self._thread:  # CONNECT, from aiomqtt's executor thread
            self._aiomqtt_writer = True
            self._aiomqtt_register_write(client, userdata, sock)
        elif self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _unregister_write(self, client: paho_client.Client, userdata: Any, sock: Any) -> None:
        if self._aiomqtt_writer:  # else there is no writer to remove (the usual case: a flush wrote it all)
            self._aiomqtt_writer = False
            self._aiomqtt_unregister_write(client, userdata, sock)

    def _flush(self) -> None:
        self._flush_handle = None
        self.published = False
        paho = self._paho
        if paho._sock is None:
            return
        if self.packet_shortcuts:
            self._coalesce(paho._out_packet)
        try:
            paho.loop_write()
        except Exception as exc:  # what aiomqtt's writer callback does with it
            disconnected = getattr(self._aiomqtt, "_disconnected", None)
            if isinstance(disconnected, asyncio.Future) and not disconnected.done():
                disconnected.set_exception(exc)
            return
        if paho._sock is not None and paho.want_write():
            # The socket took only part of it: paho still counts the write as registered, so aiomqtt's writer
            # is added now, and removed by paho once the queue is empty.
            self._aiomqtt_writer = True
            self._aiomqtt_register_write(paho, paho._userdata, paho._sock)

    @staticmethod
    def _coalesce(queue: Any) -> None:
        """Join the queued packets into one, so that paho's ``_packet_write`` sends them with one ``send``.

        On loopback one ``send`` costs tens of microseconds (the receiving side's TCP work runs in it), and paho
        sends each packet on its own. Only packets whose completion means nothing to paho are joined: a QoS 0
        PUBLISH (its ``on_publish`` fires when written) and DISCONNECT (paho closes the socket after it) end
        the run, as does a packet already partly sent. The joined entry is labelled a PUBACK without packet
        id, for which paho does nothing on completion, as for every packet joined into it.
        """
        if len(queue) < 2:
            return
        parts: list[bytes | bytearray] = []
        for packet in queue:
            command = packet["command"] & 0xF0
            if packet["pos"] or command == _DISCONNECT or (command == _PUBLISH and packet["qos"] == 0):
                break
            parts.append(packet["packet"])
        if len(parts) < 2:
            return
        for _ in parts:
            queue.popleft()
        joined = b"".join(parts)
        queue.appendleft(
            {
                "command": 0x40,  # PUBACK
                "mid": 0,
                "qos": 1,
                "pos": 0,
                "to_process": len(joined),
                "packet": joined,
                "info": None,
            }
        )

    def fail_acks(self, exc: BaseException) -> None:
        acks, self.acks = self.acks, {}
        self.refusals = {}  # their owners learn of the drop otherwise (a requester: its pending call fails)
        for fut in acks.values():
            if not fut.done():
                fut.set_exception(exc)


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
        self._hooks: _PahoHooks | None = None
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
        hooks = _PahoHooks(client, loop, self._on_message)  # before CONNECT: CONNACK sets the in-flight limit
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
            client._client.disconnect()  # queued and sent without waiting: nobody will use this connection
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
            info = client._client.publish(topic, payload, qos, False, props)
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
