"""``clock=`` on the lock and the election is ``monotonic=`` now (issue 29's renaming step; a client's clock is
``wall_clock_ms=``), the old name kept one release: it warns, at its caller's line, and still sets the clock the
lease is judged by. Delete this file with the name."""

from __future__ import annotations

import uuid
import warnings

import pytest

from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.election import AsyncLeaderElection, LeaderElection
from sskv_mapping.lock import AsyncLeasedLock, LeasedLock
from tests._support.store_backend import StoreBackend


def _name() -> str:
    return f"renamed-{uuid.uuid4().hex[:12]}"


async def test_the_lock_takes_monotonic_and_warns_for_clock(client: AsyncStateStoreClient) -> None:
    now = [100.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name warns nothing
        new = AsyncLeasedLock(client, _name(), lease=1, monotonic=lambda: now[0])
    with pytest.warns(DeprecationWarning, match="monotonic=") as record:
        old = AsyncLeasedLock(client, _name(), lease=1, clock=lambda: now[0])
    assert [w.filename for w in record] == [__file__]
    for lock in (new, old):
        await lock.try_acquire()
        assert lock.lease_deadline == 101.0  # judged by the injected clock
    now[0] += 1.5
    assert not new.held and not old.held
    await new.release()
    await old.release()


async def test_the_election_takes_monotonic_and_warns_for_clock(client: AsyncStateStoreClient) -> None:
    now = [0.0]
    with pytest.warns(DeprecationWarning, match="monotonic=") as record:
        old = AsyncLeaderElection(client, _name(), term=1, auto_renew=False, clock=lambda: now[0])
    assert [w.filename for w in record] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = AsyncLeaderElection(client, _name(), term=1, auto_renew=False, monotonic=lambda: now[0])
    for election in (old, new):
        await election.campaign(timeout=10)
        assert election.is_leader
    now[0] += 1.0  # the term is over by the injected clock
    assert not old.is_leader and not new.is_leader
    await old.resign()
    await new.resign()


def test_the_blocking_twins_warn_once_at_the_callers_line(store_backend: StoreBackend) -> None:
    client = store_backend.client()
    now = [5.0]
    with pytest.warns(DeprecationWarning, match="monotonic=") as record:
        lock = LeasedLock(client, _name(), lease=1, clock=lambda: now[0])
        election = LeaderElection(client, _name(), term=1, auto_renew=False, clock=lambda: now[0])
    assert [w.filename for w in record] == [__file__, __file__]  # not again from the async twins
    assert lock.try_acquire() is not None
    assert election.try_campaign() is not None
    assert lock.async_lock.lease_deadline == 6.0
    assert lock.held and election.is_leader
    now[0] += 1.0
    assert not lock.held and not election.is_leader
    lock.release()
    election.resign()
