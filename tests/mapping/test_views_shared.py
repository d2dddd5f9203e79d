"""Views that tolerate a shared store (issue 27, point 4): ``items()``, ``values()`` and iteration of the dict and its
async twin skip keys another process deletes meanwhile -- in both listing modes -- instead of raising ``KeyError``
(the ``MutableMapping`` views listed the keys, then read each with ``d[key]``).

Sixteen threads (or tasks) iterate while another process deletes every other key, in batches between which every
reader goes on iterating; then every view shows exactly the survivors. Over a real mosquitto and the emulator process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreClient, AsyncStateStoreDict, StateStoreClient, StateStoreDict
from sskv_mapping.mapping._listing import ListingMode
from tests._support.waiting import eventually, eventually_sync

N = 200
READERS = 16
DEADLINE = 120.0

BATCHES = 5

#: the other process: connects, says "ready"; then for each line read deletes the next batch of even keys and says
#: "deleted"
DELETER = """
import sys
from sskv_mapping import StateStoreDict
host, port, namespace, listing, n, batches = sys.argv[1:7]
evens = [f"k{i}" for i in range(0, int(n), 2)]
size = -(-len(evens) // int(batches))
with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace, listing=listing) as d:
    print("ready", flush=True)
    for b in range(int(batches)):
        sys.stdin.readline()
        for key in evens[b * size:(b + 1) * size]:
            del d[key]
        print("deleted", flush=True)
"""


def expected(key: str) -> int:
    return int(key[1:])


class Deleter:
    """The other process, driven over its stdin/stdout."""

    def __init__(self, host: str, port: int, namespace: str, listing: ListingMode) -> None:
        argv = [sys.executable, "-c", DELETER, host, str(port), namespace, listing, str(N), str(BATCHES)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._out, self._in = self.proc.stdout, self.proc.stdin
        assert self._line() == "ready"

    def _line(self) -> str:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._out.readline().strip()), daemon=True)
        reader.start()
        reader.join(DEADLINE)
        assert line, f"the deleter said nothing in {DEADLINE} s"
        return line[0]

    def delete_batch(self) -> tuple[float, float]:
        """One batch deleted by the other process: its time window on this process's monotonic clock."""
        began = time.monotonic()
        self._in.write("go\n")
        self._in.flush()
        assert self._line() == "deleted"
        return began, time.monotonic()

    def wait_done(self) -> None:
        assert self.proc.wait(DEADLINE) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE)


@pytest.mark.parametrize("listing", ["index", "scan"])
def test_sixteen_threads_iterate_while_another_process_deletes_half(
    broker_address: tuple[str, int], listing: ListingMode
) -> None:
    host, port = broker_address
    namespace = f"v{uuid.uuid4().hex[:10]}"
    survivors = {f"k{i}": i for i in range(1, N, 2)}
    with StateStoreClient(host, port) as client:
        d: StateStoreDict[Any] = StateStoreDict(client, namespace=namespace, listing=listing)
        d.update({f"k{i}": i for i in range(N)})
        deleter = Deleter(host, port, namespace, listing)
        try:
            errors: list[BaseException] = []
            rounds: list[tuple[float, float]] = []  # each iteration's time window
            stop = threading.Event()
            started = threading.Barrier(READERS + 1)

            def iterate() -> None:
                started.wait(DEADLINE)
                while not stop.is_set():
                    began = time.monotonic()
                    try:
                        for key, value in d.items():
                            assert value == expected(key), (key, value)
                        assert set(d.values()) <= set(range(N))
                        assert {key for key in d} <= {f"k{i}" for i in range(N)}
                        assert N - 1 in d.values()  # a survivor: membership reads the values too
                    except BaseException as exc:
                        errors.append(exc)
                        return
                    rounds.append((began, time.monotonic()))

            readers = [threading.Thread(target=iterate, daemon=True) for _ in range(READERS)]
            for reader in readers:
                reader.start()
            started.wait(DEADLINE)
            windows = []
            for _ in range(BATCHES):
                done = len(rounds)

                # the readers go on iterating between batches (one that failed stops the wait: reported below)
                def read_on(done: int = done) -> bool:
                    return len(rounds) >= done + READERS or bool(errors)

                eventually_sync(read_on, timeout=DEADLINE)
                windows.append(deleter.delete_batch())
            deleter.wait_done()
            stop.set()
            for reader in readers:
                reader.join(DEADLINE)
            assert not [r for r in readers if r.is_alive()]
            assert errors == [], errors[:3]
            # iterations were in progress while the other process deleted (else this test would prove nothing)
            assert any(b0 < r1 and r0 < b1 for b0, b1 in windows for r0, r1 in rounds)
        finally:
            deleter.kill()
        # once the deletions are done, every view shows exactly the survivors
        assert dict(d.items()) == survivors
        assert sorted(d.values()) == sorted(survivors.values())
        assert sorted(d) == sorted(survivors)
        assert d.copy() == survivors and len(d) == len(survivors)
        assert ("k0", 0) not in d.items() and ("k1", 1) in d.items()
        assert 0 not in d.values() and 1 in d.values()


@pytest.mark.parametrize("listing", ["index", "scan"])
async def test_sixteen_tasks_iterate_the_async_dict_while_another_process_deletes_half(
    broker_address: tuple[str, int], listing: ListingMode
) -> None:
    host, port = broker_address
    namespace = f"v{uuid.uuid4().hex[:10]}"
    survivors = {f"k{i}": i for i in range(1, N, 2)}
    async with (
        AsyncStateStoreClient(host, port) as client,
        AsyncStateStoreDict[int](client, namespace=namespace, listing=listing) as d,
    ):
        await d.update({f"k{i}": i for i in range(N)})
        deleter = await asyncio.to_thread(Deleter, host, port, namespace, listing)
        try:
            stop = asyncio.Event()
            rounds: list[tuple[float, float]] = []

            async def iterate() -> None:
                while not stop.is_set():
                    began = time.monotonic()
                    for key, value in await d.items():
                        assert value == expected(key), (key, value)
                    assert set(await d.values()) <= set(range(N))
                    assert {key async for key in d} <= {f"k{i}" for i in range(N)}
                    rounds.append((began, time.monotonic()))

            readers = [asyncio.ensure_future(iterate()) for _ in range(READERS)]
            windows = []
            for _ in range(BATCHES):
                done = len(rounds)

                def read_on(done: int = done) -> bool:
                    return len(rounds) >= done + READERS

                await eventually(read_on, timeout=DEADLINE)
                windows.append(await asyncio.to_thread(deleter.delete_batch))
            await asyncio.to_thread(deleter.wait_done)
            stop.set()
            async with asyncio.timeout(DEADLINE):
                await asyncio.gather(*readers)  # an iteration that raised fails here
            assert any(b0 < r1 and r0 < b1 for b0, b1 in windows for r0, r1 in rounds)
        finally:
            deleter.kill()
        assert dict(await d.items()) == survivors
        assert sorted(await d.values()) == sorted(survivors.values())
        assert sorted(await d.keys()) == sorted(survivors) and await d.len() == len(survivors)
