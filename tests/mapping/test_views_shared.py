"""Views that tolerate a shared store (issue 27, point 4): ``items()``, ``values()`` and iteration of the dict and its
async twin skip keys another process deletes meanwhile -- in both listing modes -- instead of raising ``KeyError``
(the ``MutableMapping`` views listed the keys, then read each with ``d[key]``).

Sixteen threads (or tasks) iterate while another process deletes every other key; then every view shows exactly
the survivors. Over a real mosquitto and the emulator process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreClient, AsyncStateStoreDict, StateStoreClient, StateStoreDict

N = 200
READERS = 16
DEADLINE = 120.0

#: the other process: connects, says "ready", waits for a line, deletes every even key, says "done"
DELETER = """
import sys
from sskv_mapping import StateStoreDict
host, port, namespace, listing, n = sys.argv[1:6]
with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace, listing=listing) as d:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(0, int(n), 2):
        del d[f"k{i}"]
    print("done", flush=True)
"""


def expected(key: str) -> int:
    return int(key[1:])


class Deleter:
    """The other process, driven over its stdin/stdout."""

    def __init__(self, host: str, port: int, namespace: str, listing: str) -> None:
        argv = [sys.executable, "-c", DELETER, host, str(port), namespace, listing, str(N)]
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

    def go(self) -> None:
        self._in.write("go\n")
        self._in.flush()

    def wait_done(self) -> None:
        assert self._line() == "done"
        assert self.proc.wait(DEADLINE) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE)


@pytest.mark.parametrize("listing", ["index", "scan"])
def test_sixteen_threads_iterate_while_another_process_deletes_half(broker_url: tuple[str, int], listing: str) -> None:
    host, port = broker_url
    namespace = f"v{uuid.uuid4().hex[:10]}"
    survivors = {f"k{i}": i for i in range(1, N, 2)}
    with StateStoreClient(host, port) as client:
        d: StateStoreDict[Any] = StateStoreDict(client, namespace=namespace, listing=listing)  # type: ignore[arg-type]
        d.update({f"k{i}": i for i in range(N)})
        deleter = Deleter(host, port, namespace, listing)
        try:
            errors: list[BaseException] = []
            rounds = [0] * READERS
            stop = threading.Event()
            started = threading.Barrier(READERS + 1)

            def iterate(me: int) -> None:
                started.wait(DEADLINE)
                while not stop.is_set():
                    try:
                        for key, value in d.items():
                            assert value == expected(key), (key, value)
                        assert set(d.values()) <= set(range(N))
                        assert {key for key in d} <= {f"k{i}" for i in range(N)}
                    except BaseException as exc:
                        errors.append(exc)
                        return
                    rounds[me] += 1

            readers = [threading.Thread(target=iterate, args=(i,), daemon=True) for i in range(READERS)]
            for reader in readers:
                reader.start()
            started.wait(DEADLINE)
            before = sum(rounds)
            deleter.go()
            deleter.wait_done()
            during = sum(rounds) - before
            stop.set()
            for reader in readers:
                reader.join(DEADLINE)
            assert not [r for r in readers if r.is_alive()]
            assert errors == [], errors[:3]
            assert during > 0  # iterations did overlap the deletions (else this test would prove nothing)
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
    broker_url: tuple[str, int], listing: str
) -> None:
    host, port = broker_url
    namespace = f"v{uuid.uuid4().hex[:10]}"
    survivors = {f"k{i}": i for i in range(1, N, 2)}
    async with (
        AsyncStateStoreClient(host, port) as client,
        AsyncStateStoreDict(client, namespace=namespace, listing=listing) as d,  # type: ignore[arg-type]
    ):
        await d.update({f"k{i}": i for i in range(N)})
        deleter = await asyncio.to_thread(Deleter, host, port, namespace, listing)
        try:
            stop = asyncio.Event()
            rounds = [0]

            async def iterate() -> None:
                while not stop.is_set():
                    for key, value in await d.items():
                        assert value == expected(key), (key, value)
                    assert set(await d.values()) <= set(range(N))
                    assert {key async for key in d} <= {f"k{i}" for i in range(N)}
                    rounds[0] += 1

            readers = [asyncio.ensure_future(iterate()) for _ in range(READERS)]
            before = rounds[0]
            deleter.go()
            await asyncio.to_thread(deleter.wait_done)
            during = rounds[0] - before
            stop.set()
            async with asyncio.timeout(DEADLINE):
                await asyncio.gather(*readers)  # an iteration that raised fails here
            assert during > 0
        finally:
            deleter.kill()
        assert dict(await d.items()) == survivors
        assert sorted(await d.values()) == sorted(survivors.values())
        assert sorted(await d.keys()) == sorted(survivors) and await d.len() == len(survivors)
