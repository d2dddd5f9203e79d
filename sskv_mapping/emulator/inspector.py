"""The inspector: a web page served from the emulator process (``sskv emulator --inspect``).

What it does and why: docs/design/architecture.md, "The emulator's parts", `emulator/inspector.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
from importlib import resources
from typing import Any

from aiohttp import web

from .._protocol.hlc import HybridLogicalClock
from .._protocol.resp3 import encode_request
from .core import CoreResult
from .server import EmulatorServer
from .store_view import (
    describe_request,
    key_from_text,
    key_record,
    list_keys,
    list_locks,
    list_namespaces,
    list_watches,
)

__all__ = ["FEED_PER_SECOND", "Inspector", "exposure_warning", "is_loopback"]

log = logging.getLogger("sskv_mapping.emulator.inspector")

#: requests shown in detail per second on the live feed; beyond it they are counted (a person reads a few)
FEED_PER_SECOND = 100
_FLUSH_S = 0.1
_PER_FLUSH = int(FEED_PER_SECOND * _FLUSH_S)
_HEARTBEAT_S = 5.0
#: what one page may have waiting to be sent before its feed is cut short (a stalled tab)
_MAX_PENDING_BYTES = 1 << 20
_CLIENT_ID = "sskv-inspector"
_MAX_LIMIT = 10_000


def _ascii_digits(text: str) -> bool:
    """Only 0-9, at most 9 of them: ``str.isdigit`` also takes '²' and other digits ``int()`` refuses (a 500)."""
    return 0 < len(text) < 10 and text.isascii() and text.isdigit()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, url: str, *, writable: bool) -> str | None:
    """What to log when the inspector listens beyond loopback (``None``: it does not)."""
    if is_loopback(host):
        return None
    return (
        f"the inspector listens on {url}, BEYOND LOOPBACK: anyone who can reach this address reads every key and "
        f"value in the store{' AND CAN CHANGE OR DELETE THEM (--inspect-writable)' if writable else ''}. "
        "Bind it to 127.0.0.1 unless you mean that."
    )


class _Page:
    """One connected ``/api/events`` stream: the bytes waiting to be written to it."""

    __slots__ = ("dropped", "pending", "size", "wake")

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.size = 0
        self.dropped = 0
        self.wake = asyncio.Event()

    def add(self, chunk: bytes) -> None:
        if self.size > _MAX_PENDING_BYTES:
            self.dropped += 1
            return
        self.pending.append(chunk)
        self.size += len(chunk)
        self.wake.set()

    def take(self) -> bytes:
        data = b"".join(self.pending)
        self.pending.clear()
        self.size = 0
        self.wake.clear()
        return data


class Inspector:
    """Serves the inspector page and its JSON for ``server`` until :meth:`close`.

    Example::

        inspector = Inspector(server, writable=False)
        url = await inspector.start("127.0.0.1", 8080)
        ...
        await inspector.close()
    """

    def __init__(self, server: EmulatorServer, *, writable: bool = False) -> None:
        self.server = server
        self.core = server.core
        self.writable = writable
        self.url = ""
        self._pages: set[_Page] = set()
        self._raw: list[tuple[int, str | None, bytes | None, CoreResult, str | None]] = []
        self._budget = _PER_FLUSH
        self._skipped = 0
        self._flush_handle: asyncio.TimerHandle | None = None
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._hosts: set[str] = set()
        self._any_host = False
        self._html = resources.files(__package__).joinpath("inspector.html").read_bytes()

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> str:
        """Listen on ``host:port`` (0: a free port) and return the page's URL. A non-loopback host is logged at
        WARNING: then anyone who can reach it reads every key (and changes them, if writable)."""
        app = web.Application(middlewares=[self._check_host])
        app.router.add_get("/", self._page)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/api/keys", self._keys)
        app.router.add_get("/api/namespaces", self._namespaces)
        app.router.add_get("/api/locks", self._locks)
        app.router.add_get("/api/watches", self._watches)
        app.router.add_get("/api/key", self._key)
        app.router.add_put("/api/key", self._write)
        app.router.add_delete("/api/key", self._delete)
        app.router.add_get("/api/events", self._events)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        bound_port = sock.getsockname()[1]
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound_port}/"
        self._hosts = {f"{shown}:{bound_port}", f"localhost:{bound_port}", f"127.0.0.1:{bound_port}"}
        self._hosts.add(f"[::1]:{bound_port}")
        warning = exposure_warning(host, self.url, writable=self.writable)
        if warning is not None:
            self._any_host = True
            log.warning("%s", warning)
        return self.url

    async def close(self) -> None:
        self._closing.set()
        self.server.tap = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        for page in self._pages:
            page.wake.set()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the live feed (hot path while a page is open) --------------------------------------------------

    def _tap(self, client_id: str | None, request: bytes | None, result: CoreResult, traceparent: str | None) -> None:
        if self._budget > 0:
            self._budget -= 1
            self._raw.append((self.core.now_ms(), client_id, request, result, traceparent))
        else:
            self._skipped += 1
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(_FLUSH_S, self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        raw, self._raw = self._raw, []
        skipped, self._skipped = self._skipped, 0
        self._budget = _PER_FLUSH
        try:
            events = [describe_request(*item) for item in raw]
        except Exception:  # never let the page break the service
            log.exception("formatting the inspector feed failed")
            return
        data = json.dumps({"events": events, "skipped": skipped}, separators=(",", ":"))
        chunk = f"event: batch\ndata: {data}\n\n".encode()
        for page in self._pages:
            page.add(chunk)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        page = _Page()
        self._pages.add(page)
        self.server.tap = self._tap
        try:
            await response.write(b"retry: 1000\nevent: hello\ndata: {}\n\n")
            while not self._closing.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(page.wake.wait(), _HEARTBEAT_S)
                data = page.take()
                if page.dropped:
                    note = json.dumps({"events": [], "skipped": 0, "dropped_batches": page.dropped})
                    data += f"event: batch\ndata: {note}\n\n".encode()
                    page.dropped = 0
                # a comment line when idle: a closed tab is noticed at the next write
                await response.write(data or b": idle\n\n")
        except ConnectionError:
            pass  # the tab was closed (a closed tab also cancels this handler: handler_cancellation)
        finally:
            self._pages.discard(page)
            if not self._pages:
                self.server.tap = None
        return response

    # -- reading ----------------------------------------------------------------------------------------

    @web.middleware
    async def _check_host(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self._any_host and request.host not in self._hosts:
            raise web.HTTPForbidden(text=f"the inspector answers on {self.url} only (Host: {request.host[:100]!r})")
        response: web.StreamResponse = await handler(request)
        return response

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(body=self._html, content_type="text/html", charset="utf-8")

    def _now(self) -> int:
        return self.core.now_ms()

    @staticmethod
    def _prefix(request: web.Request) -> bytes:
        return request.query.get("prefix", "").encode("utf-8", "surrogatepass")

    @staticmethod
    def _limit(request: web.Request) -> int:
        text = request.query.get("limit", "500")
        if not _ascii_digits(text) or int(text) > _MAX_LIMIT:
            raise web.HTTPBadRequest(text=f"limit must be 0-{_MAX_LIMIT}")
        return int(text)

    async def _state(self, request: web.Request) -> web.Response:
        now, prefix = self._now(), self._prefix(request)
        return web.json_response(
            {
                "emulator": {
                    "broker": self.server.settings.url,
                    "client_id": self.server.settings.client_id,
                    "clock": str(self.core.clock),
                    "writable": self.writable,
                    "stats": self.server.stats,
                },
                "keys": list_keys(self.core, now, prefix, self._limit(request)),
                "namespaces": list_namespaces(self.core, now, prefix),
                "locks": list_locks(self.core, now, prefix),
                "watches": list_watches(self.core, prefix),
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        return web.json_response(list_keys(self.core, self._now(), self._prefix(request), self._limit(request)))

    async def _namespaces(self, request: web.Request) -> web.Response:
        return web.json_response(list_namespaces(self.core, self._now(), self._prefix(request)))

    async def _locks(self, request: web.Request) -> web.Response:
        return web.json_response(list_locks(self.core, self._now(), self._prefix(request)))

    async def _watches(self, request: web.Request) -> web.Response:
        return web.json_response(list_watches(self.core, self._prefix(request)))

    @staticmethod
    def _key_of(request: web.Request) -> bytes:
        try:
            return key_from_text(request.query.get("key"), request.query.get("key_hex"))
        except ValueError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None

    async def _key(self, request: web.Request) -> web.Response:
        key, now = self._key_of(request), self._now()
        entry = self.core.entry(key)
        if entry is None or (entry.expires_at_ms is not None and entry.expires_at_ms <= now):
            raise web.HTTPNotFound(text="no such key")
        return web.json_response(key_record(key, entry, now, self.core.watchers(key), limit=None))

    # -- writing (--inspect-writable) ---------------------------------------------------------------------

    def _refuse_unless_writable(self) -> None:
        if not self.writable:
            raise web.HTTPForbidden(text="the inspector is read-only: start the emulator with --inspect-writable")

    def _serve(self, *args: bytes) -> web.Response:
        props = {"__ts": str(HybridLogicalClock(self._now(), 0, _CLIENT_ID)), "__srcId": _CLIENT_ID}
        result = self.server.handle_local(encode_request(*args), props)
        if result.payload.startswith(b"-"):
            raise web.HTTPConflict(text=result.payload[1:].decode("utf-8", "replace").strip())
        reply = result.payload.strip().decode("utf-8", "replace")
        return web.json_response({"reply": reply, "version": None if result.version is None else str(result.version)})

    async def _write(self, request: web.Request) -> web.Response:
        self._refuse_unless_writable()
        key = self._key_of(request)
        value = await request.read()
        ttl = request.query.get("ttl_ms")
        if ttl is None or ttl == "":
            return self._serve(b"SET", key, value)
        if not _ascii_digits(ttl) or int(ttl) < 1:
            raise web.HTTPBadRequest(text="ttl_ms must be a positive integer")
        return self._serve(b"SET", key, value, b"PX", ttl.encode())

    async def _delete(self, request: web.Request) -> web.Response:
        self._refuse_unless_writable()
        return self._serve(b"DEL", self._key_of(request))
