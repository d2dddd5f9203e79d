"""``sskv_mapping._ttl``, the one home of expiry arithmetic.

* ``ttl_to_ms`` as a table, and the exactness the layers above rely on: milliseconds handed down as
  ``timedelta(milliseconds=n)`` come back as ``n``, never ``n + 1`` from a float round trip.
* ``translate_ttl``: each framework's "timeout" convention, in one table (checked against the frameworks' code;
  ``tests/integrations/test_ttl_table.py`` checks the same table against the installed frameworks themselves).
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

# (convention, value (UNSET: the framework's argument was not given), the framework's configured default) -> our
# ttl: None never expires, 0.0 expires now, > 0 seconds. tests/integrations/test_ttl_table.py checks every row
# against the framework itself.
TABLE: list[tuple[str, Any, Any, float | None]] = [
    # Django: not given -> TIMEOUT; None never; 0 and below expire at once
    ("django", UNSET, 300, 300.0),
    ("django", UNSET, None, NEVER),
    ("django", UNSET, 0, NOW),
    ("django", None, 300, NEVER),
    ("django", 0, 300, NOW),
    ("django", -1, 300, NOW),
    ("django", 30, 300, 30.0),
    ("django", 2.5, 300, 2.5),
    ("django", 0.25, 300, 0.25),
    ("django", timedelta(minutes=2), 300, 120.0),
    # Flask-Caching (cachelib): None and not given -> CACHE_DEFAULT_TIMEOUT; 0 never; below 0 at once
    ("flask", UNSET, 300, 300.0),
    ("flask", None, 300, 300.0),
    ("flask", None, 0, NEVER),
    ("flask", UNSET, 0, NEVER),
    ("flask", None, None, NEVER),
    ("flask", 0, 300, NEVER),
    ("flask", -5, 300, NOW),
    ("flask", 60, 300, 60.0),
    ("flask", timedelta(minutes=2), 300, 120.0),
    ("flask", None, timedelta(seconds=45), 45.0),
    # Litestar Store.set(expires_in=int | timedelta | None): None and 0 never; below 0 at once; a default is
    # used only when nothing is given
    ("litestar", None, UNSET, NEVER),
    ("litestar", None, 300, NEVER),
    ("litestar", 0, UNSET, NEVER),
    ("litestar", timedelta(0), UNSET, NEVER),
    ("litestar", -1, UNSET, NOW),
    ("litestar", 10, UNSET, 10.0),
    ("litestar", timedelta(seconds=90), UNSET, 90.0),
    ("litestar", timedelta(seconds=90), 300, 90.0),
    ("litestar", UNSET, 45, 45.0),
    # aiocache: not given (SENTINEL) -> the cache's ttl; None and 0 never (0 disables expiry); below 0 at once
    ("aiocache", UNSET, 60, 60.0),
    ("aiocache", UNSET, None, NEVER),
    ("aiocache", None, 60, NEVER),
    ("aiocache", 0, 60, NEVER),
    ("aiocache", -1, 60, NOW),
    ("aiocache", -0.5, 60, NOW),
    ("aiocache", 0.5, 60, 0.5),
    ("aiocache", 1.5, 60, 1.5),
    ("aiocache", 10, None, 10.0),
]
CONVENTIONS = sorted({row[0] for row in TABLE})


def row_id(row: tuple[str, Any, Any, float | None]) -> str:
    convention, value, default, _ = row
    return f"{convention}-{value!r}-default={default!r}"


@pytest.mark.parametrize("row", TABLE, ids=row_id)
def test_translate_ttl_table(row: tuple[str, Any, Any, float | None]) -> None:
    convention, value, default, expected = row
    result = translate_ttl(value, convention, default)
    assert result == expected
    assert result is None or type(result) is float


def test_every_convention_is_in_the_table() -> None:
    from sskv_mapping._ttl import _CONVENTIONS

    assert set(CONVENTIONS) == set(_CONVENTIONS)


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("value", [True, "60", float("nan"), float("inf"), [60]])
def test_values_that_are_not_a_timeout_are_refused(convention: str, value: Any) -> None:
    with pytest.raises(ConfigurationError):
        translate_ttl(value, convention, 300)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_not_given_without_a_default_is_refused(convention: str) -> None:
    with pytest.raises(ConfigurationError, match="default"):
        translate_ttl(UNSET, convention)


@pytest.mark.parametrize(
    ("value", "convention", "default"),
    [
        (10, None, 300),  # no convention
        (10**30, "litestar", 300),  # more than PX can carry
        (UNSET, "django", "300"),  # a bad default is caught too
    ],
)
def test_translate_ttl_refuses_what_it_cannot_mean(value: object, convention: str, default: object) -> None:
    with pytest.raises(ConfigurationError):
        translate_ttl(value, convention, default)


def test_an_unknown_convention_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="convention"):
        translate_ttl(10, "redis", 300)
