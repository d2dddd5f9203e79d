"""``LocalCache(clock=)`` is ``monotonic=`` now (issue 29's renaming step), the old name kept one release: it warns,
at its caller's line, and still sets the clock. Delete this file with the name."""

from __future__ import annotations

import warnings

import pytest

from sskv_mapping import ConfigurationError, LocalCache


def test_clock_is_monotonic() -> None:
    now = [3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name warns nothing
        new: LocalCache[str] = LocalCache(maxsize=4, ttl=5.0, monotonic=lambda: now[0])
    with pytest.warns(DeprecationWarning, match="monotonic=") as record:
        old: LocalCache[str] = LocalCache(maxsize=4, ttl=5.0, clock=lambda: now[0])
    assert [w.filename for w in record] == [__file__]
    for cache in (new, old):
        assert cache.deadline(2.0) == 5.0
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError, match="monotonic"):
        LocalCache(maxsize=4, clock=3.0)  # type: ignore[arg-type]  # checked as the new name is
