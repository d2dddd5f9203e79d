"""What a ``ttl`` means: PX milliseconds for the client, the cache's convention, and every framework's.

:func:`translate_ttl` turns each framework's "timeout" into the cache's convention (docs/guide/cache.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Literal

from ._unset import UNSET, UnsetType
from .errors import ConfigurationError

__all__ = [
    "MAX_TTL_MS",
    "TtlArg",
    "TtlConvention",
    "TtlLike",
    "check_ttl",
    "expire_now",
    "translate_ttl",
    "ttl_to_ms",
]

#: PX is milliseconds as a signed 64-bit integer on the service; refuse what cannot be meant.
MAX_TTL_MS = 100 * 365 * 24 * 3600 * 1000

_ONE_MS = timedelta(milliseconds=1)

#: What the client takes as a ``ttl``: seconds, a timedelta, or ``None`` (never expires).
TtlLike = float | int | timedelta | None

#: What callers may pass as a ``ttl``: seconds, a timedelta, ``None`` (never expires) or ``UNSET`` (default).
TtlArg = float | int | timedelta | None | UnsetType

# -- TTLs ---------------------------------------------------------------------------------------------------


def ttl_to_ms(ttl: TtlLike) -> int | None:
    """Seconds (or a timedelta) -> PX milliseconds, rounded up; ``None`` -> never expires.

    A timedelta is converted exactly (integer arithmetic): the layers above pass ``timedelta(milliseconds=n)``
    when they already hold milliseconds, and get ``n`` back, never ``n + 1`` from a float round trip.
    """
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        if ttl <= timedelta(0):
            raise ConfigurationError(f"ttl must be positive (got {ttl!r}); use None for 'never expires'")
        whole, part = divmod(ttl, _ONE_MS)  # exact: an int and a timedelta
        ms = whole + (1 if part else 0)  # rounded up
        if ms > MAX_TTL_MS:
            raise ConfigurationError(f"ttl {ttl!r} is absurdly large (more than 100 years)")
        return ms
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise ConfigurationError(f"ttl must be seconds (int/float), a timedelta or None, not {type(ttl).__name__}")
    try:
        seconds = float(ttl)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if math.isnan(seconds) or seconds <= 0:
        raise ConfigurationError(f"ttl must be positive (got {ttl!r}); use None for 'never expires'")
    if seconds * 1000 > MAX_TTL_MS:  # also inf, which math.ceil() cannot take
        raise ConfigurationError(f"ttl {ttl!r} is absurdly large (more than 100 years)")
    return math.ceil(seconds * 1000)


def _seconds(value: object, what: str) -> float:
    """A finite number of seconds from an int, float or timedelta; anything else is a ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise ConfigurationError(f"{what} must be seconds (int/float), a timedelta or None, not {type(value).__name__}")
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ConfigurationError(f"{what} must be a finite number of seconds (None: never expires), not {value!r}")
    return seconds


def _positive(seconds: float, what: str) -> float:
    try:
        ttl_to_ms(seconds)  # refuses what PX cannot carry (more than 100 years)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{what}: {exc}") from None
    return seconds


def check_ttl(ttl: object, what: str = "ttl") -> float | None:
    """Our own convention: ``None`` never expires, > 0 seconds, <= 0 expire now (returned as ``0.0``)."""
    if ttl is None:
        return None
    seconds = _seconds(ttl, what)
    return 0.0 if seconds <= 0 else _positive(seconds, what)


def expire_now(seconds: float | None) -> bool:
    return seconds is not None and seconds <= 0


#: The frameworks :func:`translate_ttl` knows.
TtlConvention = Literal["django", "flask", "litestar", "aiocache"]


@dataclass(frozen=True, slots=True)
class _Convention:
    none: Literal["never", "default"]  # what ``None`` means
    zero: Literal["never", "now"]  # what ``0`` means


# Checked against the frameworks' own code (Django 5.2 BaseCache.get_backend_timeout, cachelib/Flask-Caching
# 2.x BaseCache._normalize_timeout, litestar 2.x StorageObject.new, aiocache 0.12 BaseCache._get_ttl and the
# memory backend). A negative value means "already expired" wherever the framework gives it a meaning at all
# (Django, Flask's SimpleCache, litestar's MemoryStore, aiocache's memory backend), so it is "now" everywhere.
_CONVENTIONS: Final[dict[str, _Convention]] = {
    "django": _Convention(none="never", zero="now"),  # timeout=DEFAULT_TIMEOUT -> default_timeout
    "flask": _Convention(none="default", zero="never"),  # timeout=None -> CACHE_DEFAULT_TIMEOUT
    "litestar": _Convention(none="never", zero="never"),  # expires_in: int | timedelta | None
    "aiocache": _Convention(none="never", zero="never"),  # ttl=SENTINEL -> the cache's ttl
}


def translate_ttl(value: object, convention: str, default: object = UNSET) -> float | None:
    """Turn a framework's "timeout" argument into a ``ttl`` for :class:`AsyncStateStoreCache`.

    Returns ``None`` (never expires), ``0.0`` (expire now: ``set`` deletes the key) or positive seconds.
    ``value`` is :data:`~sskv_mapping.UNSET` when the framework's argument was not given (an adapter maps
    Django's ``DEFAULT_TIMEOUT`` and aiocache's ``SENTINEL`` to it); ``default`` is the framework's
    configured default timeout, which follows the same convention.

    ============  =========  =========  ===========  ==========  ===========
    convention    not given  ``None``   ``0``        ``< 0``     ``> 0``
    ============  =========  =========  ===========  ==========  ===========
    ``django``    default    never      expire now   expire now  seconds
    ``flask``     default    default    never        expire now  seconds
    ``litestar``  default    never      never        expire now  seconds
    ``aiocache``  default    never      never        expire now  seconds
    ============  =========  =========  ===========  ==========  ===========

    A ``timedelta`` is accepted wherever a number is. Booleans, strings, NaN and infinities raise
    :class:`ConfigurationError`.

    Example:
        >>> translate_ttl(0, "django", 300), translate_ttl(0, "flask", 300)
        (0.0, None)
        >>> translate_ttl(UNSET, "django", 300), translate_ttl(None, "flask", 60)
        (300.0, 60.0)
    """
    rules = _CONVENTIONS.get(convention) if isinstance(convention, str) else None
    if rules is None:
        raise ConfigurationError(f"unknown TTL convention {convention!r}; known: {', '.join(sorted(_CONVENTIONS))}")
    if value is UNSET or (value is None and rules.none == "default"):
        if default is UNSET:
            raise ConfigurationError(f"no timeout was given and no default for the {convention!r} convention")
        value = default
    if value is None:  # also a default of None under Flask's rules: there is nothing else it could mean
        return None
    seconds = _seconds(value, f"a {convention} timeout")
    if seconds == 0:
        return None if rules.zero == "never" else 0.0
    if seconds < 0:
        return 0.0
    return _positive(seconds, f"a {convention} timeout")
