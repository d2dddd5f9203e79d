"""The one bounded fan-out (``sskv_mapping._fanout.gather_bounded``): results in order, never more than ``limit``
in flight, the first failure raised as itself and the rest cancelled."""

from __future__ import annotations

import asyncio

import pytest

from sskv_mapping._fanout import gather_bounded


@pytest.mark.parametrize(("n", "limit"), [(0, 1), (1, 1), (10, 1), (10, 3), (100, 64), (5, 64)])
async def test_order_and_bound(n: int, limit: int) -> None:
    running = 0
    peak = 0
    gate = asyncio.Event()

    async def one(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running >= min(n, limit):
            gate.set()
        await gate.wait()
        running -= 1
        return i * i

    assert await gather_bounded((one(i) for i in range(n)), limit) == [i * i for i in range(n)]
    assert peak == min(n, limit)


async def test_first_failure_is_raised_and_the_rest_cancelled() -> None:
    cancelled = 0
    never = asyncio.Event()

    async def ok() -> int:
        nonlocal cancelled
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return 1

    async def bad() -> int:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await gather_bounded([ok(), ok(), bad()], 8)
    assert cancelled == 2
