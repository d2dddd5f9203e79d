"""A K8S-SAT broker front for the re-authentication tests: a TCP server on 127.0.0.1 that speaks K8S-SAT as the
Azure IoT Operations broker does and relays everything else to a real (private) mosquitto.

mosquitto without a plugin refuses every enhanced-authentication method and knows no AUTH packet. The front:

* reads the client's CONNECT, takes its Authentication Method (must be ``K8S-SAT``) and Data (the token; a JWT's
  ``exp`` is read without a signature check, a token that is not a JWT never expires here), refuses an expired
  token with CONNACK 0x87, and forwards the CONNECT to mosquitto without the authentication properties;
* relays packets both ways, whole (its own AUTH answers are written between packets, never inside one);
* answers the client's AUTH 0x19 itself (mosquitto never sees it): AUTH 0x00 with the method when the new token
  has not expired, else DISCONNECT 0x87; or, with ``refuse``, AUTH 0x87 (``"auth"``), DISCONNECT 0x87 and a
  close (``"disconnect"``, what MQTT 5 prescribes), or nothing at all (``"silence"``);
* closes both sockets, silently (no DISCONNECT), at the presented token's ``exp`` unless an AUTH with a newer
  token arrived: what the AIO broker does.

It counts what a test asserts: connections accepted, the token of each CONNECT and AUTH, links closed at a
token's expiry, and token expiries a link outlived (``survived``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable

from ._fake_mqtt import AUTHENTICATION_DATA, AUTHENTICATION_METHOD, _packet, _Reader, _varint

__all__ = ["SatFront", "make_jwt"]


def make_jwt(lifetime: float, *, issued: float | None = None, subject: str = "system:serviceaccount:t:sskv") -> str:
    """An unsigned JWT (``alg: none``) issued now (or at ``issued``) and expiring ``lifetime`` s later."""

    def segment(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = time.time() if issued is None else issued
    claims = {"sub": subject, "aud": ["aio-internal"], "iat": now, "exp": now + lifetime}
    return f"{segment({'alg': 'none', 'typ': 'JWT'})}.{segment(claims)}."


def token_expiry(token: bytes) -> float | None:
    """``exp`` of a JWT (no signature check), ``None`` for anything else: an independent reading, not the
    library's."""
    try:
        _header, payload, _signature = token.split(b".")
        claims = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (ValueError, KeyError, TypeError):
        return None


async def _read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first = (await reader.readexactly(1))[0]
    length = shift = 0
    while True:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first, await reader.readexactly(length)


def _wire(first: int, body: bytes) -> bytes:
    return bytes((first,)) + _varint(len(body)) + body


def _auth(reason: int, method: str | None = None) -> bytes:
    props = b""
    if method is not None:
        raw = method.encode()
        props = bytes((AUTHENTICATION_METHOD,)) + len(raw).to_bytes(2, "big") + raw
    return _packet(0xF0, bytes((reason,)) + _varint(len(props)) + props)


_DISCONNECT_NOT_AUTHORIZED = b"\xe0\x02\x87\x00"


class _Link:
    """One client connection through the front."""

    def __init__(self, front: SatFront, client: asyncio.StreamWriter) -> None:
        self.front = front
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.expires: float | None = None
        self.open = True
        self.timer: asyncio.TimerHandle | None = None

    def present(self, token: bytes) -> None:
        """``token`` is now the one this link is authenticated with: its expiry closes the link."""
        loop = asyncio.get_running_loop()
        previous = self.expires
        self.expires = token_expiry(token)
        if previous is not None:
            # the link outlives the previous token's expiry if it is still open then
            loop.call_at(loop.time() + max(0.0, previous - time.time()), self._outlived)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.expires is not None:
            self.timer = loop.call_at(loop.time() + max(0.0, self.expires - time.time()), self._expired)

    def _outlived(self) -> None:
        if self.open:
            self.front.survived += 1
            self.front.changed()

    def _expired(self) -> None:
        self.front.closed_at_expiry += 1
        self.close()

    def close(self, *, flush: bool = False) -> None:
        """Close both sides at once (``flush``: let what was written to the client leave first)."""
        if self.open:
            self.open = False
            if self.timer is not None:
                self.timer.cancel()
            if flush:
                self.client.transport.close()
            else:
                self.client.transport.abort()
            if self.upstream is not None:
                self.upstream.transport.abort()
            self.front.changed()


class SatFront:
    """``async with SatFront(mosquitto_port) as front: ... front.port ...``."""

    def __init__(self, upstream_port: int, *, refuse: str | None = None, upstream_host: str = "127.0.0.1") -> None:
        assert refuse in (None, "auth", "disconnect", "silence")
        self.upstream = (upstream_host, upstream_port)
        self.refuse = refuse
        self.port = 0
        self.accepted = 0  #: TCP connections accepted
        self.connects: list[bytes | None] = []  #: the token of every CONNECT
        self.auths: list[bytes] = []  #: the token of every AUTH 0x19 received
        self.auths_accepted = 0
        self.closed_at_expiry = 0  #: links closed because their token expired
        self.survived = 0  #: token expiries a link was still open for (it re-authenticated in time)
        self.links: list[_Link] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()

    async def __aenter__(self) -> SatFront:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for link in self.links:
            link.close()  # every relay's read fails: its task ends by itself
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        await self._server.wait_closed()

    def changed(self) -> None:
        self._changed.set()

    async def wait_until(self, condition: Callable[[], bool], timeout: float) -> None:
        """Wait (at most ``timeout`` s) until ``condition()`` holds; it is checked whenever the front counts."""
        async with asyncio.timeout(timeout):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    @property
    def open_links(self) -> int:
        return sum(link.open for link in self.links)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        link = _Link(self, writer)
        self.links.append(link)
        try:
            await self._relay(link, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            link.close()
            self._tasks.discard(task)

    async def _relay(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first, body = await _read_packet(reader)
        if first >> 4 != 1:
            return
        r = _Reader(body)
        head = body[: len(b"\x00\x04MQTT") + 4]  # protocol name, version, flags, keepalive
        r.pos = len(head)
        props = r.properties()
        payload = body[r.pos :]
        method, token = props.get(AUTHENTICATION_METHOD), props.get(AUTHENTICATION_DATA)
        self.connects.append(token if isinstance(token, bytes) else None)
        self.changed()
        expires = token_expiry(token) if isinstance(token, bytes) else None
        if method != "K8S-SAT" or not isinstance(token, bytes) or (expires is not None and expires <= time.time()):
            writer.write(_packet(0x20, b"\x00\x87\x00"))  # CONNACK: not authorized
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        link.upstream = up_writer
        up_writer.write(_wire(first, head + b"\x00" + payload))  # the CONNECT without authentication properties
        link.present(token)
        downstream = asyncio.ensure_future(self._pump_down(up_reader, writer))
        try:
            while link.open:
                first, body = await _read_packet(reader)
                if first >> 4 == 15:
                    self._on_auth(link, body)
                else:
                    up_writer.write(_wire(first, body))
        finally:
            downstream.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await downstream

    async def _pump_down(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            first, body = await _read_packet(reader)
            writer.write(_wire(first, body))

    def _on_auth(self, link: _Link, body: bytes) -> None:
        r = _Reader(body)
        reason = r.u8()
        props = r.properties()
        token = props.get(AUTHENTICATION_DATA)
        if reason != 0x19 or props.get(AUTHENTICATION_METHOD) != "K8S-SAT" or not isinstance(token, bytes):
            link.client.write(_DISCONNECT_NOT_AUTHORIZED)
            link.close(flush=True)
            return
        self.auths.append(token)
        self.changed()
        if self.refuse == "silence":
            return
        if self.refuse == "auth":
            link.client.write(_auth(0x87, "K8S-SAT"))
            return
        expires = token_expiry(token)
        if self.refuse == "disconnect" or (expires is not None and expires <= time.time()):
            link.client.write(_DISCONNECT_NOT_AUTHORIZED)
            link.close(flush=True)
            return
        self.auths_accepted += 1
        link.present(token)
        link.client.write(_auth(0x00, "K8S-SAT"))
