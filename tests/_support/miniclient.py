"""A minimal state store test client on ``PahoConnection``: raw payloads and user properties in, raw
responses and notifications out.

Written for the emulator tests, independent of ``sskv_mapping.client`` so that a bug there cannot hide
one in the emulator. It sends exactly what a test asks for (``props`` may omit, add or break any header;
``response_topic``/``correlation`` may be left out), matches responses by correlation data, and keeps
notifications per key.

Example::

    async with MiniClient(host, port) as c:
        r = await c.request(b"SET", b"k", b"v")
        assert r.payload == b"+OK\\r\\n" and r.ts is not None
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from sskv_mapping._protocol.hlc import HlcClock, HybridLogicalClock
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping._protocol.topics import (
    REQUEST_TOPIC,
    notification_filter,
    parse_notification_topic,
    response_topic,
)
from sskv_mapping._transport.base import InboundMessage, OutgoingMessage
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings

__all__ = ["DEFAULT", "MiniClient", "Note", "Response"]

WAIT = 5.0


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


#: "Use the normal value" for ``props``, ``response_topic`` and ``correlation``.
DEFAULT = _Default()


@dataclass(frozen=True)
class Response:
    payload: bytes
    props: dict[str, str]
    content_type: str | None
    topic: str
    correlation: bytes | None

    @property
    def ts(self) -> HybridLogicalClock | None:
        raw = self.props.get("__ts")
        return None if raw is None else HybridLogicalClock.parse(raw)


@dataclass(frozen=True)
class Note:
    client_id: str
    key: bytes
    payload: bytes
    props: dict[str, str]

    @property
    def ts(self) -> HybridLogicalClock:
        return HybridLogicalClock.parse(self.props["__ts"])


class MiniClient:
    def __init__(self, host: str, port: int, client_id: str | None = None) -> None:
        self.client_id = client_id or f"mini-{uuid.uuid4().hex[:12]}"
        self.response_topic = response_topic(self.client_id)
        self.hlc = HlcClock(self.client_id)
        self._conn = PahoConnection(ConnectionSettings(host=host, port=port, client_id=self.client_id), self._on)
        self._waiting: dict[bytes, asyncio.Future[Response]] = {}
        self._notes: dict[bytes, asyncio.Queue[Note]] = {}
        #: every notification in arrival order
        self.all_notes: list[Note] = []
        self.stray_responses: list[Response] = []

    async def connect(self) -> MiniClient:
        await self._conn.connect()
        await self._conn.subscribe([self.response_topic, notification_filter(self.client_id)], qos=1)
        return self

    async def close(self) -> None:
        await self._conn.close()

    async def __aenter__(self) -> MiniClient:
        return await self.connect()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- requests -------------------------------------------------------------------------------------

    def sdk_props(self) -> list[tuple[str, str]]:
        """The user properties the SDKs put on every request, with a freshly ticked ``__ts``."""
        return [
            ("__ts", str(self.hlc.tick())),
            ("__srcId", self.client_id),
            ("__protVer", "1.0"),
            ("$partition", self.client_id),
            ("$high_priority", ""),
        ]

    async def send(
        self,
        payload: bytes,
        props: Sequence[tuple[str, str]] | _Default = DEFAULT,
        *,
        extra: Sequence[tuple[str, str]] = (),
        response_topic: str | _Default | None = DEFAULT,
        correlation: bytes | _Default | None = DEFAULT,
        qos: int = 1,
    ) -> bytes | None:
        """Publish one raw request; returns the correlation data used (register it before sending)."""
        corr = uuid.uuid4().bytes if isinstance(correlation, _Default) else correlation
        if corr is not None:
            self._waiting[corr] = asyncio.get_running_loop().create_future()
        user = self.sdk_props() if isinstance(props, _Default) else list(props)
        await self._conn.publish(
            OutgoingMessage(
                REQUEST_TOPIC,
                payload,
                qos=qos,
                correlation_data=corr,
                response_topic=self.response_topic if isinstance(response_topic, _Default) else response_topic,
                user_properties=[*user, *extra],
                content_type="application/octet-stream",
                message_expiry=10,
            )
        )
        return corr

    async def response(self, corr: bytes, timeout: float = WAIT) -> Response:
        try:
            return await asyncio.wait_for(asyncio.shield(self._waiting[corr]), timeout)
        finally:
            if self._waiting[corr].done():
                del self._waiting[corr]

    async def raw(
        self,
        payload: bytes,
        props: Sequence[tuple[str, str]] | _Default = DEFAULT,
        *,
        extra: Sequence[tuple[str, str]] = (),
        timeout: float = WAIT,
    ) -> Response:
        corr = await self.send(payload, props, extra=extra)
        assert corr is not None
        return await self.response(corr, timeout)

    async def request(
        self,
        *args: bytes,
        props: Sequence[tuple[str, str]] | _Default = DEFAULT,
        extra: Sequence[tuple[str, str]] = (),
        timeout: float = WAIT,
    ) -> Response:
        """Send ``args`` as a RESP3 array and await the response; merges its ``__ts`` like the SDKs."""
        r = await self.raw(encode_request(*args), props, extra=extra, timeout=timeout)
        if r.ts is not None:
            self.hlc.update(r.ts)
        return r

    # -- notifications ----------------------------------------------------------------------------------

    def _queue(self, key: bytes) -> asyncio.Queue[Note]:
        if key not in self._notes:
            self._notes[key] = asyncio.Queue()
        return self._notes[key]

    async def note(self, key: bytes, timeout: float = WAIT) -> Note:
        """The next notification about ``key`` (waits up to ``timeout`` seconds)."""
        return await asyncio.wait_for(self._queue(key).get(), timeout)

    def pending_notes(self, key: bytes) -> int:
        """How many notifications about ``key`` arrived and were not taken by :meth:`note` yet."""
        return self._queue(key).qsize()

    # -- inbound ----------------------------------------------------------------------------------------

    def _on(self, message: InboundMessage) -> None:
        props: dict[str, str] = {}
        for name, value in message.user_properties:
            props.setdefault(name, value)
        if message.topic == self.response_topic:
            r = Response(message.payload, props, message.content_type, message.topic, message.correlation_data)
            fut = self._waiting.get(message.correlation_data or b"")
            if fut is None or fut.done():
                self.stray_responses.append(r)
            else:
                fut.set_result(r)
            return
        client_id, key = parse_notification_topic(message.topic)
        note = Note(client_id, key, message.payload, props)
        self.all_notes.append(note)
        self._queue(key).put_nowait(note)
