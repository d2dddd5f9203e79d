"""The two newest fan-outs on a mosquitto with its default queue limits (1,000 queued per session beyond 20 in
flight): a change stream starting on a namespace of 3,000 keys (its reads and watches, 64 in flight, both listing
modes) and Django's ``delete_pattern`` over 3,000 keys (deletes bounded by the cache's ``max_fanout``). The
broker's ``$SYS`` dropped counter stays 0 and its log names no dropped message; every key is accounted for.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest

from sskv_mapping import AsyncStateStoreClient, AsyncStateStoreDict
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping._listing import ListingMode
from tests._support.broker_stats import FAST_SYS, dropped_messages, log_reports_drops
from tests._support.procs import start_emulator

KEYS = 3_000
pytestmark = pytest.mark.broker


@pytest.mark.parametrize("listing", ["scan", "index"])
async def test_a_change_stream_starting_on_3000_keys_drops_nothing(listing: ListingMode) -> None:
    with MosquittoBroker(extra_config=[FAST_SYS]) as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with (
                AsyncStateStoreClient(broker.host, broker.port) as mine,
                AsyncStateStoreClient(broker.host, broker.port) as theirs,
            ):
                writer = await AsyncStateStoreDict[int](theirs, namespace="feed", listing=listing).open()
                for start in range(0, KEYS, 500):
                    await writer.update({f"k{i}": 0 for i in range(start, start + 500)})
                reader = await AsyncStateStoreDict[int](mine, namespace="feed", listing=listing).open()
                async with reader.changes(scan_interval=0.2) as changes:  # started: every listed key watched
                    await writer.update({f"k{i}": 1 for i in range(KEYS)})
                    seen: set[str] = set()
                    while len(seen) < KEYS:
                        change = await changes.next(timeout=30)
                        assert change.value == 1
                        seen.add(change.key)
                    assert changes.dropped == 0
                await reader.close()
                await writer.close()
            assert await dropped_messages(broker) == 0
            assert not log_reports_drops(broker)
        finally:
            with contextlib.suppress(Exception):
                emulator.stop()


def test_delete_pattern_over_3000_keys_drops_nothing() -> None:
    pytest.importorskip("django")
    from django.conf import settings

    if not settings.configured:
        settings.configure(SECRET_KEY="sskv-tests", USE_TZ=True)
    from sskv_mapping.integrations.django import StateStoreCache, close_all

    with MosquittoBroker(extra_config=[FAST_SYS]) as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            location = f"mqtt://{broker.host}:{broker.port}"
            cache = StateStoreCache(location, {"OPTIONS": {"namespace": f"dp{uuid.uuid4().hex[:8]}"}})
            try:
                for start in range(0, KEYS, 500):
                    assert cache.set_many({f"bulk:{i}": i for i in range(start, start + 500)}, 600) == []
                cache.set("other", "kept", 600)
                steps: list[tuple[int, int]] = []
                deleted = cache.delete_pattern("bulk:*", progress=lambda s, d: steps.append((s, d)))
                assert deleted == KEYS and steps[-1] == (KEYS, KEYS)
                assert cache.keys("*") == ["other"]
            finally:
                close_all()
            assert asyncio.run(dropped_messages(broker)) == 0
            assert not log_reports_drops(broker)
        finally:
            with contextlib.suppress(Exception):
                emulator.stop()
