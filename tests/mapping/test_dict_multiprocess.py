"""StateStoreDict across real processes: each worker is ``python tests/mapping/_worker.py`` with a dict of its
own, on the session's mosquitto + emulator process.

The test talks to each worker over stdin/stdout, one JSON line each way (see ``_worker.py``), and never
sleeps to synchronise: a reader is told to start polling and says so before the writer is told to write,
and the writer answers only once the service acknowledged the write.

* shared config: B holds a warm cache; every change A makes reaches B's ``d[key]`` through notifications,
  with no local-cache miss (no network read) while B waits, and B never sees an older value after a newer;
* concurrent index updates: two or four processes insert 500 distinct keys each at once; all are listed;
* invalidation: B has ``k`` cached, A deletes it, B's ``k in d`` turns false, again without a cache miss.

Every worker is killed in a ``finally`` (the ``workers`` fixture), whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import StateStoreDict

WORKER = Path(__file__).resolve().with_name("_worker.py")
REPLY_TIMEOUT = 30.0  # generous: shared CI machines stall; a healthy reply takes milliseconds
WAIT_TIMEOUT = 10.0  # how long a reader polls for a change before it reports a timeout

_EOF = object()


class WorkerProcess:
    """One ``_worker.py`` child: JSON commands in, JSON replies out; stderr kept for failure messages."""

    def __init__(self, broker: MosquittoBroker, namespace: str, name: str) -> None:
        self.name = name
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), broker.host, str(broker.port), namespace, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            close_fds=True,
        )
        self._replies: queue.Queue[object] = queue.Queue()
        self._stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump_stdout, name=f"{name}-stdout", daemon=True),
            threading.Thread(target=self._pump_stderr, name=f"{name}-stderr", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._replies.put(line)
        self._replies.put(_EOF)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def _diagnosis(self) -> str:
        return f"worker {self.name} (rc={self.proc.poll()}) stderr:\n{''.join(self._stderr)[-4000:]}"

    def send(self, **command: Any) -> None:
        self.send_line(json.dumps(command))

    def send_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pytest.fail(f"could not write to {self._diagnosis()}")

    def expect(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no reply within {timeout} s from {self._diagnosis()}")
        if line is _EOF:
            self.proc.wait(5)
            pytest.fail(f"the worker exited: {self._diagnosis()}")
        assert isinstance(line, str)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, *, within: float = REPLY_TIMEOUT, **command: Any) -> dict[str, Any]:
        """Send ``command`` (its ``timeout`` field, if any, is the worker's) and wait ``within`` s for a reply."""
        self.send(**command)
        return self.expect(within)

    def stop(self) -> None:
        """Ask it to quit; kill it if it does not within a few seconds. Idempotent."""
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    self.proc.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
            for t in self._threads:
                t.join(5)
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


WorkerFactory = Callable[[str], WorkerProcess]


@pytest.fixture
def workers(mosquitto: MosquittoBroker, emulator: object, namespace: str) -> Iterator[WorkerFactory]:
    """``workers(name)``: a started worker on this test's namespace, ready; all killed at teardown."""
    started: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        w = WorkerProcess(mosquitto, namespace, name)
        started.append(w)
        ready = w.expect()
        assert ready.get("ready") == name, ready
        return w

    try:
        yield start
    finally:
        for w in started:
            w.stop()


@pytest.fixture
def open_dict(
    mosquitto: MosquittoBroker, emulator: object, namespace: str
) -> Iterator[Callable[[], StateStoreDict[Any]]]:
    """``open_dict()``: a StateStoreDict in this (the test) process, on its own client; closed at teardown."""
    made: list[tuple[StateStoreClient, StateStoreDict[Any]]] = []

    def make() -> StateStoreDict[Any]:
        client = StateStoreClient(mosquitto.host, mosquitto.port)
        client.connect()
        try:
            d: StateStoreDict[Any] = StateStoreDict(client, namespace=namespace)
        except BaseException:
            client.close()
            raise
        made.append((client, d))
        return d

    try:
        yield make
    finally:
        for client, d in made:
            try:
                d.close()
            finally:
                client.close()


def _report(request: pytest.FixtureRequest, name: str, value: Any, text: str) -> None:
    request.node.user_properties.append((name, value))
    print(f"\n[{request.node.name}] {text}")


# -- (a) shared config --------------------------------------------------------------------------------------

INITIAL = {"feature.x": False, "retries": 3, "name": "svc", "limits": {"rps": 10}}
CHANGES: list[tuple[str, str, Any]] = [
    ("set", "feature.x", True),
    ("set", "retries", 5),
    ("set", "limits", {"rps": 20, "burst": [1, 2]}),
    ("set", "name", "ünïcode svc"),
    ("del", "name", None),
    ("set", "name", "back"),
    ("set", "retries", None),  # a stored None is a value, not an absence
    ("set", "new.key", [1, "two", None]),  # B read it while absent: a cached absence is updated too
    ("set", "feature.x", False),
    ("del", "new.key", None),
]


def test_a_warm_reader_sees_each_change_through_its_cache(
    workers: WorkerFactory, open_dict: Callable[[], StateStoreDict[Any]], request: pytest.FixtureRequest
) -> None:
    seed = open_dict()
    seed.update(INITIAL)

    b = workers("reader")  # started first, holding the config with a warm cache
    warm = b.call(op="read", keys=[*INITIAL, "new.key", "counter"])
    assert warm["values"] == INITIAL and sorted(warm["absent"]) == ["counter", "new.key"]
    misses_after_warmup = b.call(op="stats")["misses"]

    a = workers("writer")
    lags: list[float] = []
    for op, key, value in CHANGES:
        if op == "set":
            assert b.call(op="wait", key=key, value=value, timeout=WAIT_TIMEOUT) == {"polling": True}
            acked = a.call(op="set", key=key, value=value)
        else:
            assert b.call(op="wait_absent", key=key, timeout=WAIT_TIMEOUT) == {"polling": True}
            acked = a.call(op="del", key=key)
        seen = b.expect()
        assert "timeout" not in seen, f"B did not see {op} {key}={value!r}: {seen}"
        if op == "set":
            assert seen["saw"] == value and not seen["absent"]
        else:
            assert seen["absent"]
        assert seen["misses"] == 0, f"B went to the network for {key!r}: its cache lost the entry ({seen})"
        lags.append(seen["at"] - acked["at"])

    # a burst: A writes 50 versions without waiting; B follows and never goes back to an older one
    assert b.call(op="follow", key="counter", until=49, timeout=WAIT_TIMEOUT) == {"polling": True}
    for i in range(50):
        a.send(op="set", key="counter", value=i)
    for _ in range(50):
        assert a.expect()["ok"] == "set"
    followed = b.expect()
    assert "timeout" not in followed, followed
    seen_values = followed["seen"]
    assert seen_values[0] is None and seen_values[-1] == 49
    assert seen_values[1:] == sorted(set(seen_values[1:])), f"B saw an older value after a newer: {seen_values}"
    assert followed["misses"] == 0

    assert b.call(op="stats")["misses"] == misses_after_warmup  # nothing B read after warm-up left its cache
    assert seed.copy() == {
        "feature.x": False,
        "retries": None,
        "limits": {"rps": 20, "burst": [1, 2]},
        "name": "back",
        "counter": 49,
    }
    worst = max(lags)
    _report(
        request,
        "notify_lag_ms",
        [round(x * 1e3, 3) for x in lags],
        f"B saw each of {len(lags)} changes {min(lags) * 1e3:.2f}..{worst * 1e3:.2f} ms after A's ack "
        f"(negative: before the ack reached A's caller); burst: B saw {len(seen_values) - 1} of 50 versions "
        f"in order over {followed['reads']} cache reads",
    )
    assert worst < WAIT_TIMEOUT


# -- (b) concurrent index updates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("processes", "threads"),
    [(2, 1), (2, 8), (4, 4)],
    ids=["two-one-writer-each", "two-eight-threads-each", "four-four-threads-each"],
)
def test_processes_insert_500_keys_each_concurrently(
    workers: WorkerFactory,
    open_dict: Callable[[], StateStoreDict[Any]],
    request: pytest.FixtureRequest,
    processes: int,
    threads: int,
) -> None:
    watcher = open_dict()  # open throughout: its index copy follows the inserts by notification
    assert len(watcher) == 0
    procs = [workers(f"p{n}") for n in range(processes)]
    for n, w in enumerate(procs):
        assert w.call(op="insert", prefix=f"p{n}-", n=500, threads=threads) == {"armed": True}
    started = time.monotonic()
    for w in procs:
        w.send_line("go")
    done = [w.expect(timeout=100) for w in procs]  # under pytest-timeout (120 s), to keep the diagnosis
    elapsed = time.monotonic() - started
    assert [d["done"] for d in done] == [500] * processes

    expected = {f"p{n}-{i}": i for n in range(processes) for i in range(500)}
    watcher.client.get(f"{watcher.namespace}#barrier")  # every earlier index notification is applied now
    assert len(watcher) == 500 * processes
    assert sorted(watcher) == sorted(expected)
    fresh = open_dict()
    assert len(fresh) == 500 * processes
    assert set(fresh.keys()) == set(expected)
    assert fresh.copy() == expected
    assert watcher == fresh

    _report(
        request,
        "insert_seconds",
        round(elapsed, 3),
        f"{processes} processes x 500 inserts ({threads} thread(s) each): {elapsed:.2f} s wall "
        f"({500 * processes / elapsed:,.0f} inserts/s); per process "
        + ", ".join(f"{d['seconds']:.2f} s" for d in done),
    )


# -- (c) invalidation ---------------------------------------------------------------------------------------


def test_a_delete_in_one_process_invalidates_the_other(workers: WorkerFactory, request: pytest.FixtureRequest) -> None:
    a = workers("writer")
    b = workers("reader")
    a.call(op="set", key="k", value={"v": 1})
    assert b.call(op="read", keys=["k"])["values"] == {"k": {"v": 1}}  # cached (and watched) in B
    assert b.call(op="wait", key="k", value={"v": 1}, timeout=WAIT_TIMEOUT) == {"polling": True}
    assert b.expect()["misses"] == 0  # served from the cache

    assert b.call(op="wait_absent", key="k", timeout=WAIT_TIMEOUT) == {"polling": True}
    acked = a.call(op="del", key="k")
    seen = b.expect(timeout=WAIT_TIMEOUT + REPLY_TIMEOUT)
    assert "timeout" not in seen, f"B still had k {WAIT_TIMEOUT} s after A deleted it: {seen}"
    assert seen["absent"] and seen["misses"] == 0
    lag = seen["at"] - acked["at"]
    assert lag < 5.0
    assert b.call(op="read", keys=["k"]) == {"values": {}, "absent": ["k"]}
    _report(request, "invalidation_lag_ms", round(lag * 1e3, 3), f"B saw the delete {lag * 1e3:.2f} ms after A's ack")


# -- fan-out over many keys ---------------------------------------------------------------------------------


def test_a_namespace_bigger_than_the_brokers_per_client_queue(open_dict: Callable[[], StateStoreDict[Any]]) -> None:
    """``update``, a fresh instance's ``len``/``copy`` and ``clear`` fan out one request or two per key.

    mosquitto holds 20 in-flight + 1000 queued messages per client and drops the rest; these used to gather
    every key's requests at once, so about a thousand keys lost replies (RequestTimeoutError).
    """
    expected = {f"key-{i}": i for i in range(1500)}
    d = open_dict()
    d.update(expected)
    fresh = open_dict()  # nothing cached: every key is watched and read now
    assert len(fresh) == 1500
    assert fresh.copy() == expected
    fresh.clear()
    assert len(fresh) == 0 and len(open_dict()) == 0
    d.client.get(f"{d.namespace}#barrier")  # d hears of the 1500 deletes by notification: let them land
    assert len(d) == 0
