"""A client's ``clock=`` is ``wall_clock_ms=`` now (issue 29's renaming step: the faces' ``monotonic=`` is another
clock), the old name kept one release: it warns, at its caller's line, and still sets the wall clock of the client's
hybrid logical clock. Delete this file with the name."""

from __future__ import annotations

import warnings

import pytest

from sskv_mapping import AsyncStateStoreClient, StateStoreClient


def test_clock_is_wall_clock_ms() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name warns nothing
        new = AsyncStateStoreClient(wall_clock_ms=lambda: 1_234)
    with pytest.warns(DeprecationWarning, match="wall_clock_ms=") as record:
        old = AsyncStateStoreClient(clock=lambda: 1_234)
    assert [w.filename for w in record] == [__file__]
    assert new.hlc.now_ms() == old.hlc.now_ms() == 1_234


def test_the_blocking_client_warns_once_at_the_callers_line() -> None:
    with pytest.warns(DeprecationWarning, match="wall_clock_ms=") as record:
        old = StateStoreClient(clock=lambda: 5_678)
    assert [w.filename for w in record] == [__file__]  # not again from the async twin
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = StateStoreClient(wall_clock_ms=lambda: 5_678)
    assert old.async_client.hlc.now_ms() == new.async_client.hlc.now_ms() == 5_678
