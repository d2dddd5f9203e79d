"""Users' tests that move or freeze the wall clock (time-machine, freezegun) keep working against both fixtures
(issue 37): the client stamps its requests with a wall clock those libraries do not patch (Linux's
CLOCK_REALTIME_COARSE: docs/testing.md, "Time travel"), so a request is never "too far in the future" for the
emulator process, which runs on the real clock, and KEYNOTIFY registrations go through."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import freezegun
import pytest
import time_machine

from sskv_mapping import AsyncStateStoreDict, StateStoreCache, StateStoreDict
from sskv_mapping._protocol.hlc import system_clock_ms
from sskv_mapping.testing import InProcessStore

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the unpatched wall clock is Linux's (docs/testing.md)"
)

AN_HOUR = dt.timedelta(hours=1)


def _an_hour_ahead() -> AbstractContextManager[Any]:
    return time_machine.travel(dt.datetime.now(dt.UTC) + AN_HOUR, tick=True)


def _frozen_an_hour_ahead() -> AbstractContextManager[Any]:
    return freezegun.freeze_time(dt.datetime.now(dt.UTC) + AN_HOUR)


TRAVELS: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "time-machine": _an_hour_ahead,
    "freezegun": _frozen_an_hour_ahead,
}


@pytest.fixture(params=TRAVELS)
def travel(request: pytest.FixtureRequest) -> Iterator[None]:
    real_ms = system_clock_ms()
    with TRAVELS[request.param]():
        assert time.time() - real_ms / 1000 > 3500  # the test process's clock moved an hour ahead
        assert abs(system_clock_ms() - real_ms) < 60_000  # the client's did not
        yield


def _real_monotonic() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)  # freezegun freezes time.monotonic; this it leaves alone


def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = _real_monotonic() + timeout
    while not predicate():
        assert _real_monotonic() < deadline, f"still false after {timeout} s"
        time.sleep(0.005)  # time.sleep is real under both libraries


def _exercise(d: StateStoreDict[Any], other_d: StateStoreDict[Any], c: StateStoreCache[Any]) -> None:
    d["k"] = {"n": 1}
    assert d["k"] == {"n": 1}  # read: watched (KEYNOTIFY) and cached
    other_d["k"] = {"n": 2}
    _until(lambda: d["k"] == {"n": 2})  # another client's write reaches the local cache through KEYNOTIFY
    c.set("page", "<html>", ttl=60)
    assert c.get("page") == "<html>"
    assert c.add("once", 1) is True and c.add("once", 2) is False


def test_the_live_store_serves_a_test_that_moved_time(statestore_url: str, travel: None) -> None:
    namespace = f"travel-{uuid.uuid4().hex[:8]}"
    with (
        StateStoreDict.connect(statestore_url, namespace=namespace, local_cache_size=100) as d,
        StateStoreDict.connect(statestore_url, namespace=namespace, local_cache_size=0) as other,
        StateStoreCache.connect(statestore_url, namespace=namespace + "-c", local_cache_size=100) as c,
    ):
        _exercise(d, other, c)
        entry = d.entry("k")
        assert entry.version is not None
        assert abs(entry.version.wall_ms - system_clock_ms()) < 60_000  # the store's clock, not the test's


def test_the_in_process_store_serves_a_test_that_moved_time(statestore: InProcessStore, travel: None) -> None:
    d = statestore.dict(local_cache_size=100)
    other = statestore.dict(local_cache_size=0)
    _exercise(d, other, statestore.cache())


async def test_an_async_dict_on_the_live_store_under_time_travel(statestore_url: str, travel: None) -> None:
    namespace = f"travel-{uuid.uuid4().hex[:8]}"
    async with (
        AsyncStateStoreDict.connect(statestore_url, namespace=namespace, local_cache_size=100) as d,
        AsyncStateStoreDict.connect(statestore_url, namespace=namespace, local_cache_size=0) as other,
    ):
        await d.set("k", 1)
        assert await d.get("k") == 1  # read: watched (KEYNOTIFY) and cached
        await other.set("k", 2)
        deadline = _real_monotonic() + 10
        while await d.get("k") != 2:  # the notification reaches d's local cache
            assert _real_monotonic() < deadline, "notification lost"
            await asyncio.sleep(0)  # a yield, no timer: freezegun stops the loop's clock (docs/testing.md)
