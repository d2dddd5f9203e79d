"""PendingCalls' deadlines: one loop timer for all calls, armed for the earliest; an answered call's entry never
fires and the heap stays bounded by the calls in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sskv_mapping.client._pending import _SLACK, PendingCalls


class Expired(Exception):
    pass


def _expire(fut: asyncio.Future[Any]) -> None:
    fut.set_exception(Expired())


async def test_each_call_expires_at_its_own_deadline_earliest_first() -> None:
    loop = asyncio.get_running_loop()
    pending = PendingCalls()
    late_corr, late = pending.open(loop)
    early_corr, early = pending.open(loop)
    now = loop.time()
    pending.expire_at(loop, now + 0.3, late_corr, late, _expire)
    pending.expire_at(loop, now + 0.05, early_corr, early, _expire)  # earlier: the timer moves to it
    done, _ = await asyncio.wait([early, late], return_when=asyncio.FIRST_COMPLETED)
    assert done == {early} and isinstance(early.exception(), Expired)
    assert loop.time() >= now + 0.05
    assert not late.done()
    with pytest.raises(Expired):
        await late
    assert loop.time() >= now + 0.3
    for corr, fut in ((late_corr, late), (early_corr, early)):
        pending.close(corr, fut)
    assert len(pending) == 0


async def test_an_answered_call_never_expires_and_answered_entries_do_not_pile_up() -> None:
    loop = asyncio.get_running_loop()
    pending = PendingCalls()
    kept_corr, kept = pending.open(loop)
    pending.expire_at(loop, loop.time() + 0.2, kept_corr, kept, _expire)
    for _ in range(10 * _SLACK):
        corr, fut = pending.open(loop)
        pending.expire_at(loop, loop.time() + 0.1, corr, fut, _expire)
        fut.set_result(None)  # type: ignore[arg-type]  # answered
        pending.close(corr, fut)
    assert len(pending._deadlines) <= 2 * _SLACK + 1  # rebuilt without the answered ones
    with pytest.raises(Expired):
        await kept
    pending.close(kept_corr, kept)
    pending.stop()
    assert pending._timer is None and pending._deadlines == []
