""":class:`MqttSession`, the MQTT 5 session state of one client connection, without I/O.

Bytes and events in, bytes and events out (h11 under httpcore is the model): docs/design/transport.md.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Generic, TypeVar

from ..errors import ValueTooLargeError
from . import mqtt_packets as packets
from .mqtt_publish import MalformedPacketError, publish_size

__all__ = ["DEFAULT_RECEIVE_MAXIMUM", "KEEPALIVE_DEAD", "KEEPALIVE_OK", "KEEPALIVE_PING", "Keepalive", "MqttSession"]

T = TypeVar("T")

#: What we declare in CONNECT as our Receive Maximum when not told otherwise (QoS 1 PUBLISHes the broker may
#: send us before our PUBACKs; we acknowledge each as soon as it is read).
DEFAULT_RECEIVE_MAXIMUM = 256
#: MQTT's own limit on QoS 1 messages in flight (16-bit packet ids) when the broker states none
_BROKER_RECEIVE_MAXIMUM = 65_535

KEEPALIVE_OK, KEEPALIVE_PING, KEEPALIVE_DEAD = 0, 1, 2


class Keepalive:
    """The keepalive of one connection: when to send a PINGREQ, and when the link is dead. The transport calls
    :meth:`tick` every :attr:`tick_interval` seconds with its session's read and write counts, and
    :meth:`pingresp` at a PINGRESP."""

    __slots__ = ("_heard_at", "_ping_sent", "_reads_seen", "_said_at", "_writes_seen", "interval")

    def __init__(self, interval: int) -> None:
        self.interval = interval  #: seconds (0: none)
        self._reads_seen = self._writes_seen = 0  # the counts at the last tick, and when they last moved
        self._heard_at = self._said_at = 0.0
        self._ping_sent: float | None = None

    @property
    def tick_interval(self) -> float:
        """How often :meth:`tick` wants to be called (seconds); 0 when there is no keepalive."""
        return self.interval / 8

    def start(self, now: float, reads: int, writes: int) -> None:
        """The connection is up (CONNACK read) at ``now``, ``reads`` and ``writes`` made so far."""
        self._heard_at = self._said_at = now
        self._reads_seen, self._writes_seen = reads, writes

    def tick(self, now: float, reads: int, writes: int) -> int:
        """The keepalive decision at ``now``, ``reads`` and ``writes`` made so far: :data:`KEEPALIVE_PING` (write
        a PINGREQ), :data:`KEEPALIVE_DEAD` (drop the connection) or :data:`KEEPALIVE_OK`.

        By bytes *received*, whatever was written: a PINGREQ goes out when nothing was read for half the
        interval (or nothing written for half of it: the broker needs to hear from us), and a PINGRESP that has
        not come within half the interval after it means a dead link. A link that goes silent is so dropped
        within about 1.25 intervals (ticks every eighth), before the broker's own 1.5.
        """
        if reads != self._reads_seen:
            self._reads_seen = reads
            self._heard_at = now
        if writes != self._writes_seen:
            self._writes_seen = writes
            self._said_at = now
        half = self.interval / 2
        if self._ping_sent is not None:
            return KEEPALIVE_DEAD if now - self._ping_sent >= half else KEEPALIVE_OK
        if now - self._heard_at >= half or now - self._said_at >= half:
            self._ping_sent = now
            return KEEPALIVE_PING
        return KEEPALIVE_OK

    def pingresp(self) -> None:
        self._ping_sent = None


class MqttSession(Generic[T]):
    """The session state of one MQTT 5 client connection (docs/design/transport.md). One per connection.

    Outbound: :meth:`connect_packet`, :meth:`publish` (the PUBLISH to write now, or ``None`` when it waits for
    the Receive Maximum), :meth:`request_id` (SUBSCRIBE/UNSUBSCRIBE). Inbound: :meth:`feed` (the whole packets
    of a read), :meth:`connack`, :meth:`puback` then :meth:`release` (what the freed quota lets go),
    :meth:`acknowledged_request`. Time: its :attr:`keepalive` (:class:`Keepalive`). Across a reconnect:
    :meth:`disconnected`, then the next connection's :meth:`adopt` and :meth:`resume`. End: :meth:`lost` (every
    token still held).
    """

    __slots__ = (
        "_acks",
        "_next_id",
        "inflight",
        "keepalive",
        "max_inbound_packet_size",
        "max_packet_size",
        "queued",
        "queued_bytes",
        "reads",
        "receive_maximum",
        "resent",
        "send_quota",
        "splitter",
        "writes",
    )

    def __init__(
        self,
        *,
        keepalive: int = 60,
        receive_maximum: int = DEFAULT_RECEIVE_MAXIMUM,
        max_inbound_packet_size: int = packets.MAX_PACKET + 5,
    ) -> None:
        #: when to send a PINGREQ, when the link is dead; the broker's Server Keep Alive replaces ours at CONNACK
        self.keepalive = Keepalive(keepalive)
        #: ours, declared in CONNECT
        self.receive_maximum = receive_maximum
        self.max_inbound_packet_size = max_inbound_packet_size
        #: the broker's, from CONNACK: QoS 1 publishes it takes unacknowledged, and the largest packet it takes
        self.send_quota = _BROKER_RECEIVE_MAXIMUM
        self.max_packet_size: int | None = None
        self.splitter = packets.PacketSplitter(max_inbound_packet_size)
        #: QoS 1 publishes: packet id -> (token, the PUBLISH as sent), until the PUBACK; insertion order is the
        #: order they left in, the order a resumed session sends them again in
        self.inflight: dict[int, tuple[T, bytes]] = {}
        #: QoS 1 publishes beyond the broker's Receive Maximum: (topic field, payload, properties, token, the
        #: PUBLISH's Remaining Length)
        self.queued: collections.deque[tuple[bytes, bytes, bytes, T, int]] = collections.deque()
        #: the size of what ``queued`` holds (the transport counts it in its write backlog)
        self.queued_bytes = 0
        self._acks: dict[int, T] = {}  # SUBSCRIBE/UNSUBSCRIBE packet id -> token
        self._next_id = 0
        #: reads and writes so far: the transport counts them (an integer add on the hot path, no clock read), the
        #: keepalive's tick reads them
        self.reads = 0
        self.writes = 0
        #: publishes sent again (DUP=1) by resumed sessions, this one's predecessors included
        self.resent = 0

    # -- outbound ---------------------------------------------------------------------------------------------

    def connect_packet(
        self,
        client_id: str,
        *,
        username: str | None = None,
        password: str | bytes | None = None,
        auth_method: str | None = None,
        auth_data: bytes | None = None,
        clean_start: bool = True,
        session_expiry: int = 0,
    ) -> bytes:
        """The CONNECT, with our keepalive, Receive Maximum, session flags and -- only when it is a limit lower
        than MQTT's own -- our Maximum Packet Size (absent means "no limit but the protocol's"; a strict broker
        refuses the protocol's ceiling as a value)."""
        maximum = self.max_inbound_packet_size
        return packets.connect_packet(
            client_id,
            keepalive=self.keepalive.interval,
            username=username,
            password=password,
            auth_method=auth_method,
            auth_data=auth_data,
            receive_maximum=self.receive_maximum,
            maximum_packet_size=maximum if maximum < packets.MAX_PACKET + 5 else None,
            clean_start=clean_start,
            session_expiry=session_expiry,
        )

    def publish(self, topic_field: bytes, payload: bytes, qos: int, properties: bytes, token: T) -> bytes | None:
        """The PUBLISH to write now, or ``None`` when it has to wait for a PUBACK first (the broker's Receive
        Maximum, [MQTT-3.3.4-7]; :meth:`release` hands it out later). ``token`` comes back with its PUBACK.

        Raises :class:`ValueTooLargeError` (nothing is kept) when the packet is over the broker's Maximum
        Packet Size ([MQTT-3.2.2-15]) or over what MQTT can express.
        """
        limit = self.max_packet_size
        size = len(topic_field) + len(properties) + len(payload)
        # at most 7 bytes of fixed header and packet id: only a packet near the limit has its exact size worked out
        if size + 7 > (packets.MAX_PACKET + 5 if limit is None else limit):
            self.check_size(publish_size(len(topic_field), len(properties), len(payload), qos))
        if not qos:
            return packets.publish_packet(topic_field, payload, 0, 0, properties)
        inflight = self.inflight
        # behind those queued already (a read's PUBACKs release them at its end): in the order they were published
        if self.queued or len(inflight) >= self.send_quota:
            self.queued.append((topic_field, payload, properties, token, size + 2))
            self.queued_bytes += size + 2
            return None
        # the next packet id (_packet_id's usual case, inline) and the PUBLISH (publish_packet's, inline when its
        # Remaining Length takes one or two bytes): once per request sent and per reply
        packet_id = self._next_id % 65_535 + 1
        if packet_id in inflight or packet_id in self._acks:
            packet_id = self._packet_id()
        else:
            self._next_id = packet_id
        size += 2
        if size < 0x4000:
            length = bytes((size,)) if size < 0x80 else bytes((size & 0x7F | 0x80, size >> 7))
            packet = b"".join((b"\x32", length, topic_field, packet_id.to_bytes(2, "big"), properties, payload))
        else:
            packet = packets.publish_packet(topic_field, payload, 1, packet_id, properties)
        inflight[packet_id] = (token, packet)
        return packet

    def check_size(self, size: int) -> None:
        """Raise :class:`ValueTooLargeError` if a packet of ``size`` bytes (fixed header included:
        :func:`~sskv_mapping._protocol.mqtt_publish.publish_size`) may not be sent."""
        limit = self.max_packet_size
        if limit is not None:
            if size > limit:
                raise ValueTooLargeError(
                    f"the packet would be {size:,} bytes, more than the broker's Maximum Packet Size ({limit:,})",
                    size=size,
                    limit=limit,
                )
        elif size > packets.MAX_PACKET + 5:
            raise ValueTooLargeError(
                f"the packet would be {size:,} bytes, more than MQTT allows", size=size, limit=packets.MAX_PACKET + 5
            )

    def request_id(self, token: T) -> int:
        """A packet id for a SUBSCRIBE/UNSUBSCRIBE whose acknowledgement ``token`` waits for."""
        packet_id = self._packet_id()
        self._acks[packet_id] = token
        return packet_id

    def forget_request(self, packet_id: int) -> None:
        """The SUBSCRIBE/UNSUBSCRIBE's caller gave up: its packet id is free again."""
        self._acks.pop(packet_id, None)

    def _packet_id(self) -> int:
        inflight, acks = self.inflight, self._acks
        packet_id = self._next_id % 65_535 + 1
        if packet_id not in inflight and packet_id not in acks:  # the usual case: the next one is free
            self._next_id = packet_id
            return packet_id
        for _ in range(65_535):
            self._next_id = self._next_id % 65_535 + 1
            if self._next_id not in inflight and self._next_id not in acks:
                return self._next_id
        raise MalformedPacketError("no free MQTT packet identifier")  # pragma: no cover - 65,535 in flight

    # -- inbound ----------------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The whole packets in the stream so far, ``[(first byte, body), ...]``; a packet over our Maximum
        Packet Size raises :class:`MalformedPacketError` as soon as its header is read."""
        self.reads += 1
        return self.splitter.feed(data)

    def connack(self, body: bytes) -> packets.Connack:
        """The broker's CONNACK: on success its Receive Maximum, Maximum Packet Size and Server Keep Alive
        (which replaces ours) take effect."""
        connack = packets.decode_connack(body)
        if connack.reason < 0x80:
            props = connack.properties
            maximum = props.get(0x21)
            if isinstance(maximum, int) and maximum > 0:
                self.send_quota = maximum
            size = props.get(0x27)
            if isinstance(size, int) and size > 0:
                self.max_packet_size = size
            keepalive = props.get(0x13)
            if isinstance(keepalive, int):
                self.keepalive.interval = keepalive
        return connack

    def puback(self, body: bytes) -> tuple[T | None, int]:
        """A PUBACK: ``(the token of that publish, or None if unknown, reason code)``. Call :meth:`release`
        after it: the quota it freed may let queued publishes go."""
        packet_id, reason = packets.decode_ack(body)
        entry = self.inflight.pop(packet_id, None)
        return (None if entry is None else entry[0]), reason

    def release(self, abandoned: Callable[[T], bool]) -> list[tuple[bytes, T]]:
        """The queued publishes the broker's Receive Maximum now lets go, as ``(PUBLISH, token)``; those whose
        token is ``abandoned`` (their caller gave up) are dropped instead."""
        out: list[bytes] = []
        tokens: list[T] = []
        self.release_into(out, abandoned, tokens)
        return list(zip(out, tokens, strict=True))

    def release_into(self, out: list[bytes], abandoned: Callable[[T], bool], tokens: list[T] | None = None) -> int:
        """:meth:`release`, the PUBLISHes appended to ``out`` (their tokens to ``tokens``, if given); returns their
        size in bytes. A transport's read calls it once after the read's PUBACKs."""
        queued, inflight, acks = self.queued, self.inflight, self._acks
        room = self.send_quota - len(inflight)
        added = 0
        while queued and room > 0:
            field, payload, props, token, size = queued.popleft()
            self.queued_bytes -= size
            if abandoned(token):
                continue
            room -= 1
            packet_id = self._next_id % 65_535 + 1  # _packet_id's usual case, inline
            if packet_id in inflight or packet_id in acks:
                packet_id = self._packet_id()
            else:
                self._next_id = packet_id
            if size < 0x4000:  # publish_packet's work, inline as in publish(): one per request past the quota
                length = bytes((size,)) if size < 0x80 else bytes((size & 0x7F | 0x80, size >> 7))
                packet = b"".join((b"\x32", length, field, packet_id.to_bytes(2, "big"), props, payload))
            else:
                packet = packets.publish_packet(field, payload, 1, packet_id, props)
            inflight[packet_id] = (token, packet)
            out.append(packet)
            added += len(packet)
            if tokens is not None:
                tokens.append(token)
        return added

    def acknowledged_request(self, body: bytes) -> tuple[T | None, list[int]]:
        """A SUBACK/UNSUBACK: ``(the token of that request, or None, the reason codes)``."""
        packet_id, codes = packets.decode_suback(body)
        return self._acks.pop(packet_id, None), codes

    # -- the end ----------------------------------------------------------------------------------------------

    def lost(self) -> list[T]:
        """The connection is gone, and the session with it: every token still held (in flight, queued,
        awaiting a SUBACK), once."""
        tokens = [*(entry[0] for entry in self.inflight.values()), *(entry[3] for entry in self.queued)]
        tokens += self._acks.values()
        self.inflight.clear()
        self.queued.clear()
        self.queued_bytes = 0
        self._acks.clear()
        return tokens

    def disconnected(self, keep: Callable[[T], bool]) -> list[T]:
        """The connection is gone but the broker keeps the session: the QoS 1 publishes not yet acknowledged
        (and those queued for the Receive Maximum) whose token ``keep`` accepts stay, to be sent again by the
        next connection (:meth:`adopt`, :meth:`resume`); every other token is returned, once (the SUBACK waits,
        the publishes not kept). What belonged to the connection (reassembly, keepalive, the broker's limits)
        starts again."""
        out = list(self._acks.values())
        self._acks.clear()
        for packet_id, (token, _) in list(self.inflight.items()):
            if not keep(token):
                del self.inflight[packet_id]
                out.append(token)
        if self.queued and not all(keep(entry[3]) for entry in self.queued):
            kept: collections.deque[tuple[bytes, bytes, bytes, T, int]] = collections.deque()
            for entry in self.queued:
                if keep(entry[3]):
                    kept.append(entry)
                else:
                    self.queued_bytes -= entry[4]
                    out.append(entry[3])
            self.queued = kept
        self.splitter = packets.PacketSplitter(self.max_inbound_packet_size)
        self.keepalive.pingresp()  # no PINGREQ outstanding
        self.send_quota = _BROKER_RECEIVE_MAXIMUM
        self.max_packet_size = None
        return out

    def adopt(self, previous: MqttSession[T]) -> None:
        """Before CONNECT: take over what ``previous`` (the session of the connection that dropped, after its
        :meth:`disconnected`, or one whose connect failed after it adopted) kept -- the publishes to send again
        and the packet ids they hold."""
        self.inflight, previous.inflight = previous.inflight, {}
        self.queued, previous.queued = previous.queued, collections.deque()
        self.queued_bytes, previous.queued_bytes = previous.queued_bytes, 0
        self._next_id = previous._next_id
        self.resent = previous.resent

    def resume(self, session_present: bool, abandoned: Callable[[T], bool]) -> tuple[list[bytes], list[T]]:
        """After a successful CONNACK on a connection that :meth:`adopt`-ed a session: ``(the PUBLISHes to send
        again, the tokens lost)``.

        Session present: every publish still in flight goes again, DUP=1 and with its packet id, in the order it
        first left ([MQTT-4.4.0-1]; those whose token is ``abandoned`` are dropped: their caller gave up), then
        what the broker's (new) Receive Maximum lets go of the queue. Not present (the broker lost the session):
        nothing is sent again -- the outcome of each is unknown -- and every token held is returned, once."""
        if not session_present:
            return [], self.lost()
        out: list[bytes] = []
        for packet_id, (token, packet) in list(self.inflight.items()):
            if abandoned(token):
                del self.inflight[packet_id]
                continue
            dup = bytes((packet[0] | 0x08,)) + packet[1:]
            self.inflight[packet_id] = (token, dup)
            out.append(dup)
        self.resent += len(out)
        out += [packet for packet, _ in self.release(abandoned)]
        return out, []
