"""``ttl_to_ms`` (``sskv_mapping._ttl``) as a table, and the exactness the layers above rely on: milliseconds
handed down as ``timedelta(milliseconds=n)`` come back as ``n``, never ``n + 1`` from a float round trip."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sskv_mapping._ttl import MAX_TTL_MS, ttl_to_ms
from sskv_mapping.errors import ConfigurationError

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
    # what _store.write and the lock pass to client.set; as seconds (n / 1000) some of these came back as n + 1
    drifted = [n for n in range(1, 200_000, 7) if ttl_to_ms(n / 1000) != n]
    assert drifted, "the float path no longer drifts: this test lost its point"
    assert [n for n in drifted if ttl_to_ms(timedelta(milliseconds=n)) != n] == []
