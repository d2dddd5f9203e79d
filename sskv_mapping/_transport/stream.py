"""Layer 2 (transport): :class:`StreamConnection`, one MQTT 5 connection written directly on an asyncio
``Protocol`` -- the request path's transport (the client's and the emulator's).

Why not aiomqtt/paho here (they remain, as :class:`~sskv_mapping._transport.mqtt.MqttConnection`, the stock
transport that ``SSKV_MQTT_FASTPATH=0`` selects and that ``nox -s stock-paho`` runs the suites on): paho reads a
packet in three ``recv`` calls (type, then the remaining length a byte at a time, then the body), handles one
packet per read callback, and queues each outgoing packet through its own machinery and a thread-safe writer
hand-off. A connection has one owner of its socket, so keeping paho for CONNECT, TLS or keepalive while reading
and writing around it is not possible (an established ``ssl.SSLSocket`` cannot be handed to asyncio either).
Here instead:

* **receive**: ``data_received`` gets whatever the socket had; :class:`~sskv_mapping._protocol.mqtt_packets.
  PacketSplitter` cuts every whole packet out of it, and each is dispatched at once -- a PUBLISH to the
  handler (a response resolves its future, a notification reaches its watch), a PUBACK to its waiter -- with
  no extra loop hop;
* **send**: a packet is appended to an output list; the list leaves in one ``write`` at the end of the
  current ``data_received`` (a handler's responses and the PUBACKs go out together) or, outside it, in one
  ``call_soon`` callback (the requests a burst of woken tasks makes in one loop iteration leave together);
* CONNECT with TLS (asyncio's SSL transport, with the TLS settings' context and server name), user name /
  password or MQTT 5 enhanced authentication (``K8S-SAT``, the token re-read at every connect), keepalive
  (PINGREQ when the connection was quiet, a connection whose PINGRESP does not come is dropped), the
  broker's Receive Maximum (QoS 1 publishes beyond it wait for PUBACKs), SUBSCRIBE/UNSUBSCRIBE with their
  acknowledgements, DISCONNECT. Reconnection is the client's (:mod:`sskv_mapping._keeper`).

Must not import aiomqtt/paho nor anything above ``_transport``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._protocol import mqtt_packets as packets
from .._protocol.mqtt_publish import (
    InboundMessage,
    MalformedPacketError,
    decode_publish,
    mqtt_str,
    publish_properties,
    varint,
)
from ..errors import (
    BrokerConnectError,
    ClientStateError,
    ConfigurationError,
    ConnectionLostError,
    PublishRefusedError,
    RequestTimeoutError,
    ServiceUnavailableError,
    TransportError,
    ValueTooLargeError,
)
from .settings import ConnectionSettings
from .tls import read_sat_token, server_name, ssl_context

__all__ = ["StreamConnection"]

log = logging.getLogger("sskv_mapping.transport")

_NO_MATCHING_SUBSCRIBERS = 0x10
#: MQTT's own limit on QoS 1 messages in flight (16-bit packet ids) when the broker states none
_DEFAULT_RECEIVE_MAXIMUM = 65_535
_TOPIC_FIELDS_MAX = 256  # length-prefixed topics kept encoded (the request topic and a few response topics)


_TOPIC_FIELDS: dict[str, bytes] = {}


def _topic_field(topic: str) -> bytes:
    """A topic name, checked and length-prefixed; the few a process publishes to are kept encoded."""
    field = _TOPIC_FIELDS.get(topic)
    if field is None:
        if not topic or "+" in topic or "#" in topic:
            raise ConfigurationError(f"cannot publish to {topic[:200]!r}: not a valid topic name")
        try:
            field = mqtt_str(topic)
        except (ConfigurationError, UnicodeEncodeError) as exc:
            raise ConfigurationError(f"cannot publish to {topic[:200]!r}: {exc}") from None
        if len(_TOPIC_FIELDS) >= _TOPIC_FIELDS_MAX:
            _TOPIC_FIELDS.clear()
        _TOPIC_FIELDS[topic] = field
    return field


def _log_connect(s: ConnectionSettings, with_token: bool) -> None:
    """The CONNECT at DEBUG: what was sent, never the password or the token."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "%s: sending CONNECT (keepalive %d s, user name %s, password %s, authentication method %s)",
            s.client_id,
            s.keepalive,
            "set" if s.username is not None else "none",
            "set" if s.password is not None else "none",
            "K8S-SAT" if with_token else "none",
        )


def _settle(closed: asyncio.Future[None]) -> None:
    """The connection is over on our side: ``closed`` resolves if it had not, and a drop it recorded is marked
    retrieved (the caller reports the failure itself, or closed on purpose: a drop before then is no news)."""
    if not closed.done():
        closed.set_result(None)
    elif not closed.cancelled():
        closed.exception()


# -- h-config minimal check of the broker's Maximum Packet Size (h-stream owns the limits; the lead reconciles) --


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _check_packet_size(limit: int | None, topic: str, field: bytes, qos: int, props: bytes, payload: bytes) -> None:
    """Raise :class:`ValueTooLargeError` if the PUBLISH packet would exceed the broker's ``limit``."""
    if limit is None:
        return
    remaining = len(field) + (2 if qos else 0) + len(props) + len(payload)
    size = 1 + len(varint(remaining)) + remaining
    if size > limit:
        raise ValueTooLargeError(
            f"a PUBLISH of {size} bytes to {topic[:200]!r} is over the broker's maximum packet size ({limit} bytes)",
            size=size,
            limit=limit,
        )


# -- end of the h-config minimal check --


class StreamConnection(asyncio.Protocol):
    """One MQTT 5 connection (see the module docstring). Not reusable: after it closes or drops, make a new one.

    ``on_message`` is called on the event loop thread for every inbound PUBLISH, inside the read callback; it
    must not block. Satisfies :class:`~sskv_mapping._transport.base.Connection`.
    """

    def __init__(self, settings: ConnectionSettings, on_message: Callable[[InboundMessage], None]) -> None:
        self.settings = settings
        self._on_message = on_message
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: asyncio.Transport | None = None
        self._splitter = packets.PacketSplitter()
        self._connack: asyncio.Future[packets.Connack] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._closing = False
        self._started = False
        # output: packets queued since the last write, and whether a write is due
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._dispatching = False
        self._answered = False  # a handler published during the current data_received
        self._burst = False  # a write left at once this loop iteration: the others wait for the flush callback
        self._flushes = 0  # writes made; the keepalive timer compares it between ticks
        # QoS 1 publishes: packet id -> the future waiting for its PUBACK (publish) or failed by a refusal
        # (publish_nowait's ``refusal``), or None when nobody waits
        self._inflight: dict[int, asyncio.Future[Any] | None] = {}
        self._acked: dict[int, bool] = {}  # packet id -> whether publish() (not publish_nowait) waits on it
        # QoS 1 publishes beyond the broker's Receive Maximum: (topic field, payload, properties, waiter, waited)
        self._waiting: collections.deque[tuple[bytes, bytes, bytes, asyncio.Future[Any] | None, bool]] = (
            collections.deque()
        )
        self._receive_maximum = _DEFAULT_RECEIVE_MAXIMUM
        self.max_packet_size: int | None = None  # CONNACK's; h-config minimal check (h-stream owns the limits)
        self._next_id = 0
        self._sub_waiters: dict[int, asyncio.Future[list[int]]] = {}
        self._keepalive_handle: asyncio.TimerHandle | None = None
        self._flushes_seen = 0
        self._ping_sent: float | None = None
        self._lost_reason = ""

    # -- properties ---------------------------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed is not None and not self._closed.done()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<StreamConnection {self.settings.client_id!r} {self.settings.url} {state}>"

    # -- connect ------------------------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect (TCP or TLS, CONNECT, CONNACK); raises :class:`BrokerConnectError`."""
        if self._started:
            raise ClientStateError("StreamConnection.connect() may be called once")
        self._started = True
        s = self.settings
        loop = self._loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._connack = loop.create_future()
        ctx = ssl_context(s)
        token = read_sat_token(s)
        connect = packets.connect_packet(
            s.client_id,
            keepalive=s.keepalive,
            username=s.username,
            password=s.password,
            auth_method="K8S-SAT" if token is not None else None,
            auth_data=token,
        )
        try:
            async with asyncio.timeout(s.connect_timeout):
                await loop.create_connection(lambda: self, s.host, s.port, ssl=ctx, server_hostname=server_name(s))
                assert self._transport is not None
                self._transport.write(connect)
                _log_connect(s, token is not None)
                connack = await asyncio.shield(self._connack)
                log.debug("%s: received CONNACK (%s)", s.client_id, packets.reason_name(connack.reason))
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            self._abort()
            raise BrokerConnectError(f"could not connect to {s.url}: {exc or type(exc).__name__}") from exc
        except BaseException:
            self._abort()
            raise
        if connack.reason >= 0x80:
            self._abort()
            raise BrokerConnectError(f"could not connect to {s.url}: {packets.reason_name(connack.reason)}")
        maximum = connack.properties.get(0x21)
        if isinstance(maximum, int) and maximum > 0:
            self._receive_maximum = maximum
        self.max_packet_size = _positive(connack.properties.get(0x27))  # h-config minimal check
        keepalive = connack.properties.get(0x13)  # Server Keep Alive overrides ours
        interval = keepalive if isinstance(keepalive, int) else s.keepalive
        if interval > 0:
            self._keepalive_handle = loop.call_later(interval / 2, self._keepalive, interval)

    def _abort(self) -> None:
        """connect() failed: close whatever is open; the failure is connect()'s to report, not wait_closed()'s."""
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        if self._closed is not None:
            _settle(self._closed)

    # -- asyncio.Protocol ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # without it every round trip waits for Nagle (~40 ms)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            received = self._splitter.feed(data)
        except MalformedPacketError as exc:
            self._protocol_error(str(exc))
            return
        self._dispatching = True
        self._answered = False
        try:
            for first, body in received:
                kind = first >> 4
                if kind == packets.PUBLISH:
                    self._publish_received(first, body)
                elif kind == packets.PUBACK:
                    packet_id, reason = packets.decode_ack(body)
                    self._acknowledged(packet_id, reason)
                elif kind in (packets.SUBACK, packets.UNSUBACK):
                    packet_id, codes = packets.decode_suback(body)
                    waiter = self._sub_waiters.pop(packet_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(codes)
                elif kind == packets.PINGRESP:
                    self._ping_sent = None
                elif kind == packets.CONNACK:
                    if self._connack is None or self._connack.done():
                        raise MalformedPacketError("a second CONNACK")
                    self._connack.set_result(packets.decode_connack(body))
                elif kind == packets.DISCONNECT_TYPE:
                    reason, text = packets.decode_disconnect(body)
                    self._lost_reason = f"the broker disconnected us: {text or packets.reason_name(reason)}"
                    if self._transport is not None:
                        self._transport.close()
                    return
                else:  # AUTH (no enhanced-authentication exchange is spoken), or a packet only a broker receives
                    raise MalformedPacketError(f"unexpected packet type {kind}")
        except MalformedPacketError as exc:
            self._protocol_error(str(exc))
        finally:
            self._dispatching = False
            if self._out:
                if self._answered:
                    # a handler answered (the emulator's responses): out now, with the PUBACKs
                    self._flush()
                elif self._flush_handle is None:
                    # only PUBACKs (a requester): they leave with the requests the tasks just woken make in the
                    # next loop iteration -- one send, not two, per round trip
                    assert self._loop is not None
                    self._flush_handle = self._loop.call_soon(self._flush)

    def _publish_received(self, first: int, body: bytes) -> None:
        if first & 0x06 > 0x02:
            raise MalformedPacketError("a QoS 2 PUBLISH (this client subscribes at QoS 1 at most)")
        message, packet_id = decode_publish(first, body)
        try:
            self._on_message(message)
        except Exception:
            log.exception("message handler failed on topic %r", message.topic)
        if first & 0x02:
            self._out.append(packets.puback_packet(packet_id))

    def _protocol_error(self, text: str) -> None:
        log.warning("dropping the connection to %s: %s", self.settings.url, text)
        self._lost_reason = f"malformed packet from the broker: {text}"
        if self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        reason = self._lost_reason or (str(exc) if exc else "the broker closed the connection")
        if self._connack is not None and not self._connack.done():
            if exc is not None and not isinstance(exc, ConnectionError):
                self._connack.set_exception(exc)  # a TLS alert, ...: its own text
            else:
                self._connack.set_exception(ConnectionResetError("the broker closed the connection before CONNACK"))
            self._connack.exception()  # retrieved here: connect() may already have given up
        # The PUBACK waits of publish() and the SUBACK/UNSUBACK waits fail now. A refusal future belongs to its
        # requester, whose pending call the client fails when it learns of the drop (wait_closed).
        lost = ConnectionLostError(f"connection to {self.settings.url} lost: {reason}")
        waits = [w for pid, w in self._inflight.items() if self._acked.get(pid)]
        waits += [w for _, _, _, w, waited in self._waiting if waited]
        for waiter in [*waits, *self._sub_waiters.values()]:
            if waiter is not None and not waiter.done():
                waiter.set_exception(lost)
        self._inflight.clear()
        self._acked.clear()
        self._waiting.clear()
        self._sub_waiters.clear()
        if self._closed is not None and not self._closed.done():
            if self._closing:
                self._closed.set_result(None)
            else:
                self._closed.set_exception(lost)

    # -- output ---------------------------------------------------------------------------------------------------

    def _send(self, packet: bytes) -> None:
        self._out.append(packet)
        if self._dispatching:
            self._answered = True
            return
        if self._burst:
            return  # the callback below takes it, with the rest of this loop iteration's writes
        # The first write of a loop iteration outside a read callback leaves at once (a lone request's latency),
        # with the PUBACKs waiting for it; what the other tasks of the same iteration write leaves together in one
        # callback (a burst of requests: one send, not one each).
        self._burst = True
        self._write_out()
        if self._flush_handle is None:
            assert self._loop is not None
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        self._burst = False
        self._write_out()

    def _write_out(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(out[0] if len(out) == 1 else b"".join(out))
        self._flushes += 1

    def _keepalive(self, interval: int) -> None:
        """Every ``interval / 2`` s: a PINGREQ if nothing was written since the last tick; the connection is
        dropped when a PINGREQ's PINGRESP has not come by the tick ``interval`` s after it."""
        loop = self._loop
        if loop is None or self._transport is None:
            return
        now = loop.time()
        if self._ping_sent is not None and now - self._ping_sent >= interval:
            self._lost_reason = f"no PINGRESP within {interval} s"
            self._transport.abort()
            return
        if self._ping_sent is None and self._flushes == self._flushes_seen:
            self._ping_sent = now
            self._send(packets.PINGREQ)
        self._flushes_seen = self._flushes
        self._keepalive_handle = loop.call_later(interval / 2, self._keepalive, interval)

    def _packet_id(self) -> int:
        for _ in range(65_535):
            self._next_id = self._next_id % 65_535 + 1
            if self._next_id not in self._inflight and self._next_id not in self._sub_waiters:
                return self._next_id
        raise ConnectionLostError("no free MQTT packet identifier")  # pragma: no cover - 65,535 in flight

    # -- publish ------------------------------------------------------------------------------------------------

    def _require(self) -> None:
        if self._transport is None or self._closed is None or self._closed.done() or self._transport.is_closing():
            raise ConnectionLostError(f"not connected to {self.settings.url}")

    def _publish(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        correlation_data: bytes | None,
        response_topic: str | None,
        user_properties: Sequence[tuple[str, str]],
        content_type: str | None,
        message_expiry: int | None,
        waiter: asyncio.Future[Any] | None,
        waited: bool,
    ) -> None:
        self._require()
        if qos not in (0, 1):
            raise ConfigurationError(f"QoS {qos} is not supported (0 or 1)")
        field = _topic_field(topic)
        props = publish_properties(correlation_data, response_topic, user_properties, content_type, message_expiry)
        if len(field) + 2 + len(props) + len(payload) > packets.MAX_PACKET:
            raise ConfigurationError(f"cannot publish to {topic[:200]!r}: the packet would be over 256 MB")
        _check_packet_size(self.max_packet_size, topic, field, qos, props, payload)  # h-config minimal check
        if qos == 0:
            self._send(packets.publish_packet(field, payload, 0, 0, props))
            return
        if len(self._inflight) >= self._receive_maximum:
            # the broker takes only so many unacknowledged QoS 1 PUBLISHes ([MQTT-3.3.4-7]): wait for a PUBACK
            self._waiting.append((field, payload, props, waiter, waited))
            return
        self._send_qos1(field, payload, props, waiter, waited)

    def _send_qos1(
        self, field: bytes, payload: bytes, props: bytes, waiter: asyncio.Future[Any] | None, waited: bool
    ) -> None:
        packet_id = self._packet_id()
        self._inflight[packet_id] = waiter
        if waited:
            self._acked[packet_id] = True
        self._send(packets.publish_packet(field, payload, 1, packet_id, props))

    def _acknowledged(self, packet_id: int, reason: int) -> None:
        waiter = self._inflight.pop(packet_id, None)
        waited = self._acked.pop(packet_id, False)
        if waiter is not None and not waiter.done():
            if reason >= 0x80:
                # e.g. 0x87 Not authorized: the broker's ACL denied the PUBLISH, nothing was delivered
                waiter.set_exception(
                    PublishRefusedError(
                        f"the broker refused the PUBLISH: {packets.reason_name(reason)} (0x{reason:02X})"
                    )
                )
            elif waited:
                waiter.set_result(None)
            elif reason == _NO_MATCHING_SUBSCRIBERS:
                # accepted, but delivered to nobody: the state store is not subscribed (not started, or restarting
                # and not yet re-subscribed) -- a definite "not delivered": the requester may send it again
                waiter.set_exception(ServiceUnavailableError("no subscriber took the PUBLISH (PUBACK 0x10)"))
        while self._waiting and len(self._inflight) < self._receive_maximum:
            field, payload, props, next_waiter, next_waited = self._waiting.popleft()
            if next_waiter is not None and next_waiter.done():
                continue  # its caller gave up meanwhile
            self._send_qos1(field, payload, props, next_waiter, next_waited)

    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        correlation_data: bytes | None = None,
        response_topic: str | None = None,
        user_properties: Sequence[tuple[str, str]] = (),
        content_type: str | None = None,
        message_expiry: int | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Publish and, at QoS 1, wait for PUBACK (:class:`ConnectionLostError` if the connection ends first,
        :class:`PublishRefusedError` if the broker refuses it)."""
        fut: asyncio.Future[None] | None = asyncio.get_running_loop().create_future() if qos else None
        self._publish(
            topic, payload, qos, correlation_data, response_topic, user_properties, content_type, message_expiry,
            fut, True,
        )  # fmt: skip
        if fut is None:
            return
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            raise RequestTimeoutError(f"publish timed out on {self.settings.url}") from None

    def publish_nowait(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        correlation_data: bytes | None = None,
        response_topic: str | None = None,
        user_properties: Sequence[tuple[str, str]] = (),
        content_type: str | None = None,
        message_expiry: int | None = None,
        refusal: asyncio.Future[Any] | None = None,
    ) -> None:
        """Queue a publish and return at once (see :meth:`~sskv_mapping._transport.base.Connection.publish_nowait`):
        a refusing PUBACK fails ``refusal`` with :class:`PublishRefusedError`, one that reached no subscriber
        (0x10) with :class:`ServiceUnavailableError`."""
        self._publish(
            topic, payload, qos, correlation_data, response_topic, user_properties, content_type, message_expiry,
            refusal if qos else None, False,
        )  # fmt: skip

    # -- subscriptions ------------------------------------------------------------------------------------------

    async def _acked_request(self, build: Callable[[int], bytes], what: str, timeout: float) -> list[int]:
        self._require()
        assert self._loop is not None
        packet_id = self._packet_id()
        waiter: asyncio.Future[list[int]] = self._loop.create_future()
        self._sub_waiters[packet_id] = waiter
        self._send(build(packet_id))
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            raise RequestTimeoutError(f"{what} timed out on {self.settings.url}") from None
        finally:
            self._sub_waiters.pop(packet_id, None)

    async def subscribe(self, filters: Iterable[str], qos: int = 1, timeout: float = 10.0) -> None:
        """Subscribe and wait for SUBACK; a refused filter raises :class:`TransportError`."""
        topics = [(f, qos) for f in filters]
        if not topics:
            return
        codes = await self._acked_request(lambda pid: packets.subscribe_packet(pid, topics), "subscribe", timeout)
        bad = [packets.reason_name(c) for c in codes if c >= 0x80]
        if bad or len(codes) != len(topics):
            raise TransportError(f"broker refused subscription {[f for f, _ in topics]}: {bad or codes}")

    async def unsubscribe(self, filters: Iterable[str], timeout: float = 10.0) -> None:
        topics = list(filters)
        if not topics:
            return
        await self._acked_request(lambda pid: packets.unsubscribe_packet(pid, topics), "unsubscribe", timeout)

    # -- the end ------------------------------------------------------------------------------------------------

    async def wait_closed(self) -> None:
        """Return when the connection ended cleanly; raise :class:`ConnectionLostError` if it dropped."""
        if self._closed is None:
            raise ClientStateError("not connected")
        await asyncio.shield(self._closed)

    async def close(self) -> None:
        """Disconnect cleanly (DISCONNECT); safe to call twice and after a drop."""
        self._closing = True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self._out.append(packets.DISCONNECT)
            self._flush()
            transport.close()
        if self._closed is not None:
            if not self._closed.done() and transport is not None:
                with contextlib.suppress(TimeoutError, ConnectionLostError):
                    async with asyncio.timeout(5):
                        await asyncio.shield(self._closed)
            _settle(self._closed)
