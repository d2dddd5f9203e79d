"""``d.changes()`` under a writer process, on mosquitto + the emulator process: every change once and in order per
key; across a broker restart, in order and ending on each key's latest value (what happened while the broker was
down is reported as where it led, by a re-read: ``synthetic``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreDict, Change
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping._listing import ListingMode
from sskv_mapping.testing import FaultProxy
from tests._support.procs import EmulatorProcess

pytestmark = pytest.mark.parametrize("listing", ["scan", "index"])

WRITER = Path(__file__).with_name("_change_writer.py")
ROOT = Path(__file__).resolve().parents[2]
KEYS = ["a", "b", "c"]


class Writer:
    """The writer process; its JSON lines are read on the test's loop."""

    def __init__(self, broker: MosquittoBroker, namespace: str, listing: ListingMode, count: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        argv = [sys.executable, str(WRITER), broker.host, str(broker.port), namespace, listing, str(count), *KEYS]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)

    async def line(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), timeout)
        if not raw:
            raise RuntimeError(
                f"the writer exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
            )
        line: dict[str, Any] = json.loads(raw)
        return line

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def _last_of(count: int) -> dict[str, int]:
    return {k: max(i for i in range(1, count + 1) if KEYS[i % len(KEYS)] == k) for k in KEYS}


async def _collect(stream: Any, until: dict[str, int], timeout: float) -> dict[str, list[Change[int]]]:
    seen: dict[str, list[Change[int]]] = {k: [] for k in KEYS}
    async with asyncio.timeout(timeout):
        while any(not seen[k] or seen[k][-1].value != v for k, v in until.items()):
            change = await stream.next()
            seen[change.key].append(change)
    return seen


def _written(change: Change[int]) -> int:
    """The value a change carries: the writer only sets, so a change without one is a failure."""
    assert change.value is not None, change
    return change.value


def _in_order_once(seen: dict[str, list[Change[int]]]) -> None:
    for key, changes in seen.items():
        # a value may come twice, as two changes: a write failed by a lost session may have been applied, and the
        # writer writes it again (a new version); each change (version) comes once, in order, never back
        values = [_written(c) for c in changes]
        assert values == sorted(values), f"{key}: not in order: {values}"
        versions = [c.version for c in changes if c.version is not None]
        assert versions == sorted(set(versions)), f"{key}: a change twice, or versions going back: {versions}"


async def test_every_change_of_a_writer_process_once_in_order(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess, namespace: str, listing: ListingMode
) -> None:
    count = 600
    url = f"mqtt://{fresh_mosquitto.host}:{fresh_mosquitto.port}"
    async with await AsyncStateStoreDict.connect(url, namespace=namespace, listing=listing) as d:
        await d.update(dict.fromkeys(KEYS, 0))
        async with d.changes(maxsize=10 * count, scan_interval=0.05) as stream:
            writer = Writer(fresh_mosquitto, namespace, listing, count)
            try:
                seen = await _collect(stream, _last_of(count), 60)
                assert (await writer.line(30))["acked"] == 25
            finally:
                writer.close()
            _in_order_once(seen)
            every = sorted(_written(c) for changes in seen.values() for c in changes)
            assert every == list(range(1, count + 1)), "a change was lost"
            assert stream.dropped == 0 and not any(c.synthetic for cs in seen.values() for c in cs)


@pytest.mark.parametrize("away", ["broker-restart", "client-cut"])
async def test_changes_missed_while_away_end_on_the_latest(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess, namespace: str, listing: ListingMode, away: str
) -> None:
    """Mid-run, the broker restarts (every connection drops, the writer's too), or only this client's link is cut
    (the writer goes on writing): in order, and what was missed meanwhile comes as each key's latest value by a
    re-read after the reconnect (``synthetic``), never as an older one."""
    count = 900
    async with contextlib.AsyncExitStack() as stack:
        relay: FaultProxy | None = None
        url = f"mqtt://{fresh_mosquitto.host}:{fresh_mosquitto.port}"
        if away == "client-cut":
            relay = await stack.enter_async_context(FaultProxy((fresh_mosquitto.host, fresh_mosquitto.port)))
            url = relay.url
        d = await stack.enter_async_context(
            await AsyncStateStoreDict.connect(url, namespace=namespace, listing=listing)
        )
        await d.update(dict.fromkeys(KEYS, 0))
        async with d.changes(maxsize=10 * count, scan_interval=0.05) as stream:
            writer = Writer(fresh_mosquitto, namespace, listing, count)
            try:
                while (await writer.line(60)).get("acked", 0) < 200:
                    pass
                if relay is None:
                    fresh_mosquitto.kill()
                    fresh_mosquitto.start()
                else:
                    relay.cut(refuse_for=0.5)
                seen = await _collect(stream, _last_of(count), 90)
                while "done" not in await writer.line(60):
                    pass
            finally:
                writer.close()
            _in_order_once(seen)
            assert {k: seen[k][-1].value for k in KEYS} == _last_of(count)
            got = sum(len(c) for c in seen.values())
            synthetic = sum(c.synthetic for cs in seen.values() for c in cs)
            if relay is not None:
                assert got < count, "the cut missed nothing: the test did not test"
            print(f"\n{listing}: {got} of {count} changes reported across the {away}, {synthetic} by a re-read")
