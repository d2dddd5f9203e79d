"""K8S-SAT re-authentication on a live connection, before the presented token expires.

Design: docs/design/transport.md, "The session core and the other transports".
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable

from .._protocol.mqtt_packets import (
    AUTH,
    AUTH_REAUTHENTICATE,
    AUTH_SUCCESS,
    Auth,
    auth_packet,
    decode_auth,
    reason_name,
)
from .._protocol.mqtt_publish import MalformedPacketError
from ..errors import BrokerConnectError, ClientStateError, ConnectionLostError, ReauthenticationError
from .settings import ConnectionSettings

__all__ = ["SAT_METHOD", "RefreshPlan", "SatSession", "jwt_times", "margin", "read_sat_token"]

log = logging.getLogger("sskv_mapping.transport")

SAT_METHOD = "K8S-SAT"

#: The re-authentication margin before ``exp``: a tenth of the token's lifetime, at least MARGIN_FLOOR and at
#: most MARGIN_CAP seconds, and never more than half the lifetime (see :func:`margin`).
MARGIN_FRACTION = 0.1
MARGIN_FLOOR = 1.0
MARGIN_CAP = 60.0
#: The source is read at least 8 times per token lifetime, and not more often than every MIN_POLL seconds.
POLLS_PER_LIFETIME = 8
MIN_POLL = 0.05


def margin(lifetime: float) -> float:
    """Seconds before ``exp`` at which the token source is read for a newer token, for a token that lives
    ``lifetime`` seconds.

    What the margin must cover is not the AUTH round trip (milliseconds) but a late timer on a loaded machine
    and the skew between our clock and the broker's, which compares ``exp`` with its own. A fixed margin fits
    one lifetime only: the .NET SDK's 5 s is thin against clock skew for an hour-long token and longer than a
    test token's whole life. So: 10 % of the lifetime, at least 1 s (a busy event loop), at most 60 s (an hour
    token is refreshed a minute before it expires; a 10-minute one, the Kubernetes minimum, too), and never
    more than half the lifetime (a token is used for at least half its life): 1 h -> 60 s, 30 s -> 3 s,
    4 s -> 1 s, 1 s -> 0.5 s.
    """
    return max(0.0, min(MARGIN_CAP, max(MARGIN_FLOOR, MARGIN_FRACTION * lifetime), lifetime / 2))


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def jwt_times(token: bytes) -> tuple[float | None, float] | None:
    """``(iat, exp)`` of a JWT (seconds since the epoch; ``iat`` ``None`` when absent), read without verifying
    the signature; ``None`` for a token that is not a JWT or has no numeric ``exp``."""
    parts = token.split(b".")
    if len(parts) != 3 or not parts[1]:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + b"=" * (-len(parts[1]) % 4)))
    except (ValueError, RecursionError):  # binascii.Error, UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not isinstance(claims, dict):
        return None
    exp = _number(claims.get("exp"))
    return None if exp is None else (_number(claims.get("iat")), exp)


class RefreshPlan:
    """When to read the token source next, and whether what it holds is worth a re-authentication.

    Pure: every method takes ``now``, the wall-clock time in seconds since the epoch (the clock a JWT's ``exp``
    is on). ``poll`` is ``sat_poll_interval``; ``cheap`` says the source may be read at every poll (a file);
    a user's provider (``cheap=False``) with a JWT is asked once at the margin and then at every poll until it
    gives a newer token.
    """

    def __init__(self, token: bytes, now: float, poll: float, *, cheap: bool = True) -> None:
        self._poll_setting = poll
        self._cheap = cheap
        self.token = token
        self.expires: float | None = None
        self.refresh_at: float | None = None
        self.poll = poll
        self._warned = False
        self.presented(token, now)

    def presented(self, token: bytes, now: float) -> None:
        """``token`` is the one the broker holds now (sent in CONNECT, or accepted by AUTH 0x00)."""
        self.token = token
        self._warned = False
        times = jwt_times(token)
        if times is None:
            self.expires = self.refresh_at = None
            self.poll = self._poll_setting
            return
        issued, expires = times
        start = issued if issued is not None and issued <= now and issued < expires else now
        lifetime = max(expires - start, 0.0)
        self.expires = expires
        self.refresh_at = expires - margin(lifetime)
        self.poll = min(self._poll_setting, max(MIN_POLL, lifetime / POLLS_PER_LIFETIME))

    def delay(self, now: float) -> float:
        """Seconds until the source should be read again."""
        if self.refresh_at is None or self.refresh_at <= now:
            return self.poll
        until = self.refresh_at - now
        return min(until, self.poll) if self._cheap else until

    def choose(self, current: bytes, now: float) -> bytes | None:
        """The token to re-authenticate with, given what the source holds now, or ``None``: the same token, or a
        JWT that expires no later than the presented one or has expired already."""
        if current == self.token:
            return None
        times = jwt_times(current)
        if times is not None and (times[1] <= now or (self.expires is not None and times[1] <= self.expires)):
            return None
        return current

    def stale(self, now: float) -> bool:
        """True once per presented token, when its margin has begun and the source still has nothing newer:
        the broker will close the connection at ``exp`` (and the reconnect will read the source again)."""
        if self.refresh_at is None or now < self.refresh_at or self._warned:
            return False
        self._warned = True
        return True


class SatSession:
    """One connection's K8S-SAT re-authentication: the task that follows a :class:`RefreshPlan` and calls
    ``reauthenticate`` (the connection's method, which runs :meth:`exchange`), and the AUTH exchange itself.

    The connection hands it every packet it does not handle itself (:meth:`received`: an AUTH answers the
    exchange; anything else, or an AUTH nobody asked for, is a :class:`MalformedPacketError`).
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        reauthenticate: Callable[[bytes, float], Awaitable[None]],
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._reauthenticate = reauthenticate
        self._wall = wall
        self._waiter: asyncio.Future[Auth] | None = None
        self._task: asyncio.Task[None] | None = None
        self._over = False
        #: re-authentications the broker accepted on this connection
        self.accepted = 0

    def start(self, token: bytes | None, closed: asyncio.Future[None] | None) -> None:
        """The connection is up with ``token`` presented (``None``: no K8S-SAT, nothing to do); ``closed``
        resolves when it ends, which stops the task and fails an exchange under way."""
        if token is None or closed is None or closed.done():
            return
        name = f"sskv-sat-refresh-{self._settings.client_id}"
        self._task = asyncio.get_running_loop().create_task(self._keep_fresh(token), name=name)
        closed.add_done_callback(lambda _: self.stop())

    def stop(self) -> None:
        self._over = True
        if self._waiter is not None and not self._waiter.done():
            # an exchange under way fails (and is logged) as such; its task then ends by itself
            self._waiter.set_exception(ConnectionLostError("the connection ended"))
        elif self._task is not None:
            self._task.cancel()
        self._task = None

    def received(self, first: int, body: bytes) -> None:
        """A packet the connection does not otherwise handle (called inside its read callback)."""
        if first >> 4 != AUTH:
            raise MalformedPacketError(f"unexpected packet type {first >> 4}")
        auth = decode_auth(first, body)
        if self._waiter is None or self._waiter.done():
            raise MalformedPacketError(f"an AUTH ({reason_name(auth.reason)}) with no re-authentication under way")
        self._waiter.set_result(auth)

    async def exchange(
        self, token: bytes, timeout: float, send: Callable[[bytes], None], drop: Callable[[str, str], None]
    ) -> None:
        """Send AUTH 0x19 (``K8S-SAT``, ``token``) with ``send`` and wait up to ``timeout`` s for AUTH 0x00.
        Anything else: ``drop(why, what)`` ends the connection and :class:`ReauthenticationError` is raised."""
        url = self._settings.url
        if self._over:
            raise ConnectionLostError(f"not connected to {url}")
        if self._waiter is not None:
            raise ClientStateError("a re-authentication is already under way on this connection")
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            send(auth_packet(AUTH_REAUTHENTICATE, method=SAT_METHOD, data=token))
            async with asyncio.timeout(timeout):
                auth = await waiter
        except TimeoutError:
            failure = f"no answer within {timeout:g} s"
        except ConnectionLostError as exc:
            failure = f"the connection ended before the answer ({exc})"  # e.g. the broker's DISCONNECT 0x87
        else:
            if auth.reason == AUTH_SUCCESS and auth.method in (None, SAT_METHOD):
                self.accepted += 1
                log.debug("%s: K8S-SAT re-authentication accepted", self._settings.client_id)
                return
            failure = f"the broker answered AUTH {reason_name(auth.reason)} (0x{auth.reason:02X})"
            if auth.method not in (None, SAT_METHOD):
                failure += f" for method {auth.method[:40]!r}"
            if auth.reason_string:
                failure += f": {auth.reason_string[:200]}"
        finally:
            self._waiter = None
        error = ReauthenticationError(f"K8S-SAT re-authentication on {url} failed: {failure}")
        log.warning("%s: %s; reconnecting with the token read again", self._settings.client_id, error)
        if not self._over:
            drop(failure, "K8S-SAT re-authentication failed")
        raise error

    async def _keep_fresh(self, presented: bytes) -> None:
        s = self._settings
        plan = RefreshPlan(presented, self._wall(), s.sat_poll_interval, cheap=s.sat_token_provider is None)
        unreadable = False
        while True:
            await asyncio.sleep(plan.delay(self._wall()))
            try:
                current = read_sat_token(s)
            except BrokerConnectError as exc:
                # keep the presented token; the next poll tries again (a file being replaced, a provider's hiccup)
                (log.debug if unreadable else log.warning)("%s: %s; trying again", s.client_id, exc)
                unreadable = True
                continue
            unreadable = False
            if current is None:  # pragma: no cover - the settings are frozen: a source does not vanish
                return
            now = self._wall()
            token = plan.choose(current, now)
            if token is None:
                if plan.stale(now):
                    log.warning(
                        "%s: the K8S-SAT token source holds no newer token %.1f s before the presented one expires;"
                        " the broker will close the connection then (the reconnect reads the token again)",
                        s.client_id, (plan.expires or now) - now,
                    )  # fmt: skip
                continue
            try:
                await self._reauthenticate(token, s.connect_timeout)
            except (ReauthenticationError, ConnectionLostError):
                return  # logged, and the connection is over: the client reconnects
            plan.presented(token, self._wall())


def read_sat_token(settings: ConnectionSettings) -> bytes | None:
    """The current K8S-SAT token, surrounding whitespace stripped: the file's (``sat_token_file``, read now) or
    what ``sat_token_provider`` returns; ``None`` without either. Unreadable, or a provider that fails:
    :class:`BrokerConnectError` (never with the token in its text)."""
    provider = settings.sat_token_provider
    if provider is not None:
        try:
            token = provider()
        except Exception as exc:
            raise BrokerConnectError(f"the K8S-SAT token provider failed ({type(exc).__name__})") from exc
        if isinstance(token, str):
            return token.encode("utf-8").strip()
        if isinstance(token, bytes | bytearray):
            return bytes(token).strip()
        raise BrokerConnectError(f"the K8S-SAT token provider returned {type(token).__name__}, not str or bytes")
    if settings.sat_token_file is None:
        return None
    try:
        with open(settings.sat_token_file, "rb") as fh:
            return fh.read().strip()
    except OSError as exc:
        raise BrokerConnectError(f"cannot read the K8S-SAT token file: {exc.strerror}") from None
