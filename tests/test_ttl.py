"""``sskv_mapping._ttl``, the one home of expiry arithmetic.

* ``ttl_to_ms`` as a table, and the exactness the layers above rely on: milliseconds handed down as
  ``timedelta(milliseconds=n)`` come back as ``n``, never ``n + 1`` from a float round trip.
* ``translate_ttl``: each framework's "timeout" convention, in one table (checked against the frameworks' code;
  ``tests/integrations/test_ttl_table.py`` checks it against the installed frameworks themselves).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sskv_mapping import UNSET, ConfigurationError
from sskv_mapping._ttl import MAX_TTL_MS, ttl_to_ms
from sskv_mapping.cache import translate_ttl

# -- ttl_to_ms: a ttl as the store's PX milliseconds --------------------------------------------------------------

ROWS: list[tuple[Any, int | None]] = [
    (None, None),
    (1, 1000),
    (0.0001, 1),  # rounded up: never "expire now" by rounding
    (1.5, 1500),
    (timedelta(seconds=2), 2000),
    (timedelta(microseconds=1500), 2),
    (timedelta(milliseconds=4097), 4097),
    (MAX_TTL_MS / 1000, MAX_TTL_MS),
]
BAD: list[Any] = [0, -1, 0.0, float("nan"), float("inf"), 10**400, timedelta(0), timedelta(seconds=-1), True, "5", []]


@pytest.mark.parametrize(("ttl", "ms"), ROWS, ids=[repr(r[0]) for r in ROWS])
def test_ttl_to_ms(ttl: Any, ms: int | None) -> None:
    assert ttl_to_ms(ttl) == ms


@pytest.mark.parametrize("ttl", BAD, ids=[repr(b)[:20] for b in BAD])
def test_ttl_to_ms_refuses(ttl: Any) -> None:
    with pytest.raises(ConfigurationError):
        ttl_to_ms(ttl)


def test_milliseconds_survive_the_trip_down_exactly() -> None:
    # what the namespace store and the lock pass to client.set; as seconds (n / 1000) some of these came back as n + 1
    drifted = [n for n in range(1, 200_000, 7) if ttl_to_ms(n / 1000) != n]
    assert drifted, "the float path no longer drifts: this test lost its point"
    assert [n for n in drifted if ttl_to_ms(timedelta(milliseconds=n)) != n] == []


# -- translate_ttl: a framework's timeout convention as our ttl ---------------------------------------------------

NEVER = None
NOW = 0.0

# (convention, value, default) -> our ttl: None never expires, 0.0 expires now, > 0 seconds
TABLE = [
    # Django: DEFAULT_TIMEOUT -> TIMEOUT; None never; 0 (and below) expires at once
    ("django", UNSET, 300, 300.0),
    ("django", UNSET, None, NEVER),
    ("django", UNSET, 0, NOW),
    ("django", None, 300, NEVER),
    ("django", 0, 300, NOW),
    ("django", -1, 300, NOW),
    ("django", 30, 300, 30.0),
    ("django", 0.25, 300, 0.25),
    ("django", timedelta(minutes=2), 300, 120.0),
    # Flask-Caching: None -> CACHE_DEFAULT_TIMEOUT; 0 never expires
    ("flask", None, 300, 300.0),
    ("flask", UNSET, 300, 300.0),
    ("flask", None, 0, NEVER),
    ("flask", 0, 300, NEVER),
    ("flask", -5, 300, NOW),
    ("flask", 60, 300, 60.0),
    ("flask", None, None, NEVER),
    # litestar Store.set(expires_in=int | timedelta | None): None and 0 never expire
    ("litestar", None, 300, NEVER),
    ("litestar", 0, 300, NEVER),
    ("litestar", timedelta(0), 300, NEVER),
    ("litestar", timedelta(seconds=90), 300, 90.0),
    ("litestar", -1, 300, NOW),
    ("litestar", UNSET, 45, 45.0),
    # aiocache: ttl=SENTINEL -> the cache's ttl; None and 0 never expire (0 disables expiry in expire())
    ("aiocache", UNSET, None, NEVER),
    ("aiocache", UNSET, 10, 10.0),
    ("aiocache", None, 10, NEVER),
    ("aiocache", 0, 10, NEVER),
    ("aiocache", 1.5, 10, 1.5),
    ("aiocache", -0.5, 10, NOW),
]


@pytest.mark.parametrize(("convention", "value", "default", "expected"), TABLE)
def test_translate_ttl_table(convention: str, value: object, default: object, expected: float | None) -> None:
    result = translate_ttl(value, convention, default)
    assert result == expected
    assert result is None or type(result) is float


def test_every_convention_is_in_the_table() -> None:
    from sskv_mapping._ttl import _CONVENTIONS

    assert {row[0] for row in TABLE} == set(_CONVENTIONS)


@pytest.mark.parametrize(
    ("value", "convention", "default"),
    [
        (10, "redis", 300),  # unknown convention
        (10, None, 300),
        (UNSET, "django", UNSET),  # nothing given and no default
        (True, "django", 300),
        ("300", "flask", 300),
        (float("nan"), "aiocache", 10),
        (float("inf"), "django", 300),
        (10**30, "litestar", 300),  # more than PX can carry
        (UNSET, "django", "300"),  # a bad default is caught too
    ],
)
def test_translate_ttl_refuses_what_it_cannot_mean(value: object, convention: str, default: object) -> None:
    with pytest.raises(ConfigurationError):
        translate_ttl(value, convention, default)
