"""translate_ttl: each framework's "timeout" convention, in one table (checked against the frameworks' code)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sskv_mapping import UNSET, ConfigurationError
from sskv_mapping.cache import translate_ttl

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
