"""A TCP fault proxy for tests: Shopify toxiproxy's toxics and the Azure IoT Operations SDKs' ``fault:*`` faults.

:class:`FaultProxy` runs its own event loop in a thread, so any thread (a sync test, an async one) drives it.
Toxics, their attributes and the MQTT faults: docs/testing.md ("Faults") and docs/reference/testing.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import random
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Self, TypeVar

from .._protocol import mqtt_packets as packets
from .._protocol.mqtt_publish import MalformedPacketError, varint
from ..errors import ClientStateError, ConfigurationError

__all__ = ["FAULT_PROPERTIES", "TOXIC_TYPES", "FaultProxy", "ProxyStats", "Toxic"]

T = TypeVar("T")

UPSTREAM, DOWNSTREAM = "upstream", "downstream"
_STREAMS = (UPSTREAM, DOWNSTREAM)

#: each toxic type with its attributes and their defaults (toxiproxy's names and units: ms, KB/s, bytes, µs);
#: ``None``: the attribute must be given. ``jitter`` of ``reset_peer`` is ours: each connection lives
#: ``timeout`` ± ``jitter`` ms (a flapping link).
TOXIC_TYPES: Mapping[str, Mapping[str, float | None]] = MappingProxyType(
    {
        "latency": MappingProxyType({"latency": 0, "jitter": 0}),
        "bandwidth": MappingProxyType({"rate": None}),
        "slicer": MappingProxyType({"average_size": 5, "size_variation": 0, "delay": 0}),
        "timeout": MappingProxyType({"timeout": 0}),
        "reset_peer": MappingProxyType({"timeout": 0, "jitter": 0}),
        "slow_close": MappingProxyType({"delay": 0}),
        "limit_data": MappingProxyType({"bytes": None}),
    }
)

#: the user properties the Azure IoT Operations SDKs' faultable broker acts on (docs/testing.md)
FAULT_PROPERTIES = (
    "fault:disconnect",
    "fault:delay",
    "fault:rejectconnect",
    "fault:rejectpublish",
    "fault:rejectsubscribe",
    "fault:rejectunsubscribe",
    "fault:requestid",
)
_KINDS = {"connect": packets.CONNECT, "publish": packets.PUBLISH, "subscribe": packets.SUBSCRIBE}
_KINDS["unsubscribe"] = packets.UNSUBSCRIBE
_REJECT = {
    packets.CONNECT: "fault:rejectconnect",
    packets.PUBLISH: "fault:rejectpublish",
    packets.SUBSCRIBE: "fault:rejectsubscribe",
    packets.UNSUBSCRIBE: "fault:rejectunsubscribe",
}
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: closing sends RST
_CHANNEL_LIMIT = 256  # chunks a direction buffers before its reader stops reading (TCP back-pressure then)
_QUIET_CLOSE_S = 1.0  # a clean cut: the FIN first, the socket closed this much later (no RST for late bytes)


@dataclass(frozen=True)
class Toxic:
    """One toxic on the proxy: its ``name`` (``"<type>_<stream>"`` unless given), ``type``, ``stream``
    (``"upstream"``: client to server, ``"downstream"``: server to client), ``toxicity`` (the chance each
    connection is affected, 0-1) and ``attributes`` (see :data:`TOXIC_TYPES`)."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: Mapping[str, float]
    #: the order it was added in, and when (the proxy loop's clock): a ``reset_peer``/``timeout`` timer starts then
    serial: int = field(default=0, repr=False, compare=False)
    added: float = field(default=0.0, repr=False, compare=False)


@dataclass
class _Rule:
    """A fault armed from the test (as if the next matching packet carried the ``fault:*`` properties)."""

    kind: int
    reject: int | None
    disconnect: int | None
    delay: float
    topic: str | None


@dataclass
class _Armed:
    rules: list[_Rule] = field(default_factory=list)
    request_ids: set[str] = field(default_factory=set)  # fault:requestid values seen: each fault acts once


@dataclass
class _Runtime:
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None
    server: asyncio.Server | None = None
    background: set[asyncio.Task[None]] = field(default_factory=set)


@dataclass
class ProxyStats:
    """What a :class:`FaultProxy` did: connections relayed, reset at once (refused: disabled or just cut), cut
    (:meth:`FaultProxy.cut` calls and ``reset_peer`` resets), ``fault:*`` faults carried out, bytes read from
    clients (upstream) and from the server (downstream)."""

    connections: int = 0
    refused: int = 0
    cuts: int = 0
    faults: int = 0
    upstream_bytes: int = 0
    downstream_bytes: int = 0


class _Channel:
    """Chunks of one direction between its reader and its writer: ``(arrival time, bytes)``, ``None`` for the
    end of the stream, ``b""`` for "close after what came before" (an injected DISCONNECT)."""

    def __init__(self) -> None:
        self.items: deque[tuple[float, bytes] | None] = deque()
        self.ready = asyncio.Event()
        self.space = asyncio.Event()
        self.space.set()

    def put(self, item: tuple[float, bytes] | None) -> None:
        self.items.append(item)
        self.ready.set()
        if len(self.items) >= _CHANNEL_LIMIT:
            self.space.clear()

    async def get(self) -> tuple[float, bytes] | None:
        while not self.items:
            self.ready.clear()
            await self.ready.wait()
        item = self.items.popleft()
        if len(self.items) < _CHANNEL_LIMIT:
            self.space.set()
        return item


def _set_reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)


class _Link:
    """One relayed connection: the client's side and the server's side, and what the toxics decided for it."""

    def __init__(
        self,
        on_close: Callable[[_Link], None],
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.on_close = on_close
        self.readers = {UPSTREAM: client[0], DOWNSTREAM: server[0]}
        self.writers = {UPSTREAM: server[1], DOWNSTREAM: client[1]}  # where each direction's bytes go
        self.channels = {UPSTREAM: _Channel(), DOWNSTREAM: _Channel()}
        self.sent = {UPSTREAM: 0, DOWNSTREAM: 0}
        self.started = asyncio.get_running_loop().time()
        self.applies: dict[int, bool] = {}  # toxic serial -> whether this connection drew it (toxicity)
        self.lifetimes: dict[int, float] = {}  # reset_peer serial -> this connection's drawn lifetime (s)
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    def close(self, *, reset: bool, quiet: bool = False) -> None:
        """End both sides: with RST (``reset``) or a FIN after what was written; cancel the link's tasks.
        ``quiet``: the FIN now and the socket closed a second later, so that bytes the peer still sends meanwhile
        do not turn the FIN into a RST (a clean close, as a broker closing a taken-over connection makes)."""
        if self.closed:
            return
        self.closed = True
        self.on_close(self)
        for writer in self.writers.values():
            if reset:
                _set_reset(writer)
                writer.transport.abort()
            elif quiet:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.write_eof()
                asyncio.get_running_loop().call_later(_QUIET_CLOSE_S, writer.close)
            else:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.close()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()


class FaultProxy:
    """A TCP proxy from ``127.0.0.1:<port>`` (a free port unless given) to ``target``, with toxics and faults.

    Toxics (toxiproxy's, same names, attributes and units): :meth:`add_toxic`, :meth:`update_toxic`,
    :meth:`remove_toxic`, :meth:`reset`; :meth:`disable`/:meth:`enable` the proxy; :meth:`cut` resets every
    connection now. With ``mqtt=True`` the proxy reads the MQTT packets crossing it and honours the SDK faultable
    broker's ``fault:*`` user properties, and the same faults armed from the test: :meth:`reject_next`,
    :meth:`disconnect_next`. What it did: :attr:`stats` (:class:`ProxyStats`) and :attr:`open_links`.

    Example::

        with FaultProxy(("127.0.0.1", broker_port), mqtt=True) as proxy:
            client = StateStoreClient.from_url(proxy.url)
            proxy.add_toxic("latency", latency=50, jitter=40)
            proxy.reject_next("publish", 0x87)
    """

    def __init__(self, target: tuple[str, int], *, port: int = 0, mqtt: bool = False, seed: int | None = None) -> None:
        self.target = (target[0], int(target[1]))
        self.host = "127.0.0.1"
        self.port = port
        self.mqtt = mqtt
        self._random = random.Random(seed)
        self._toxics: dict[str, Toxic] = {}
        self._serials = itertools.count(1)
        self._armed = _Armed()
        self._links: set[_Link] = set()
        self._enabled = True
        self._refuse_until = 0.0
        self._rt = _Runtime()
        self._changed: asyncio.Event | None = None
        #: what the proxy did so far
        self.stats = ProxyStats()

    # -- life -----------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:<port>``: what a client connects to."""
        return f"mqtt://{self.host}:{self.port}"

    @property
    def open_links(self) -> int:
        """Connections relayed now."""
        return len(self._links)

    @property
    def enabled(self) -> bool:
        return self._enabled

    def __repr__(self) -> str:
        return f"<FaultProxy {self.host}:{self.port} -> {self.target[0]}:{self.target[1]} toxics={list(self._toxics)}>"

    def start(self) -> Self:
        """Bind the port and start relaying (in a thread of its own); returns the proxy."""
        if self._rt.thread is not None:
            raise ClientStateError("the fault proxy is already started")
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._rt.thread = threading.Thread(target=self._run, args=(ready,), name="sskv-fault-proxy", daemon=True)
        self._rt.thread.start()
        try:
            ready.result(30)
        except BaseException:
            self._rt.thread.join(5)
            self._rt.thread = None
            raise
        return self

    def stop(self) -> None:
        """Close every connection and the port, and end the thread. Idempotent."""
        loop, thread = self._rt.loop, self._rt.thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
        thread.join(30)
        self._rt.thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._rt.loop = loop
        self._changed = asyncio.Event()
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:
            ready.set_exception(exc)
            loop.close()
            self._rt.loop = None
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.close()
            self._rt.loop = None

    async def _listen(self) -> None:
        self._rt.server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._rt.server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._rt.server is not None:
            self._rt.server.close()
            self._rt.server = None
        links = list(self._links)
        tasks = [t for link in links for t in link.tasks] + list(self._rt.background)
        for link in links:
            link.close(reset=True)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert self._rt.loop is not None
        self._rt.loop.call_soon(self._rt.loop.stop)

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the proxy's loop (at once when already on it) and return its result."""
        loop = self._rt.loop
        if loop is None:
            raise ClientStateError("the fault proxy is not started: call start() or use it as a context manager")
        if self._rt.thread is not None and threading.get_ident() == self._rt.thread.ident:
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result(30)

    def _notify(self) -> None:
        """Wake whatever waits on the toxics (stalls, connection timers)."""
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    # -- control: toxics ------------------------------------------------------------------------------------------

    def add_toxic(
        self,
        type: str,
        *,
        name: str | None = None,
        stream: str = DOWNSTREAM,
        toxicity: float = 1.0,
        **attributes: float,
    ) -> Toxic:
        """Add a toxic of ``type`` (:data:`TOXIC_TYPES`) on ``stream``: it acts on the connections open now and
        on new ones until removed. Unknown types or attributes, or values out of range: ``ConfigurationError``."""
        toxic = self._checked(type, name or f"{type}_{stream}", stream, toxicity, attributes, None)

        def add() -> Toxic:
            if toxic.name in self._toxics:
                raise ConfigurationError(f"a toxic named {toxic.name!r} is already on the proxy")
            assert self._rt.loop is not None
            added = Toxic(
                toxic.name, type, stream, toxicity, toxic.attributes, next(self._serials), self._rt.loop.time()
            )
            self._toxics[toxic.name] = added
            self._notify()
            return added

        return self._call(add)

    def update_toxic(self, name: str, *, toxicity: float | None = None, **attributes: float) -> Toxic:
        """Change some attributes (or the toxicity) of toxic ``name``; the others keep their values."""

        def update() -> Toxic:
            old = self._toxics.get(name)
            if old is None:
                raise ConfigurationError(f"no toxic named {name!r} on the proxy")
            new = self._checked(
                old.type, name, old.stream, old.toxicity if toxicity is None else toxicity, attributes, old.attributes
            )
            self._toxics[name] = Toxic(name, old.type, old.stream, new.toxicity, new.attributes, old.serial, old.added)
            self._notify()
            return self._toxics[name]

        return self._call(update)

    def remove_toxic(self, name: str) -> None:
        """Remove toxic ``name``: what it held back flows again (a ``timeout`` releases its stall)."""

        def remove() -> None:
            if self._toxics.pop(name, None) is None:
                raise ConfigurationError(f"no toxic named {name!r} on the proxy")
            self._notify()

        self._call(remove)

    @property
    def toxics(self) -> list[Toxic]:
        """The toxics on the proxy, in the order they were added."""
        return self._call(lambda: list(self._toxics.values()))

    def reset(self) -> None:
        """Remove every toxic and armed fault and enable the proxy (toxiproxy's ``/reset``)."""

        def clear() -> None:
            self._toxics.clear()
            self._armed.rules.clear()
            self._notify()

        self._call(clear)
        self.enable()

    @staticmethod
    def _checked(
        type: str,
        name: str,
        stream: str,
        toxicity: float,
        attributes: Mapping[str, float],
        base: Mapping[str, float] | None,
    ) -> Toxic:
        known = TOXIC_TYPES.get(type)
        if known is None:
            raise ConfigurationError(f"unknown toxic type {type!r}: one of {', '.join(TOXIC_TYPES)}")
        if stream not in _STREAMS:
            raise ConfigurationError(f"stream must be 'upstream' or 'downstream', not {stream!r}")
        if not 0.0 <= toxicity <= 1.0:
            raise ConfigurationError(f"toxicity is a probability (0-1), not {toxicity!r}")
        unknown = set(attributes) - set(known)
        if unknown:
            raise ConfigurationError(
                f"toxic {type!r} has no attribute {sorted(unknown)[0]!r}: it has {', '.join(known)}"
            )
        values: dict[str, float] = dict(base) if base is not None else {}
        for key, default in known.items():
            value = attributes.get(key, values.get(key, default))
            if value is None:
                raise ConfigurationError(f"toxic {type!r} needs its {key!r} attribute")
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ConfigurationError(f"attribute {key!r} of toxic {type!r} must be a number >= 0, not {value!r}")
            values[key] = value
        if type in ("bandwidth", "limit_data") and values["rate" if type == "bandwidth" else "bytes"] <= 0:
            raise ConfigurationError(f"toxic {type!r} needs a positive {'rate' if type == 'bandwidth' else 'bytes'}")
        if type == "slicer" and not values["size_variation"] < max(values["average_size"], 1):
            raise ConfigurationError("slicer: size_variation must be smaller than average_size")
        return Toxic(name, type, stream, toxicity, MappingProxyType(values))

    # -- control: the proxy ---------------------------------------------------------------------------------------

    def disable(self) -> None:
        """Reset every connection and refuse new ones (each is accepted and reset at once) until :meth:`enable`."""

        def off() -> None:
            self._enabled = False
            self._cut_all()

        self._call(off)

    def enable(self) -> None:
        self._call(lambda: setattr(self, "_enabled", True))

    def cut(self, refuse_for: float = 0.2, *, reset: bool = True) -> int:
        """Reset every connection now, both ways (RST, no MQTT DISCONNECT), and refuse new connections for
        ``refuse_for`` seconds: a network blip. Returns how many connections were cut. ``reset=False``: a clean
        close (FIN) both ways instead, without a word of MQTT -- a proxy that closes connections, or what a broker
        that takes a session over without 0x8E does to the older connection."""
        if not refuse_for >= 0:
            raise ConfigurationError(f"refuse_for must be >= 0 seconds, not {refuse_for!r}")

        def now() -> int:
            assert self._rt.loop is not None
            self.stats.cuts += 1
            self._refuse_until = self._rt.loop.time() + refuse_for
            return self._cut_all(reset)

        return self._call(now)

    def _cut_all(self, reset: bool = True) -> int:
        links = list(self._links)
        for link in links:
            link.close(reset=reset, quiet=not reset)
        return len(links)

    # -- control: the SDK faultable broker's faults -----------------------------------------------------------------

    def reject_next(self, packet: str, reason_code: int, *, topic: str | None = None) -> None:
        """The next ``packet`` (``"connect"``, ``"publish"``, ``"subscribe"`` or ``"unsubscribe"``; a publish
        to ``topic`` when given) a client sends is answered by the proxy with ``reason_code`` in its CONNACK,
        PUBACK, SUBACK or UNSUBACK and not passed on: ``fault:rejectconnect`` ... ``fault:rejectunsubscribe``."""
        kind = self._kind(packet, reason_code)
        self._arm(_Rule(kind, reason_code, None, 0.0, topic))

    def disconnect_next(
        self, packet: str, reason_code: int = 0x80, *, delay: float = 0.0, topic: str | None = None
    ) -> None:
        """On the next ``packet`` (``"publish"``, ``"subscribe"`` or ``"unsubscribe"``) the proxy sends the client
        a DISCONNECT with ``reason_code`` and closes the connection: at once, the packet not passed on, or
        ``delay`` seconds later, the packet passed on (``fault:disconnect`` with ``fault:delay``)."""
        kind = self._kind(packet, reason_code)
        if kind == packets.CONNECT:
            raise ConfigurationError("a connect is refused with reject_next('connect', code), not disconnected")
        if not delay >= 0:
            raise ConfigurationError(f"delay must be >= 0 seconds, not {delay!r}")
        self._arm(_Rule(kind, None, reason_code, float(delay), topic))

    def _kind(self, packet: str, reason_code: int) -> int:
        if not self.mqtt:
            raise ConfigurationError("MQTT faults need the proxy made with mqtt=True")
        kind = _KINDS.get(packet)
        if kind is None:
            raise ConfigurationError(f"packet must be one of {', '.join(_KINDS)}, not {packet!r}")
        if isinstance(reason_code, bool) or not isinstance(reason_code, int) or not 0 <= reason_code <= 0xFF:
            raise ConfigurationError(f"a reason code is 0-255, not {reason_code!r}")
        return kind

    def _arm(self, rule: _Rule) -> None:
        self._call(lambda: self._armed.rules.append(rule))

    # -- relaying -------------------------------------------------------------------------------------------------

    def _of(self, link: _Link, stream: str | None) -> list[Toxic]:
        """The toxics acting on ``link``'s ``stream`` (both with ``None``): each drew its toxicity once per link."""
        found = []
        for toxic in self._toxics.values():
            if stream is not None and toxic.stream != stream:
                continue
            drawn = link.applies.get(toxic.serial)
            if drawn is None:
                drawn = link.applies[toxic.serial] = self._random.random() < toxic.toxicity
            if drawn:
                found.append(toxic)
        return found

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        if not self._enabled or loop.time() < self._refuse_until:
            self.stats.refused += 1
            _set_reset(writer)
            writer.transport.abort()
            return
        try:
            server = await asyncio.open_connection(*self.target)
        except OSError:
            _set_reset(writer)
            writer.transport.abort()
            return
        for w in (writer, server[1]):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats.connections += 1
        link = _Link(self._links.discard, (reader, writer), server)
        self._links.add(link)
        for coro in (
            self._read(link, UPSTREAM),
            self._read(link, DOWNSTREAM),
            self._write(link, UPSTREAM),
            self._write(link, DOWNSTREAM),
            self._watch(link),
        ):
            task = loop.create_task(coro)
            link.tasks.add(task)
            task.add_done_callback(link.tasks.discard)

    async def _read(self, link: _Link, stream: str) -> None:
        reader, channel = link.readers[stream], link.channels[stream]
        loop = asyncio.get_running_loop()
        splitter = packets.PacketSplitter() if self.mqtt else None
        try:
            while True:
                await channel.space.wait()
                data = await reader.read(65536)
                if not data:
                    break
                if stream == UPSTREAM:
                    self.stats.upstream_bytes += len(data)
                else:
                    self.stats.downstream_bytes += len(data)
                if splitter is not None:
                    try:
                        whole = splitter.feed(data)
                    except MalformedPacketError:
                        splitter = None  # not MQTT as we read it: relay the rest as bytes
                        channel.put((loop.time(), data))
                        continue
                    if whole:
                        self._packets(link, stream, whole, loop.time())
                    continue
                channel.put((loop.time(), data))
        except (OSError, asyncio.IncompleteReadError):
            link.close(reset=True)  # a reset on one side is a reset on the other
            return
        channel.put(None)

    def _packets(self, link: _Link, stream: str, whole: list[tuple[int, bytes]], now: float) -> None:
        """Whole MQTT packets read on ``stream``: relayed (as one chunk) unless a ``fault:*`` fault takes one."""
        channel = link.channels[stream]
        out: list[bytes] = []
        for first, body in whole:
            if stream == UPSTREAM and (self._armed.rules or b"fault:" in body) and first >> 4 in _REJECT:
                taken = self._fault(link, first, body, now, out)
                if taken:
                    continue
            out.append(bytes((first,)) + varint(len(body)) + body)
        if out:
            channel.put((now, b"".join(out)))

    def _fault(self, link: _Link, first: int, body: bytes, now: float, out: list[bytes]) -> bool:
        """Carry out the fault a client's packet asks for (or an armed rule); True when the packet is taken."""
        try:
            request = packets.decode_client_request(first, body)
        except MalformedPacketError:
            return False
        if request is None:
            return False
        disconnect = reject = None
        delay = 0.0
        rule = next(
            (r for r in self._armed.rules if r.kind == request.kind and (r.topic is None or r.topic in request.topics)),
            None,
        )
        if rule is not None:
            self._armed.rules.remove(rule)
            disconnect, reject, delay = rule.disconnect, rule.reject, rule.delay
        else:
            request_id = request.user_property("fault:requestid")
            if request_id is not None:
                if request_id in self._armed.request_ids:
                    return False
                self._armed.request_ids.add(request_id)
            disconnect = _int(request.user_property("fault:disconnect"))
            if request.kind == packets.CONNECT:
                disconnect = None
            reject = _int(request.user_property(_REJECT[request.kind]))
            delay = float(_int(request.user_property("fault:delay")) or 0)
        if disconnect is not None:
            self.stats.faults += 1
            if delay > 0:
                task = asyncio.get_running_loop().create_task(self._disconnect_later(link, disconnect, delay))
                self._rt.background.add(task)
                task.add_done_callback(self._rt.background.discard)
                return False
            self._flush(link, out, now)
            downstream = link.channels[DOWNSTREAM]
            downstream.put((now, packets.disconnect_packet(disconnect)))
            downstream.put((now, b""))
            return True
        if reject is None:
            return False
        self.stats.faults += 1
        self._flush(link, out, now)
        downstream = link.channels[DOWNSTREAM]
        if request.kind == packets.CONNECT:
            downstream.put((now, packets.connack_packet(reject)))
            downstream.put((now, b""))
        elif request.kind != packets.PUBLISH or request.qos:
            codes = [reject] * (1 if request.kind == packets.PUBLISH else len(request.topics))
            downstream.put((now, packets.ack_packet(request.kind, request.packet_id, codes)))
        return True

    @staticmethod
    def _flush(link: _Link, out: list[bytes], now: float) -> None:
        """What came before a taken packet goes on first (the order the client sent)."""
        if out:
            link.channels[UPSTREAM].put((now, b"".join(out)))
            out.clear()

    async def _disconnect_later(self, link: _Link, reason: int, delay: float) -> None:
        await asyncio.sleep(delay)
        if not link.closed:
            now = asyncio.get_running_loop().time()
            link.channels[DOWNSTREAM].put((now, packets.disconnect_packet(reason)))
            link.channels[DOWNSTREAM].put((now, b""))

    async def _write(self, link: _Link, stream: str) -> None:
        channel, writer = link.channels[stream], link.writers[stream]
        loop = asyncio.get_running_loop()
        paced = 0.0  # bandwidth: when the bytes written so far are paid for
        try:
            while True:
                item = await channel.get()
                if item is None:  # the sender closed: close the other side too, late with slow_close
                    delays = [t.attributes["delay"] for t in self._of(link, stream) if t.type == "slow_close"]
                    if delays:
                        await asyncio.sleep(max(delays) / 1000)
                    link.close(reset=False)
                    return
                arrived, data = item
                if not data:  # after an injected DISCONNECT or CONNACK refusal
                    with contextlib.suppress(OSError, RuntimeError):
                        await writer.drain()
                    link.close(reset=False)
                    return
                await self._hold(link, stream, arrived)
                for piece, pause in self._pieces(link, stream, data):
                    limit = next((t for t in self._of(link, stream) if t.type == "limit_data"), None)
                    if limit is not None:
                        left = int(limit.attributes["bytes"]) - link.sent[stream]
                        if len(piece) >= left:
                            writer.write(piece[: max(left, 0)])
                            await writer.drain()
                            link.close(reset=False)
                            return
                    rates = [t.attributes["rate"] for t in self._of(link, stream) if t.type == "bandwidth"]
                    if not rates:
                        writer.write(piece)
                        await writer.drain()
                    else:  # in steps of 100 ms worth of bytes, each written once the ones before are paid for
                        rate = min(rates) * 1000  # bytes/s
                        step = max(1, int(rate / 10))
                        for pos in range(0, len(piece), step):
                            now = loop.time()
                            if paced > now:
                                await asyncio.sleep(paced - now)
                            part = piece[pos : pos + step]
                            writer.write(part)
                            await writer.drain()
                            paced = max(paced, now) + len(part) / rate
                    link.sent[stream] += len(piece)
                    if pause:
                        await asyncio.sleep(pause)
        except (OSError, RuntimeError):
            link.close(reset=True)

    async def _hold(self, link: _Link, stream: str, arrived: float) -> None:
        """Latency (from the chunk's arrival, order kept) and a ``timeout`` toxic's stall (until removed)."""
        loop = asyncio.get_running_loop()
        while True:
            toxics = self._of(link, stream)
            if any(t.type == "timeout" for t in toxics):
                assert self._changed is not None
                await self._changed.wait()
                continue
            delay = 0.0
            for toxic in toxics:
                if toxic.type == "latency":
                    spread = toxic.attributes["jitter"]
                    delay += max(0.0, toxic.attributes["latency"] + self._random.uniform(-spread, spread)) / 1000
            wait = arrived + delay - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            return

    def _pieces(self, link: _Link, stream: str, data: bytes) -> list[tuple[bytes, float]]:
        slicer = next((t for t in self._of(link, stream) if t.type == "slicer"), None)
        if slicer is None:
            return [(data, 0.0)]
        size, spread = slicer.attributes["average_size"], slicer.attributes["size_variation"]
        pause = slicer.attributes["delay"] / 1_000_000
        out = []
        pos = 0
        while pos < len(data):
            step = max(1, round(size + self._random.uniform(-spread, spread)))
            out.append((data[pos : pos + step], pause))
            pos += step
        return out

    async def _watch(self, link: _Link) -> None:
        """The connection's timers: ``reset_peer`` (RST after its timeout) and ``timeout`` > 0 (closed after)."""
        loop = asyncio.get_running_loop()
        while not link.closed:
            changed = self._changed
            assert changed is not None
            due: tuple[float, bool] | None = None
            for toxic in self._of(link, None):
                if toxic.type == "reset_peer":
                    life = link.lifetimes.get(toxic.serial)
                    if life is None:
                        spread = toxic.attributes["jitter"]
                        life = max(0.0, toxic.attributes["timeout"] + self._random.uniform(-spread, spread)) / 1000
                        link.lifetimes[toxic.serial] = life
                    at, reset = max(link.started, toxic.added) + life, True
                elif toxic.type == "timeout" and toxic.attributes["timeout"] > 0:
                    at, reset = max(link.started, toxic.added) + toxic.attributes["timeout"] / 1000, False
                else:
                    continue
                if due is None or at < due[0]:
                    due = (at, reset)
            if due is not None and due[0] <= loop.time():
                if due[1]:
                    self.stats.cuts += 1
                link.close(reset=due[1])
                return
            timeout = None if due is None else due[0] - loop.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
