"""Layer 2 (transport), I/O part: the hooks :class:`~sskv_mapping._transport.mqtt.MqttConnection` installs on
the paho client of its ``aiomqtt.Client``; see :class:`PahoHooks`.

Part of the one place that imports aiomqtt/paho (the ``_transport.mqtt`` package), and the only module that
touches their private names: each one is listed, with what it is for, in :data:`_INTERNALS`, and each access
is marked ``# noqa: SLF001``. Two kinds of hook:

* **correctness** (always): PUBACK waits and refusals through paho's public ``on_publish``, the server's
  Receive Maximum from ``on_connect``, and ``on_disconnect`` ending a CONNECT the broker closed before CONNACK;
* **performance shortcuts** (unless ``SSKV_MQTT_FASTPATH=0``, and only while paho has every internal they
  use): paho's PUBLISH/PUBACK handlers replaced, socket reads batched, writes flushed and coalesced.

Must not import anything above ``_transport``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import aiomqtt
import paho.mqtt.client as paho_client
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from ..._protocol.mqtt_publish import InboundMessage, MalformedPacketError, decode_publish
from ...errors import PublishRefusedError, ServiceUnavailableError

__all__ = ["PahoHooks", "paho_client_of"]

log = logging.getLogger("sskv_mapping.transport")

#: Every private name of aiomqtt's and paho's ``Client`` this module touches, as ``(owner, name)``, and what for.
#: The performance shortcuts are installed only when the paho client has every ``"paho"`` name
#: (:data:`_PAHO_INTERNALS`): with another paho release, paho's own (slower) path stays in place.
_INTERNALS: tuple[tuple[str, str], ...] = (
    # aiomqtt.Client
    ("aiomqtt", "_client"),  # its paho client: where the hooks go, and paho's own publish (no per-message wait)
    ("aiomqtt", "_connected"),  # the CONNACK future: failed at once when the broker closes before CONNACK
    ("aiomqtt", "_disconnected"),  # the end-of-connection future: a failed write ends the connection through it
    ("aiomqtt", "_pending_publishes"),  # its publish()'s PUBACK waits: its on_publish runs only if there are some
    # paho.Client, correctness
    ("paho", "_max_inflight_messages"),  # the in-flight limit, set from CONNACK (the public setter refuses then)
    # paho.Client, performance shortcuts
    ("paho", "_in_packet"),  # the packet being read: its first byte ("command") and body ("packet")
    ("paho", "_handle_publish"),  # paho's inbound PUBLISH handler, replaced per client
    ("paho", "_handle_pubackcomp"),  # paho's inbound PUBACK/PUBCOMP handler, replaced per client
    ("paho", "_send_puback"),  # queues the PUBACK of a received QoS 1 PUBLISH
    ("paho", "_manual_ack"),  # whether the application acknowledges received messages itself (never here)
    ("paho", "_out_messages"),  # outgoing QoS > 0 messages waiting for their acknowledgement, by packet id
    ("paho", "_out_message_mutex"),  # the lock of _out_messages
    ("paho", "_do_on_publish"),  # completes an outgoing message and calls on_publish
    ("paho", "_easy_log"),  # paho's logger (the debug line of each received packet)
    ("paho", "_out_packet"),  # the queue of packets to write: coalesced before a flush
    ("paho", "_sock_recv"),  # paho's socket read, replaced per client by one large read
    ("paho", "_sock"),  # the socket (None once closed)
    ("paho", "_userdata"),  # passed on to aiomqtt's writer callback
)
_PAHO_INTERNALS = tuple(name for owner, name in _INTERNALS if owner == "paho")

_PUBACK_SUCCESS = ReasonCode(PacketTypes.PUBACK)
_NO_MATCHING_SUBSCRIBERS = 0x10  # a PUBACK reason code: accepted, but no subscription matched
_PUBACK_NO_PROPERTIES = Properties(PacketTypes.PUBACK)  # type: ignore[no-untyped-call]
_MQTT_LOG_DEBUG = paho_client.MQTT_LOG_DEBUG

#: How much one ``recv`` asks for; paho itself asks for 1 byte (packet type), 1 byte at a time (remaining
#: length), then the rest: three system calls per packet, which :meth:`PahoHooks._sock_recv` turns into one.
_RECV_SIZE = 65536

_PUBLISH = 0x30
_DISCONNECT = 0xE0


def paho_client_of(client: aiomqtt.Client) -> paho_client.Client:
    """The paho client that ``client`` drives."""
    paho: paho_client.Client = client._client  # noqa: SLF001
    return paho


def _decode_publish(header: int, packet: bytes | bytearray) -> tuple[InboundMessage, int]:
    """:func:`~sskv_mapping._protocol.mqtt_publish.decode_publish`, refusing with paho's ``MalformedPacket``
    (what paho's own decoder raises there: paho ends the connection)."""
    try:
        return decode_publish(header, packet)
    except MalformedPacketError as exc:
        raise MalformedPacket(str(exc)) from exc


def _fail_connect(connected: asyncio.Future[Any]) -> None:
    if not connected.done():
        connected.set_exception(aiomqtt.MqttError("the broker closed the connection before CONNACK"))


class PahoHooks:
    """The hooks of one ``aiomqtt.Client``'s paho client, installed before CONNECT.

    aiomqtt keeps owning the connection: CONNECT/TLS/auth, SUBSCRIBE, keepalive, DISCONNECT, reading the
    socket (its reader callback runs paho's ``loop_read``) and reporting the end of the connection.

    Correctness, always installed (paho's public callbacks, each calling aiomqtt's on):

    * **PUBACK waits**: :meth:`MqttConnection.publish` waits on one future per packet id in :attr:`acks`,
      resolved from paho's ``on_publish`` and failed when the connection ends (aiomqtt's wait only times out);
      a refusing PUBACK fails it, or the future a ``publish_nowait`` caller left in :attr:`refusals`.
    * **Receive Maximum**: paho ignores the server's (CONNACK); MQTT 5 says a client must not have more
      unacknowledged QoS 1 PUBLISHes than that ([MQTT-3.3.4-7]). It becomes paho's in-flight limit: publishes
      beyond it wait in paho's queue and go out as PUBACKs come back.
    * **disconnect before CONNACK**: fails the connect at once instead of after ``connect_timeout``.

    Performance shortcuts, with ``shortcuts=True`` and paho's internals present (:attr:`packet_shortcuts`); each
    one measured on the request path (``benchmarks/bench_rpc.py``):

    * **inbound PUBLISH** (QoS 0/1): decoded by the pure codec straight into an :class:`InboundMessage` and
      handed to the handler, then PUBACKed by paho's own ``_send_puback``. paho's property decoder was ~150 us
      per message here; also skipped: paho's ``MQTTMessage`` and topic matcher, aiomqtt's ``Message``/``Topic``.
      QoS 2 still goes through paho.
    * **inbound PUBACK** (the common 2-byte "success" form): paho's ``_do_on_publish`` is called with shared
      success/no-properties values instead of decoding a ``ReasonCode`` and a ``Properties`` per packet.
    * **reads**: one large ``recv`` serves paho's small reads, and ``loop_read`` goes on while bytes wait.
    * **outbound writes**: paho queues packets and asks for the socket to be watched for writability;
      aiomqtt answers by ``call_soon_threadsafe(add_writer)`` (a self-pipe write, an epoll_ctl pair and two
      loop iterations per burst). On the loop thread the queue is instead flushed once by a ``call_soon``
      callback, so a response and its PUBACK, or a burst of requests, leave together. When the socket
      cannot take everything, or off the loop thread (CONNECT is sent from an executor), aiomqtt's writer
      does it as before.
    """

    def __init__(
        self,
        client: aiomqtt.Client,
        loop: asyncio.AbstractEventLoop,
        handler: Callable[[InboundMessage], None],
        *,
        shortcuts: bool = True,
    ) -> None:
        paho = paho_client_of(client)
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
        self._aiomqtt_pending_publishes: dict[int, Any] = client._pending_publishes  # noqa: SLF001
        # aiomqtt's own callbacks, called on from ours (paho types them as a union of its callback API versions)
        self._aiomqtt_on_publish = cast(Callable[..., None], paho.on_publish)
        self._aiomqtt_on_connect = cast(Callable[..., None], paho.on_connect)
        self._aiomqtt_on_disconnect = cast(Callable[..., None], paho.on_disconnect)
        paho.on_publish = self._on_publish
        paho.on_connect = self._on_connect
        paho.on_disconnect = self._on_disconnect
        self._aiomqtt_register_write = cast(Callable[..., None], paho.on_socket_register_write)
        self._aiomqtt_unregister_write = cast(Callable[..., None], paho.on_socket_unregister_write)
        self._aiomqtt_writer = False  # aiomqtt's writer callback is (being) added for the socket
        #: the performance shortcuts are installed
        self.packet_shortcuts = shortcuts and all(hasattr(paho, name) for name in _PAHO_INTERNALS)
        if self.packet_shortcuts:
            paho.on_socket_register_write = self._register_write
            paho.on_socket_unregister_write = self._unregister_write
            self._paho_handle_publish = paho._handle_publish  # noqa: SLF001
            self._paho_handle_pubackcomp = paho._handle_pubackcomp  # noqa: SLF001
            self._paho_sock_recv = paho._sock_recv  # noqa: SLF001
            self._paho_loop_read = paho.loop_read
            self._rbuf = b""
            self._rpos = 0
            # Instance attributes shadow the methods for this one client: paho calls self._handle_publish().
            paho._handle_publish = self._handle_publish  # type: ignore[method-assign]  # noqa: SLF001
            paho._handle_pubackcomp = self._handle_pubackcomp  # type: ignore[method-assign]  # noqa: SLF001
            paho._sock_recv = self._sock_recv  # type: ignore[method-assign]  # noqa: SLF001
            paho.loop_read = self._loop_read  # type: ignore[method-assign]
        elif shortcuts:  # pragma: no cover - another paho release
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
        while (
            rc == MQTTErrorCode.MQTT_ERR_SUCCESS and self._rpos < len(self._rbuf) and paho._sock is not None  # noqa: SLF001
        ):
            rc = self._paho_loop_read(max_packets)
        if self._flush_handle is not None and self.published:
            # A handler answered (the emulator): send now rather than one loop iteration later. Only PUBACKs
            # queued (a requester): wait for that iteration, where the tasks just woken add their requests.
            self._flush_handle.cancel()
            self._flush()
        return rc

    def _handle_publish(self) -> MQTTErrorCode:
        paho = self._paho
        in_packet = paho._in_packet  # noqa: SLF001
        header: int = in_packet["command"]
        if header & 0x06 > 0x02:  # QoS 2 (or the invalid 3): paho's own handling
            return self._paho_handle_publish()
        message, mid = _decode_publish(header, in_packet["packet"])
        if log.isEnabledFor(logging.DEBUG):
            paho._easy_log(  # noqa: SLF001
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
        if header & 0x06 and not paho._manual_ack:  # noqa: SLF001
            return paho._send_puback(mid)  # noqa: SLF001
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _handle_pubackcomp(self, cmd: str) -> MQTTErrorCode:
        paho = self._paho
        packet = paho._in_packet["packet"]  # noqa: SLF001
        if cmd != "PUBACK" or len(packet) != 2:  # a reason code or properties: paho decodes them
            return self._paho_handle_pubackcomp(cmd)  # type: ignore[arg-type]
        mid = (packet[0] << 8) | packet[1]
        if log.isEnabledFor(logging.DEBUG):
            paho._easy_log(_MQTT_LOG_DEBUG, "Received PUBACK (Mid: %d)", mid)  # noqa: SLF001
        with paho._out_message_mutex:  # noqa: SLF001
            if mid in paho._out_messages:  # noqa: SLF001
                return paho._do_on_publish(mid, _PUBACK_SUCCESS, _PUBACK_NO_PROPERTIES)  # noqa: SLF001
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
        if paho._sock is None:  # noqa: SLF001
            return
        self._coalesce(paho._out_packet)  # noqa: SLF001
        try:
            paho.loop_write()
        except Exception as exc:  # what aiomqtt's writer callback does with it
            disconnected: asyncio.Future[None] = self._aiomqtt._disconnected  # noqa: SLF001
            if not disconnected.done():
                disconnected.set_exception(exc)
            return
        sock = paho._sock  # noqa: SLF001
        if sock is not None and paho.want_write():
            # The socket took only part of it: paho still counts the write as registered, so aiomqtt's writer
            # is added now, and removed by paho once the queue is empty.
            self._aiomqtt_writer = True
            self._aiomqtt_register_write(paho, paho._userdata, sock)  # noqa: SLF001

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
