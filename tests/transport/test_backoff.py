"""The one backoff (``sskv_mapping._transport.backoff``), as a table of the delays it hands out."""

from __future__ import annotations

import pytest

from sskv_mapping._transport.backoff import Backoff
from sskv_mapping.errors import ConfigurationError


@pytest.mark.parametrize(
    ("initial", "cap", "jitter", "fraction", "expected"),
    [
        (0.05, 2.0, False, 0.0, [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]),
        (0.01, 0.2, False, 0.0, [0.01, 0.02, 0.04, 0.08, 0.16, 0.2]),
        (0.1, 0.1, False, 0.0, [0.1, 0.1]),
        (0.05, 2.0, True, 0.0, [0.0, 0.0, 0.0, 0.0]),  # full jitter draws from [0, d]: the low end
        (0.05, 2.0, True, 0.5, [0.025, 0.05, 0.1, 0.2]),  # ... the middle
        (0.05, 2.0, True, 1.0, [0.05, 0.1, 0.2, 0.4]),  # ... and the high end
    ],
)
def test_delays(initial: float, cap: float, jitter: bool, fraction: float, expected: list[float]) -> None:
    backoff = Backoff(initial, cap, jitter=jitter, random_fraction=lambda: fraction)
    assert [backoff.next() for _ in expected] == pytest.approx(expected)


def test_reset_starts_again() -> None:
    backoff = Backoff(0.05, 2.0, jitter=False)
    for _ in range(5):
        backoff.next()
    assert backoff.current == pytest.approx(1.6)
    backoff.reset()
    assert backoff.next() == pytest.approx(0.05)


@pytest.mark.parametrize(("initial", "cap"), [(0, 1), (-1, 1), (2, 1)])
def test_bad_bounds(initial: float, cap: float) -> None:
    with pytest.raises(ConfigurationError):
        Backoff(initial, cap)
