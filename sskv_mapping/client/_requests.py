""":class:`RequestSender`, how one request reaches the service and its answer comes back.

Design: docs/design/architecture.md, "The client's parts"; users: docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from os import urandom
from typing import Any

from .._protocol import headers, limits, topics
from .._protocol.commands import _Base
from .._protocol.hlc import HlcClock, HybridLogicalClock
from .._telemetry import ClientTelemetry
from .._transport.backoff import Backoff
from .._transport.base import Connection, InboundMessage, OutgoingMessage
from .._transport.settings import ConnectionSettings
from .._transport.stream import StreamConnection
from ..errors import (
    ClockDriftError,
    ConfigurationError,
    ConnectionLostError,
    RequestTimeoutError,
    ServiceUnavailableError,
    ValueTooLargeError,
    WriteBufferFullError,
)
from ._home_loop import not_home
from ._in_flight import InFlightGate
from ._keeper import ConnectionKeeper
from ._pending import PendingCalls

__all__ = ["RequestSender", "on_publish"]

# A request the broker delivered to nobody (PUBACK 0x10) is sent again after these pauses (seconds, doubling),
# within the call's deadline; where the service never answered this client, for about _FAIL_FAST seconds.
_RESEND_BACKOFF_INITIAL = 0.01
_RESEND_BACKOFF_MAX = 0.2
_FAIL_FAST = 0.75
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _no_service(cmd: _Base[Any], settings: ConnectionSettings, answered_before: bool) -> str:
    text = (
        f"the state store did not answer on {settings.url}: the broker delivered the "
        f"{cmd.VERB.decode()} request to no subscriber; nothing was written"
    )
    if not answered_before and settings.host in _LOCAL_HOSTS:
        text += " (is the emulator running? start it with: sskv emulator)"
    return text


# A future that the next request sent in this context (and the tasks started in it) resolves once it is published:
# how a cache miss sends its GET right behind its KEYNOTIFY, in order, without waiting for the KEYNOTIFY's answer.
_ON_PUBLISH: ContextVar[asyncio.Future[None] | None] = ContextVar("sskv_mapping_on_publish", default=None)


@contextlib.contextmanager
def on_publish(published: asyncio.Future[None]) -> Iterator[None]:
    """Resolve ``published`` as soon as a request sent in this block, or by a task started in it, is published
    (handed to the connection, in order with this client's other requests). Enter and leave it in one task."""
    token = _ON_PUBLISH.set(published)
    try:
        yield
    finally:
        _ON_PUBLISH.reset(token)


class _NotSent(Exception):
    """The connection was gone before the request could be published: nothing was sent, send it on the next."""


class _Expired(Exception):
    """A request's deadline passed (turned into :class:`RequestTimeoutError` by its caller)."""


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(_Expired())


class RequestSender:
    """Sends a client's requests on its keeper's connection and matches the responses (one per client)."""

    def __init__(
        self,
        settings: ConnectionSettings,
        hlc: HlcClock,
        keeper: ConnectionKeeper,
        gate: InFlightGate,
        clock_behind: Callable[[ClockDriftError], None],
    ) -> None:
        self.settings = settings
        self._hlc = hlc
        self._keeper = keeper
        self._gate = gate
        self._clock_behind = clock_behind
        self.response_topic = topics.response_topic(settings.client_id)
        #: the requests awaiting their response, by correlation data
        self.pending = PendingCalls()
        #: requests published (a request refused before sending is not counted)
        self.requests_sent = 0
        #: requests the broker acknowledged as delivered to nobody (PUBACK 0x10) and that were sent again
        self.undelivered_resends = 0
        # whether the state store ever answered this client: a broker where it never did fails fast
        self.service_answered = False
        #: OpenTelemetry on this client's connection, or ``None`` (sskv_mapping/_telemetry.py; set at connect)
        self.telemetry: ClientTelemetry | None = None
        #: the event loop the client connected on: its replies arrive there only (client/_home_loop.py)
        self.home: asyncio.AbstractEventLoop | None = None
        # the connection whose publish_encoded_nowait takes this client's requests (see _learn), and the encoder
        self._encoded_conn: Connection | None = None
        self._encoded: Callable[[str, bytes, bytes, asyncio.Future[Any]], None] | None = None
        self._encode: Callable[[bytes, str, int, HybridLogicalClock | None, bool], bytes] | None = None

    async def request(
        self,
        cmd: _Base[Any],
        payload: bytes,
        timeout: float | None,
        fencing_token: HybridLogicalClock | None,
        persist: bool,
    ) -> tuple[bytes, HybridLogicalClock | None]:
        """``(reply payload, response __ts)`` for ``cmd`` (encoded as ``payload``) within ``timeout`` seconds
        (``None``: no limit); header errors raise here.

        One coroutine per call, its steps in turn: a slot is taken (the in-flight bound), a reconnect waited out,
        the request published and sent again while it reached nobody, and the response's headers checked and its
        version merged into this client's clock."""
        loop = asyncio.get_running_loop()
        if loop is not self.home and (wrong := not_home(self.settings.client_id, self.home)):
            raise wrong  # not this client's loop (client/_home_loop.py)
        # the time read once for the deadline and, when nothing is awaited before the request is sent (the usual
        # case: a slot free, connected), for its expiry too (``fresh``)
        start = 0.0 if timeout is None else loop.time()
        deadline = None if timeout is None else start + timeout
        fresh = True
        gate = self._gate
        if not gate.try_enter():
            fresh = False
            await gate.wait(deadline, lambda: f"{cmd.VERB.decode()} not sent: no slot within {timeout} s")
        try:
            resend: Backoff | None = None  # made on the first undelivered request only: not a cost of every call
            fail_fast: float | None = None
            keeper = self._keeper
            pending = self.pending
            calls = pending.calls
            while True:
                conn = keeper.conn
                if conn is None or not keeper.connected:  # reconnecting: wait for it, within the call's deadline
                    fresh = False
                    conn = await keeper.connection(None if deadline is None else max(deadline - loop.time(), 0.001))
                # one attempt: published, then its response awaited
                self.requests_sent += 1
                # pending.open(loop), inline (one per request): 16 random bytes (see PendingCalls.open), a future
                corr = urandom(16)
                fut: asyncio.Future[InboundMessage] = loop.create_future()
                calls[corr] = fut
                try:
                    if deadline is None:
                        expiry = 3600
                    else:
                        # the deadline goes in the pending table's heap (one loop timer for all calls), not a timer
                        # or an asyncio.timeout() per call: the request path's own cost is what bench_rpc measures
                        if fresh:
                            now, remaining = start, timeout  # (deadline - start: the timeout, without rounding)
                        else:
                            now = loop.time()
                            remaining = deadline - now
                        assert remaining is not None
                        if remaining < 0.001:
                            remaining = 0.001
                        # headers.expiry_seconds(remaining), inline: at least 1 (remaining is), at most 2**32 - 1
                        expiry = math.ceil(remaining)
                        if expiry > 0xFFFFFFFF:
                            expiry = 0xFFFFFFFF
                        pending.expire_at(loop, now + remaining, corr, fut, _expire)
                    # No PUBACK wait: the response is what we wait for, and a connection that drops fails this call
                    # through the keeper. A refusing PUBACK (an ACL denial) or one that delivered to nobody (0x10)
                    # fails the response future at once: no wait for the timeout.
                    backlog = self._publish(cmd, payload, conn, corr, fut, expiry, fencing_token, persist)
                    if backlog is not None:  # no room in the write backlog now: wait for it (within the deadline)
                        await conn.publish(
                            backlog, timeout=3600.0 if deadline is None else max(deadline - loop.time(), 0.001)
                        )
                    published = _ON_PUBLISH.get()
                    if published is not None and not published.done():
                        published.set_result(None)
                    message = await fut
                except _NotSent:
                    if deadline is not None and loop.time() >= deadline:
                        raise RequestTimeoutError(
                            f"{cmd.VERB.decode()} not sent within {timeout} s: not connected to {self.settings.url}"
                        ) from None
                    # a yield, not a wait: the keeper sees the drop within an iteration or two, then we wait for it
                    fresh = False
                    await asyncio.sleep(0)
                    continue
                except ServiceUnavailableError:
                    # PUBACK 0x10: the broker delivered the request to nobody -- a definite "not sent", not an
                    # unknown outcome -- so it is safe to send it again once the service (re)subscribes.
                    now = loop.time()
                    if fail_fast is None:
                        fail_fast = now + _FAIL_FAST
                    give_up = deadline
                    if not self.service_answered:  # it never answered here: a bare broker, say so quickly
                        give_up = fail_fast if deadline is None else min(deadline, fail_fast)
                    if resend is None:
                        resend = Backoff(_RESEND_BACKOFF_INITIAL, _RESEND_BACKOFF_MAX, jitter=False)
                    if give_up is not None and now + resend.current >= give_up:
                        raise ServiceUnavailableError(_no_service(cmd, self.settings, self.service_answered)) from None
                    fresh = False
                    await asyncio.sleep(resend.next())
                    self.undelivered_resends += 1
                    continue
                except _Expired:
                    raise RequestTimeoutError(
                        f"no response to {cmd.VERB.decode()} within {timeout} s from {self.settings.url}"
                    ) from None
                finally:
                    # pending.close(corr, fut), inline
                    calls.pop(corr, None)
                    if not fut.done():
                        fut.cancel()
                    elif not fut.cancelled():
                        fut.exception()  # retrieved: a failure nobody awaited is not worth a warning
                break
            self.service_answered = True
            # the response's headers checked (errors raise here) and its version merged into this client's clock
            version = headers.check_response(message.user_properties, message.content_type)
            if version is not None:
                try:
                    self._hlc.merge(version)
                except ClockDriftError as exc:
                    # The request was carried out: failing the call now would report an applied write as failed.
                    # The service's clock (the version it returned) is far ahead of ours; our clock stays as it
                    # was (our next requests carry older timestamps, which the service accepts).
                    self._clock_behind(exc)
            return message.payload, version
        finally:
            gate.leave()

    def _publish(
        self,
        cmd: _Base[Any],
        payload: bytes,
        conn: Connection,
        corr: bytes,
        fut: asyncio.Future[InboundMessage],
        expiry: int,
        fencing_token: HybridLogicalClock | None,
        persist: bool,
    ) -> OutgoingMessage | None:
        """Publish the request; the message to publish with a wait when the write backlog has no room now (else
        ``None``). Raises :class:`_NotSent` when the connection is gone, :class:`ValueTooLargeError` when it is
        too large (nothing sent either way)."""
        telemetry = self.telemetry
        message: OutgoingMessage | None = None
        text = ""  # the encoded way's __ts
        try:
            if telemetry is None and conn is self._encoded_conn:
                # the stream transport: the properties encoded from this client's constant ones (RequestProperties),
                # no OutgoingMessage to build and take apart again; the clock's tick as text (no value object)
                assert self._encoded is not None and self._encode is not None
                text = self._hlc.tick_text()
                self._encoded(
                    topics.REQUEST_TOPIC, payload, self._encode(corr, text, expiry, fencing_token, persist), fut
                )
                return None
            stamp = self._hlc.tick()
            props = headers.request_properties(self.settings.client_id, stamp, fencing_token, persist)
            if telemetry is not None:  # W3C trace context, and the request's resends counted
                telemetry.published(props)
            else:
                self._learn(conn)
            message = OutgoingMessage(
                topics.REQUEST_TOPIC, payload, 1, corr, self.response_topic, props, headers.CONTENT_TYPE, expiry
            )
            conn.publish_nowait(message, refusal=fut)
            return None
        except ValueTooLargeError:  # over the broker's Maximum Packet Size: refused here, nothing was sent
            self.requests_sent -= 1
            raise
        except WriteBufferFullError:
            # The backlog has no room now (large requests at once: an update() of several 6 MiB values).
            # Within the write bound a request waits for room, within its deadline, rather than fail; a
            # larger one could never be queued: it is too big, not the broker slow.
            if len(payload) > limits.WRITE_BOUND:
                self.requests_sent -= 1
                raise ValueTooLargeError(
                    f"the {cmd.VERB.decode()} request is {len(payload):,} bytes, over the connection's write "
                    f"bound of {limits.WRITE_BOUND:,} bytes",
                    size=len(payload),
                    limit=limits.WRITE_BOUND,
                ) from None
            if message is None:  # from the encoded way (no telemetry there): the same __ts
                stamp = HybridLogicalClock.parse(text)
                props = headers.request_properties(self.settings.client_id, stamp, fencing_token, persist)
                message = OutgoingMessage(
                    topics.REQUEST_TOPIC, payload, 1, corr, self.response_topic, props, headers.CONTENT_TYPE, expiry
                )
            return message
        except ConnectionLostError:  # the connection is gone (the keeper is about to see it): nothing sent
            self.requests_sent -= 1
            raise _NotSent from None

    def _learn(self, conn: Connection) -> None:
        """Send this client's requests on ``conn`` the encoded-properties way from the next one: when it is the
        stream transport (``publish_nowait`` not overridden: a subclass that watches it sees every request) and
        this client's properties encode."""
        if getattr(type(conn), "publish_nowait", None) is not StreamConnection.publish_nowait:
            return
        if self._encode is None:
            try:
                self._encode = headers.RequestProperties(self.settings.client_id, self.response_topic).encode
            except (ConfigurationError, UnicodeEncodeError):
                return  # never on this client: publish_nowait says what is wrong, request by request
        self._encoded_conn = conn
        self._encoded = conn.publish_encoded_nowait  # type: ignore[attr-defined]
