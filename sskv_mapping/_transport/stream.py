""":class:`StreamConnection`, our MQTT 5 connection on an asyncio ``Protocol``: the default transport.

Why it exists and each of its concerns: docs/design/transport.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any, cast

from .._protocol import mqtt_packets as packets
from .._protocol.mqtt_publish import (
    InboundMessage,
    MalformedPacketError,
    OutgoingMessage,
    decode_publish,
    mqtt_str,
    publish_properties,
)
from .._protocol.mqtt_session import KEEPALIVE_DEAD, KEEPALIVE_PING, MqttSession
from ..errors import (
    BrokerConnectError,
    ClientStateError,
    ConfigurationError,
    ConnectionLostError,
    CredentialsRefusedError,
    PublishRefusedError,
    RequestTimeoutError,
    ServiceUnavailableError,
    SessionLostError,
    SessionTakenOverError,
    TransportError,
    WriteBufferFullError,
)
from .base import Connection
from .sat import SatSession, read_sat_token
from .settings import ConnectionSettings
from .tls import server_name, ssl_context

__all__ = ["StreamConnection"]

log = logging.getLogger("sskv_mapping.transport")

#: Write flow control: asyncio pauses our writing above the high-water mark of its buffer and resumes it below
#: the low one (``pause_writing``/``resume_writing``); ``publish`` waits while paused. ``publish_nowait`` never
#: waits: it raises :class:`WriteBufferFullError` when the write backlog (the transport's buffer, this
#: iteration's pending output and the publishes held for the broker's Receive Maximum) would pass the bound.
WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 256 << 10
WRITE_BOUND = 16 << 20
#: what a broker's first packet may start with: CONNACK, or AUTH (enhanced authentication before the CONNACK)
_FIRST_FROM_BROKER = (0x20, 0xF0)

#: Linux's TCP_QUICKACK (absent elsewhere): see ``StreamConnection.connection_made``.
_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)

_NO_MATCHING_SUBSCRIBERS = 0x10
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


#: What the session keeps per QoS 1 publish or SUBSCRIBE: the future to resolve (a PUBACK or SUBACK wait, or
#: publish_nowait's ``refusal``) or None, and whether a caller awaits it (publish, subscribe) -- those fail when
#: the connection drops; a refusal future belongs to its requester, which learns of the drop by wait_closed.
_Token = tuple["asyncio.Future[Any] | None", bool]


#: the token of a publish with nothing to resolve and nobody waiting (a reply, a QoS 0 publish): one, shared
_NOTHING_AWAITED: _Token = (None, False)


def _abandoned(token: _Token) -> bool:
    return token[0] is not None and token[0].done()


def _resume(session: MqttSession[_Token], present: bool, settings: ConnectionSettings) -> list[bytes]:
    """A reconnect's CONNACK: what to send again (the broker kept the session), or nothing and every future held
    failed with :class:`SessionLostError` (it did not)."""
    resend, lost = session.resume(present, _abandoned)
    if lost:
        gone = SessionLostError(
            f"the broker at {settings.url} no longer had the session of {settings.client_id!r}: a request sent "
            "before the reconnect may or may not have been carried out"
        )
        for waiter, _ in lost:
            if waiter is not None and not waiter.done():
                waiter.set_exception(gone)
    return resend


def _fail_waits(session: MqttSession[_Token], kept: bool, lost: TransportError) -> None:
    """The connection is gone: the PUBACK waits of ``publish()`` and the SUBACK/UNSUBACK waits fail now. A
    refusal future belongs to its requester, whose pending call the client fails when it learns of the drop
    (wait_closed). ``kept`` (a session the broker keeps): the publishes nobody awaits the PUBACK of (requests,
    replies) stay in the session for the next connection (carry_over), to be sent again if the broker resumes
    it."""
    for waiter, waited in session.disconnected(lambda token: not token[1]) if kept else session.lost():
        if waited and waiter is not None and not waiter.done():
            waiter.set_exception(lost)


def _refused(settings: ConnectionSettings, reason: int, text: str) -> BrokerConnectError | SessionTakenOverError:
    """The typed error for a CONNACK refusal (or a DISCONNECT) with ``reason``."""
    what = f"{packets.reason_name(reason)} (0x{reason:02X})"
    if reason == packets.SESSION_TAKEN_OVER:
        return SessionTakenOverError(
            f"{text}: {what}: another connection uses the client id {settings.client_id!r} -- give each process "
            "its own client id",
            client_id=settings.client_id,
        )
    if reason in packets.BAD_CREDENTIALS:
        return CredentialsRefusedError(f"{text}: {what}")
    return BrokerConnectError(f"{text}: {what}")


def _acknowledged(token: _Token, reason: int) -> None:
    """A PUBACK for the publish of ``token``: resolve or fail its future."""
    waiter, waited = token
    if waiter is not None and not waiter.done():
        if reason >= 0x80:
            # e.g. 0x87 Not authorized: the broker's ACL denied the PUBLISH, nothing was delivered
            waiter.set_exception(
                PublishRefusedError(f"the broker refused the PUBLISH: {packets.reason_name(reason)} (0x{reason:02X})")
            )
        elif waited:
            waiter.set_result(None)
        elif reason == _NO_MATCHING_SUBSCRIBERS:
            # accepted, but delivered to nobody: the state store is not subscribed (not started, or restarting
            # and not yet re-subscribed) -- a definite "not delivered": the requester may send it again
            waiter.set_exception(ServiceUnavailableError("no subscriber took the PUBLISH (PUBACK 0x10)"))


def _tune_socket(sock: Any) -> Callable[[], None] | None:
    """TCP_NODELAY on a TCP socket; returns what re-arms TCP_QUICKACK after a read (None where there is none).

    NODELAY: without it every round trip waits for our own Nagle (~40 ms). QUICKACK: a broker on its default
    settings (mosquitto without set_tcp_nodelay: Debian's service, the official image) writes with Nagle on, so
    a second small write waits for the ACK of the first, and Linux delays that ACK by up to 40 ms when it has no
    data to send with it -- 44 ms per existing-key write, 440 ms per new dict key. We cannot set the broker's
    socket options, but we can ACK at once: setting TCP_QUICKACK sends the pending ACK now. Linux leaves quick-ACK
    mode as it sees fit, so it is set again after every read (one setsockopt, ~1 us, per read callback); setting
    it before the read would not do, the kernel decided on the delayed ACK when the data came.

    ``sock`` is the transport's ``get_extra_info("socket")``: asyncio's loop gives a ``TransportSocket``, uvloop a
    ``PseudoSocket``, both of which take ``setsockopt`` (also under TLS: the SSL transport passes the TCP one on).
    A loop that gives no socket (None), or one that refuses the option, runs untuned: correct, only slower
    against a Nagle-on broker (logged at debug level).
    """
    if getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError) as exc:  # AttributeError: a loop's socket stand-in without setsockopt
        log.debug("TCP_NODELAY not set on %r: %s", sock, exc)
        return None
    if _TCP_QUICKACK is None:
        return None
    return functools.partial(sock.setsockopt, socket.IPPROTO_TCP, _TCP_QUICKACK, 1)


class _Output:
    """What :class:`StreamConnection` writes, and when: the packets queued since the last write and the one
    ``write`` they leave in (at the end of a read callback, or in one ``call_soon`` callback for what a loop
    iteration's tasks publish), and asyncio's write flow control (``pause_writing``/``resume_writing``: a publish
    that may wait awaits :meth:`wait_writable`; the write backlog bounds ``publish_nowait``)."""

    __slots__ = (
        "_burst",
        "_flush_handle",
        "_session",
        "_settings",
        "_writable",
        "answered",
        "dispatching",
        "loop",
        "out",
        "out_bytes",
        "paused",
        "read_flow_control",
        "transport",
        "write_bound",
    )

    def __init__(self, session: MqttSession[_Token], settings: ConnectionSettings) -> None:
        self._session = session  # counts the writes (keepalive) and holds the publishes over Receive Maximum
        self._settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None
        self.transport: asyncio.Transport | None = None
        #: packets queued since the last write (a PUBACK inside a read is appended here directly)
        self.out: list[bytes] = []
        self.out_bytes = 0  # bytes in out (the PUBACKs a read appends are not counted: four bytes each)
        self._flush_handle: asyncio.Handle | None = None
        #: inside a read callback (the connection sets it, and clears ``answered``, as a read starts)
        self.dispatching = False
        self.answered = False  # a handler published during the current read callback
        self._burst = False  # a write left at once this loop iteration: the others wait for the flush callback
        #: the transport asked us to stop writing (its buffer is over the high-water mark)
        self.paused = False
        self._writable: asyncio.Future[None] | None = None  # resolved at resume_writing (or at the end)
        #: the bound on the write backlog past which publish_nowait raises WriteBufferFullError
        self.write_bound = WRITE_BOUND
        #: stop reading while writing is paused: a responder (the emulator) then takes no new requests while its
        #: replies cannot leave, so its backlog stays bounded; a requester keeps reading (its responses)
        self.read_flow_control = False

    # -- batching ---------------------------------------------------------------------------------------------

    def send(self, packet: bytes) -> None:
        self.out.append(packet)
        self.out_bytes += len(packet)
        if self.dispatching:
            self.answered = True
            return
        if self._burst:
            return  # the callback below takes it, with the rest of this loop iteration's writes
        # The first write of a loop iteration outside a read callback leaves at once (a lone request's latency),
        # with the PUBACKs waiting for it; what the other tasks of the same iteration write leaves together in one
        # callback (a burst of requests: one send, not one each).
        self._burst = True
        self._write_out()
        if self._flush_handle is None:
            assert self.loop is not None
            self._flush_handle = self.loop.call_soon(self.flush)

    def queue(self, packet: bytes) -> None:
        """Add ``packet`` to the next write without starting one (a PUBACK inside a read, the DISCONNECT)."""
        self.out.append(packet)
        self.out_bytes += len(packet)

    def read(self) -> None:
        """A read callback ends: its output leaves now, or with the next loop iteration's requests."""
        self.dispatching = False
        if self.out:
            if self.answered:
                # a handler answered (the emulator's responses): out now, with the PUBACKs (flush(), inline)
                self._flush_handle = None
                self._burst = False
                out = self.out
                self.out = []
                self.out_bytes = 0
                transport = self.transport
                if transport is not None and not transport.is_closing():
                    transport.write(out[0] if len(out) == 1 else b"".join(out))
                    self._session.writes += 1
            elif self._flush_handle is None:
                # only PUBACKs (a requester): they leave with the requests the tasks just woken make in the
                # next loop iteration -- one send, not two, per round trip
                assert self.loop is not None
                self._flush_handle = self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_handle = None
        self._burst = False
        self._write_out()

    def _write_out(self) -> None:
        out = self.out
        if not out:
            return
        self.out = []
        self.out_bytes = 0
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(out[0] if len(out) == 1 else b"".join(out))
        self._session.writes += 1

    # -- flow control -----------------------------------------------------------------------------------------

    def backlog(self) -> int:
        """Bytes waiting to be written: the transport's buffer, our pending output, the held publishes."""
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return buffered + self.out_bytes + self._session.queued_bytes

    def check_room(self, size: int, topic: str) -> None:
        """:class:`WriteBufferFullError` if ``size`` more bytes would take the backlog past :attr:`write_bound`."""
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        if buffered + self.out_bytes + self._session.queued_bytes + size > self.write_bound:  # backlog(), inline
            raise WriteBufferFullError(
                f"cannot publish to {topic[:200]!r}: {self.backlog():,} bytes wait to be written to "
                f"{self._settings.url} (the bound is {self.write_bound:,}); the broker is not reading"
            )

    def pause(self) -> None:
        self.paused = True
        if self.read_flow_control and self.transport is not None:
            self.transport.pause_reading()

    def resume(self) -> None:
        self.paused = False
        self._wake_writers()
        if self.read_flow_control and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _wake_writers(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def wait_writable(self, timeout: float) -> None:
        """Wait for the transport to take writes again (resume_writing), within ``timeout``."""
        assert self.loop is not None
        try:
            async with asyncio.timeout(timeout):
                while self.paused:
                    if self._writable is None:
                        self._writable = self.loop.create_future()
                    await asyncio.shield(self._writable)
        except TimeoutError:
            raise RequestTimeoutError(
                f"publish timed out on {self._settings.url}: the broker did not take our writes (nothing was sent)"
            ) from None

    def lost(self) -> None:
        """The connection is gone: a publish waiting for room finds it gone; nothing more is written."""
        self.transport = None
        self.paused = False
        self._wake_writers()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None


class _Teardown:
    """How a :class:`StreamConnection` ends: closed on purpose (``close()``, a failed ``connect()``; whether the
    broker's session ends with it) or dropped, and why: what ``connection_lost`` makes of it."""

    __slots__ = ("closing", "ending", "fatal", "reason")

    def __init__(self) -> None:
        self.closing = False  # we close it: not a drop
        self.ending = False  # close() ends the session: nothing is kept for a next connection
        self.fatal: TransportError | None = None  # what the broker said that ends the client (0x8E)
        self.reason = ""  # why we dropped it (not MQTT, a malformed packet, no PINGRESP), or the broker's DISCONNECT

    def connack_error(self, exc: Exception | None) -> Exception:
        """What the CONNACK wait fails with when the connection ends first."""
        if exc is not None and not isinstance(exc, ConnectionError):
            return exc  # a TLS alert, ...: its own text
        # we dropped it (not MQTT, a malformed CONNACK), or the broker closed it
        return ConnectionResetError(self.reason or "the broker closed the connection before CONNACK")

    def error(self, url: str, exc: Exception | None) -> TransportError:
        """What the waits on the connection fail with."""
        reason = self.reason or (str(exc) if exc else "the broker closed the connection")
        return self.fatal or ConnectionLostError(f"connection to {url} lost: {reason}")


class StreamConnection(asyncio.Protocol):
    """One MQTT 5 connection (docs/design/transport.md). Not reusable: after it closes or drops, make a new one.

    ``on_message`` is called on the event loop thread for every inbound PUBLISH, inside the read callback; it
    must not block. Satisfies :class:`~sskv_mapping._transport.base.Connection`.
    """

    def __init__(self, settings: ConnectionSettings, on_message: Callable[[InboundMessage], None]) -> None:
        self.settings = settings
        self._on_message = on_message
        self._transport: asyncio.Transport | None = None
        self._session: MqttSession[_Token] = MqttSession(
            keepalive=settings.keepalive,
            receive_maximum=settings.receive_maximum,
            max_inbound_packet_size=settings.max_inbound_packet_size,
        )
        self._connack: asyncio.Future[packets.Connack] | None = None
        self._carried = False  # carry_over() took a previous connection's session: a reconnect (CleanStart=0)
        self.session_present = False  #: whether the broker resumed the session it kept (CONNACK)
        self.closed_by_broker = False  #: the broker closed the socket without a word (no DISCONNECT, no error)
        self._closed: asyncio.Future[None] | None = None  # created by connect(): the one call it takes
        self._teardown = _Teardown()  # closed on purpose or dropped, and why
        self._output = _Output(self._session, settings)  # batching and flow control of what we write
        self._keepalive_handle: asyncio.TimerHandle | None = None
        self._sat = SatSession(settings, self.reauthenticate)  # K8S-SAT re-authentication (AUTH), see sat.py
        self._quickack: Callable[[], None] | None = None

    # -- properties ---------------------------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    @property
    def connected(self) -> bool:
        transport = self._transport
        return (
            transport is not None
            and not transport.is_closing()
            and self._closed is not None
            and not self._closed.done()
        )

    @property
    def max_packet_size(self) -> int | None:
        """The broker's Maximum Packet Size from CONNACK (None: it stated none, or no CONNACK yet)."""
        return self._session.max_packet_size

    @property
    def write_bound(self) -> int:
        """The bound on the write backlog past which :meth:`publish_nowait` raises :class:`WriteBufferFullError`."""
        return self._output.write_bound

    @write_bound.setter
    def write_bound(self, value: int) -> None:
        self._output.write_bound = value

    @property
    def read_flow_control(self) -> bool:
        """Stop reading while writing is paused: a responder (the emulator) then takes no new requests while its
        replies cannot leave, so its backlog stays bounded; a requester keeps reading (its responses)."""
        return self._output.read_flow_control

    @read_flow_control.setter
    def read_flow_control(self, value: bool) -> None:
        self._output.read_flow_control = value

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<StreamConnection {self.settings.client_id!r} {self.settings.url} {state}>"

    # -- the MQTT session across connections: whether it outlives a drop, the next connection taking it over ----

    @property
    def keeps_session(self) -> bool:
        """Whether a publish in flight at a drop is sent again by the next connection (a session expiry)."""
        return self.settings.session_expiry > 0

    def carry_over(self, previous: Connection) -> None:
        """Before :meth:`connect`: follow ``previous`` (see :meth:`Connection.carry_over`)."""
        self._carried = True
        if isinstance(previous, StreamConnection):
            self._session.adopt(previous._session)  # noqa: SLF001 - the same class

    # -- connect ------------------------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect (TCP or TLS, CONNECT, CONNACK); raises :class:`BrokerConnectError`."""
        if self._closed is not None:
            raise ClientStateError("StreamConnection.connect() may be called once")
        s = self.settings
        loop = self._output.loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._connack = loop.create_future()
        ctx = ssl_context(s)
        token = read_sat_token(s)
        connect = self._session.connect_packet(
            s.client_id,
            username=s.username,
            password=s.password,
            auth_method="K8S-SAT" if token is not None else None,
            auth_data=token,
            clean_start=s.clean_start and not self._carried,
            session_expiry=s.session_expiry,
        )
        try:
            async with asyncio.timeout(s.connect_timeout):
                # the transport create_connection returns (not self._transport: the broker may already have closed
                # the connection, connection_lost then cleared it); a closed one is a connect failure, not a crash
                transport, _ = await loop.create_connection(
                    lambda: self, s.host, s.port, ssl=ctx, server_hostname=server_name(s)
                )
                if transport.is_closing():
                    raise ConnectionResetError("the connection closed before CONNECT could be sent")
                transport.write(connect)
                _log_connect(s, token is not None)
                connack = await asyncio.shield(self._connack)
                log.debug("%s: received CONNACK (%s)", s.client_id, packets.reason_name(connack.reason))
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            if isinstance(exc, TimeoutError) and not str(exc):
                what = "no CONNACK" if self._transport is not None else "no TCP connection"
                exc = TimeoutError(f"{what} within the connect timeout ({s.connect_timeout:g} s)")
            self._abort()
            raise BrokerConnectError(f"could not connect to {s.url}: {exc}") from exc
        except BaseException:
            self._abort()
            raise
        if connack.reason >= 0x80:
            self._abort()
            raise _refused(s, connack.reason, f"could not connect to {s.url}")
        session = self._session
        self.session_present = connack.session_present
        if self._carried:
            for packet in _resume(session, connack.session_present, s):
                self._output.send(packet)
        session.keepalive.start(loop.time(), session.reads, session.writes)
        if session.keepalive.tick_interval > 0:
            self._keepalive_handle = loop.call_later(session.keepalive.tick_interval, self._keepalive)
        self._sat.start(token, self._closed)

    def _abort(self) -> None:
        """connect() failed: close whatever is open; the failure is connect()'s to report, not wait_closed()'s."""
        self._teardown.closing = True
        if self._transport is not None:
            self._transport.abort()
        if self._closed is not None:
            _settle(self._closed)

    # -- asyncio.Protocol ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Any loop's stream transport: asyncio's, or uvloop's TCPTransport / SSL transport, which has the same
        # methods (write, set_write_buffer_limits, pause_reading...) without subclassing asyncio.Transport -- so no
        # isinstance check here, only the static type (create_connection hands a stream protocol a stream transport)
        transport = cast("asyncio.Transport", transport)
        self._transport = self._output.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        self._quickack = _tune_socket(transport.get_extra_info("socket"))

    def data_received(self, data: bytes) -> None:
        if self._quickack is not None:
            try:
                self._quickack()
            except OSError:  # the socket is going away: the read's packets still count
                self._quickack = None
        session = self._session
        # the peer's first bytes (the first read) must start a CONNACK or an AUTH
        if (
            self._connack is not None
            and not self._connack.done()
            and not session.reads
            and data[0] not in _FIRST_FROM_BROKER
        ):
            # a peer that is not an MQTT broker (HTTP, TLS on a plain port...): say so now, instead of waiting the
            # connect timeout for a packet whose "length" is the peer's text (connect() raises it; no warning logged)
            peer = f"{self.settings.host}:{self.settings.port}"
            self._teardown.reason = f"{peer} does not speak MQTT: its first bytes {data[:16]!r} are not a CONNACK"
            if self._transport is not None:
                self._transport.abort()
            return
        try:
            session.reads += 1  # session.feed(data), without its call
            received = session.splitter.feed(data)
        except MalformedPacketError as exc:
            self._protocol_error(str(exc))
            return
        output = self._output
        output.dispatching = True  # what the handlers publish leaves at the end (output.read())
        output.answered = False
        acked = False  # a PUBACK was read: the Receive Maximum may let queued publishes go (after the loop)
        try:
            on_message = self._on_message
            for first, body in received:
                kind = first >> 4
                if kind == 3:  # PUBLISH (_publish_received, inline: one per request served or response)
                    if first & 0x06 > 0x02:
                        raise MalformedPacketError("a QoS 2 PUBLISH (this client subscribes at QoS 1 at most)")
                    message, packet_id = decode_publish(first, body)
                    try:
                        on_message(message)
                    except Exception:
                        log.exception("message handler failed on topic %r", message.topic)
                    if first & 0x02:
                        output.out.append(
                            b"\x40\x02" + packet_id.to_bytes(2, "big")
                        )  # its PUBACK, with this read's output
                elif kind == 4:  # PUBACK
                    if len(body) == 2:  # the usual success form: session.puback's work, inline (one per reply)
                        entry = session.inflight.pop((body[0] << 8) | body[1], None)
                        token, reason = (None if entry is None else entry[0]), 0
                    else:
                        token, reason = session.puback(body)
                    # a reply's (_NOTHING_AWAITED): nobody to tell; a request's success: its response tells
                    if token is not None and token is not _NOTHING_AWAITED and (reason or token[1]):
                        _acknowledged(token, reason)
                    acked = True
                elif kind in (packets.SUBACK, packets.UNSUBACK):
                    token, codes = session.acknowledged_request(body)
                    if token is not None and token[0] is not None and not token[0].done():
                        token[0].set_result(codes)
                elif kind == packets.PINGRESP:
                    session.keepalive.pingresp()
                elif kind == packets.CONNACK:
                    if self._connack is None or self._connack.done():
                        raise MalformedPacketError("a second CONNACK")
                    self._connack.set_result(session.connack(body))
                elif kind == packets.DISCONNECT_TYPE:
                    reason, text = packets.decode_disconnect(body)
                    self._teardown.reason = f"the broker disconnected us: {text or packets.reason_name(reason)}"
                    if reason == packets.SESSION_TAKEN_OVER:
                        self._teardown.fatal = _refused(self.settings, reason, "the broker disconnected us")
                    if self._transport is not None:
                        self._transport.close()
                    return
                else:  # AUTH (a re-authentication's answer: sat.py), or a packet only a broker receives
                    self._sat.received(first, body)
            if acked and session.queued:
                # what the read's PUBACKs freed of the broker's Receive Maximum lets the queued publishes go, in
                # the order they were queued (session.publish queues behind them meanwhile): once per read, not
                # once per PUBACK
                size = session.release_into(output.out, _abandoned)
                if size:
                    output.out_bytes += size
                    output.answered = True
        except MalformedPacketError as exc:
            self._protocol_error(str(exc))
        finally:
            output.read()

    def _protocol_error(self, text: str, what: str = "malformed packet from the broker") -> None:
        log.warning("dropping the connection to %s: %s", self.settings.url, text)
        self._teardown.reason = f"{what}: {text}"
        if self._transport is not None:
            self._transport.abort()

    def pause_writing(self) -> None:
        self._output.pause()

    def resume_writing(self) -> None:
        self._output.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._output.lost()  # a publish waiting for room now finds the connection gone
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
        end = self._teardown
        self.closed_by_broker = exc is None and not end.reason and not end.closing
        if self._connack is not None and not self._connack.done():
            self._connack.set_exception(end.connack_error(exc))
            self._connack.exception()  # retrieved here: connect() may already have given up
        lost = end.error(self.settings.url, exc)
        _fail_waits(self._session, self.keeps_session and not end.ending and end.fatal is None, lost)
        if self._closed is not None and not self._closed.done():
            if end.closing:
                self._closed.set_result(None)
            else:
                self._closed.set_exception(lost)

    def _keepalive(self) -> None:
        """The session's keepalive tick (see :meth:`Keepalive.tick`): a PINGREQ, or the link declared dead --
        the calls in flight fail at once with :class:`ConnectionLostError` and the client reconnects."""
        loop = self._output.loop
        if loop is None or self._transport is None:
            return
        session = self._session
        keepalive = session.keepalive
        action = keepalive.tick(loop.time(), session.reads, session.writes)
        if action == KEEPALIVE_DEAD:
            reason = self._teardown.reason = (
                f"no PINGRESP within {keepalive.interval / 2:g} s (keepalive {keepalive.interval} s)"
            )
            log.warning("dropping the connection to %s: %s", self.settings.url, reason)
            self._transport.abort()
            return
        if action == KEEPALIVE_PING:
            self._output.send(packets.PINGREQ)
        self._keepalive_handle = loop.call_later(keepalive.tick_interval, self._keepalive)

    # -- publish ------------------------------------------------------------------------------------------------

    def _require(self) -> None:
        if self._transport is None or self._closed is None or self._closed.done() or self._transport.is_closing():
            raise ConnectionLostError(f"not connected to {self.settings.url}")

    def _publish(self, message: OutgoingMessage, waiter: asyncio.Future[Any] | None, waited: bool) -> None:
        transport, closed = self._transport, self._closed  # _require(), inline: once per request and per reply
        if transport is None or closed is None or closed.done() or transport.is_closing():
            raise ConnectionLostError(f"not connected to {self.settings.url}")
        qos = message.qos
        if qos not in (0, 1):
            raise ConfigurationError(f"QoS {qos} is not supported (0 or 1)")
        topic = message.topic
        field = _TOPIC_FIELDS.get(topic) or _topic_field(topic)
        props = publish_properties(  # as message.encoded_properties(), without its call: the request path
            message.correlation_data,
            message.response_topic,
            message.user_properties,
            message.content_type,
            message.message_expiry,
        )
        if not waited:
            self._output.check_room(len(message.payload), topic)
        # None: beyond the broker's Receive Maximum, it waits in the session for a PUBACK ([MQTT-3.3.4-7])
        token = (waiter, waited) if waiter is not None else _NOTHING_AWAITED if not waited else (None, True)
        packet = self._session.publish(field, message.payload, qos, props, token)
        if packet is not None:
            self._output.send(packet)

    async def publish(self, message: OutgoingMessage, *, timeout: float = 10.0) -> None:
        """Publish ``message`` and, at QoS 1, wait for PUBACK (:class:`ConnectionLostError` if the connection ends
        first, :class:`PublishRefusedError` if the broker refuses it). While the transport's buffer is over its
        high-water mark it first waits for room (:class:`RequestTimeoutError` after ``timeout``, nothing sent);
        over the broker's Maximum Packet Size, :class:`ValueTooLargeError` (nothing sent)."""
        if self._output.paused:
            await self._output.wait_writable(timeout)
        fut: asyncio.Future[None] | None = asyncio.get_running_loop().create_future() if message.qos else None
        self._publish(message, fut, True)
        if fut is None:
            return
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            raise RequestTimeoutError(f"publish timed out on {self.settings.url}") from None

    def publish_nowait(self, message: OutgoingMessage, *, refusal: asyncio.Future[Any] | None = None) -> None:
        """Queue ``message`` and return at once (see
        :meth:`~sskv_mapping._transport.base.Connection.publish_nowait`): a refusing PUBACK fails ``refusal`` with
        :class:`PublishRefusedError`, one that reached no subscriber (0x10) with :class:`ServiceUnavailableError`.
        Never waits: when the write backlog would pass :attr:`write_bound` (the broker stopped reading),
        :class:`WriteBufferFullError` and nothing is kept."""
        self._publish(message, refusal if message.qos else None, False)

    def publish_encoded_nowait(
        self, topic: str, payload: bytes, properties: bytes, refusal: asyncio.Future[Any] | None = None
    ) -> None:
        """``publish_nowait(OutgoingMessage(topic, payload, 1, ...), refusal=refusal)`` for a message whose
        properties are encoded already (Property Length first, as
        :func:`~sskv_mapping._protocol.mqtt_publish.publish_properties` gives): the emulator's replies and the
        client's requests, one each, without building a message to take apart again. The same checks and errors as
        :meth:`publish_nowait`; without ``refusal`` nobody is told of its PUBACK."""
        transport, closed = self._transport, self._closed
        if transport is None or closed is None or closed.done() or transport.is_closing():
            raise ConnectionLostError(f"not connected to {self.settings.url}")
        output = self._output
        session = self._session
        # output.check_room(), its test inline: it raises WriteBufferFullError past the bound
        if (
            transport.get_write_buffer_size() + output.out_bytes + session.queued_bytes + len(payload)
            > output.write_bound
        ):
            output.check_room(len(payload), topic)
        packet = session.publish(
            _TOPIC_FIELDS.get(topic) or _topic_field(topic),
            payload,
            1,
            properties,
            _NOTHING_AWAITED if refusal is None else (refusal, False),
        )
        if packet is not None:
            if output.dispatching:  # output.send's read-callback case, inline: the reply leaves at the read's end
                output.out.append(packet)
                output.out_bytes += len(packet)
                output.answered = True
            else:
                output.send(packet)

    async def reauthenticate(self, token: bytes, timeout: float) -> None:
        """AUTH 0x19 (K8S-SAT, ``token``), AUTH 0x00 back; else :class:`ReauthenticationError`, the link dropped."""
        await self._sat.exchange(token, timeout, self._output.send, self._protocol_error)

    # -- subscriptions ------------------------------------------------------------------------------------------

    async def _acked_request(self, build: Callable[[int], bytes], what: str, timeout: float) -> list[int]:
        self._require()
        waiter: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        packet_id = self._session.request_id((waiter, True))
        self._output.send(build(packet_id))
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            raise RequestTimeoutError(f"{what} timed out on {self.settings.url}") from None
        finally:
            self._session.forget_request(packet_id)

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

    async def close(self, *, end_session: bool = True) -> None:
        """Disconnect cleanly (DISCONNECT); safe to call twice and after a drop. ``end_session``: the broker
        frees the session now (Session Expiry 0 in the DISCONNECT) instead of keeping it for its expiry."""
        self._teardown.closing = True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self._teardown.ending = end_session
            self._output.queue(
                packets.DISCONNECT_END_SESSION if end_session and self.keeps_session else packets.DISCONNECT
            )
            self._output.flush()
            transport.close()
        if self._closed is not None:
            if not self._closed.done() and transport is not None:
                with contextlib.suppress(TimeoutError, ConnectionLostError):
                    async with asyncio.timeout(5):
                        await asyncio.shield(self._closed)
            _settle(self._closed)
