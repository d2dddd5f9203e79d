"""A load-generating worker process for the fault-injection tests (not a test module).

Run as ``python tests/faults/_worker.py --role writer|reader [--kind dict|cache] ...``. It opens a
:class:`StateStoreDict` or the blocking cache (JSON codec, notification-kept local cache) on its own
:class:`StateStoreClient` and produces bounded, paced load
until it reads ``stop`` on stdin or its ``--seconds`` deadline passes. It talks to the test through one JSON
object per stdout line (``"ev"`` names the kind):

* ``counts``   ``{"phase", "threads", "tasks", "fds", "thread_names"}``: resource census at ``baseline``
  (loop thread started, nothing connected), ``ready`` (connected, namespace open, keys set up), ``end``
  (load stopped, still connected) and ``closed`` (dict and client closed);
* ``ready``    set-up done, load starts;
* ``state``    ``{"state", "t"}``: every connection state change, ``t`` on ``time.monotonic()`` (one system-wide
  clock on Linux, so the test can compare it with its own);
* ``acks``     writers, every 0.25 s: ``{"last": {key: seq}}``, the highest acknowledged sequence per key;
* ``first_ok`` ``{"t"}``: the first successful store operation after each ``connected`` (service is back);
* ``stale``    one stale read, with the details;
* ``done``     ``{"stats", "acked", "attempted"}``.

Writers own their keys exclusively and write 0, 1, 2, ... to each (a failed write's number is never
reused), so the value of a key only ever grows. A read is **stale** when it returns a number lower than one
this process already knew to be in the store for that key: its own acknowledged write (read-your-writes),
a value it returned before (monotonic reads), or a value it saw in a direct GET that bypassed the cache.
A client whose cache lost its notifications serves such values; eventual-consistency lag does not (a
notification of a change always reaches a watching client before the answer to any later GET of that key,
because the emulator publishes both in order over one broker session).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

from sskv_mapping._blocking import get_loop_thread
from sskv_mapping._namespace.key_locks import drain_owned
from sskv_mapping.cache import StateStoreCache
from sskv_mapping.client import ConnectionState, StateStoreClient
from sskv_mapping.errors import StateStoreError, TransportError
from sskv_mapping.mapping import StateStoreDict

_out_lock = threading.Lock()
STDIN_THREAD = "worker-stdin"


def emit(ev: str, **fields: Any) -> None:
    line = json.dumps({"ev": ev, **fields}, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def census(phase: str) -> None:
    portal = get_loop_thread()

    async def count_tasks() -> int:
        return len(asyncio.all_tasks()) - 1  # not this coroutine's own task

    tasks = asyncio.run_coroutine_threadsafe(count_tasks(), portal.loop).result(10)
    # the worker's own stdin thread is not the library's: it ends when "stop" arrives
    names = sorted(t.name for t in threading.enumerate() if t.name != STDIN_THREAD)
    emit(
        "counts",
        phase=phase,
        threads=len(names),
        tasks=tasks,
        fds=len(os.listdir("/proc/self/fd")),
        thread_names=names,
    )


class CacheAsMap:
    """The blocking cache with the two dict operations the loads use (``--kind cache``): the same load, the
    same stale-read rules, through the cache backend (a local cache kept current by notifications)."""

    def __init__(self, client: StateStoreClient, namespace: str, ttl: float | None = 600) -> None:
        self.cache: StateStoreCache[Any] = StateStoreCache(
            client, namespace=namespace, local_cache_size=64, default_ttl=ttl
        )
        self.client = client
        self.local_cache = self.cache.local_cache

    def __setitem__(self, key: str, value: Any) -> None:
        self.cache.set(key, value)

    def get(self, key: str) -> Any:
        return self.cache.get(key)

    def data_key(self, key: str) -> str:
        return self.cache.data_key(key).decode()

    def close(self) -> None:
        self.cache.close()


class Worker:
    result: dict[str, Any]  # what the role found, reported in the "done" line

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop = threading.Event()
        self.deadline = time.monotonic() + args.seconds
        self.awaiting_first_ok = False
        self.stats: dict[str, int] = {
            "ops": 0,
            "writes_acked": 0,
            "writes_unknown": 0,
            "reads": 0,
            "cache_hits": 0,
            "direct_reads": 0,
            "unavailable": 0,
            "other_errors": 0,
            "stale": 0,
            "reconnects": 0,
        }
        self.longest_call = 0.0  # seconds: the slowest store call (write or read) of the load

    # -- connection state, on the client's loop thread ---------------------------------------------------

    def on_state(self, state: ConnectionState) -> None:
        if state is ConnectionState.CONNECTED:
            self.awaiting_first_ok = True
        emit("state", state=state.value, t=time.monotonic())

    def ok(self) -> None:
        self.stats["ops"] += 1
        if self.awaiting_first_ok:
            self.awaiting_first_ok = False
            emit("first_ok", t=time.monotonic())

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def stale(self, kind: str, key: str, got: object, floor: int) -> None:
        self.stats["stale"] += 1
        emit("stale", kind=kind, key=key, got=got, floor=floor, t=time.monotonic())

    # -- the loads ---------------------------------------------------------------------------------------

    def data_key(self, d: Any, key: str) -> str:
        return d.data_key(key) if isinstance(d, CacheAsMap) else f"{self.args.namespace}/{key}"

    def run_writer(self, d: Any) -> None:
        keys = self.args.keys
        acked = {k: 0 for k in keys}
        attempted = {k: 0 for k in keys}
        for k in keys:  # set-up: every key exists (and is in the namespace index) before the load starts
            d[k] = 0
        # background work the set-up started ends before the census: a new key's watch (a read joins it) and the
        # release of the index shard locks kept after the writes
        for k in keys:
            d.get(k)
        get_loop_thread().run(drain_owned(d.client.async_client))
        census("ready")
        emit("ready", data_keys={k: self.data_key(d, k) for k in keys})
        last_report = 0.0
        i = 0
        while self.running():
            k = keys[i % len(keys)]
            i += 1
            seq = attempted[k] + 1
            attempted[k] = seq
            started = time.monotonic()
            try:
                d[k] = seq
                self.longest_call = max(self.longest_call, time.monotonic() - started)
                acked[k] = seq
                self.stats["writes_acked"] += 1
                self.ok()
            except TransportError:
                self.longest_call = max(self.longest_call, time.monotonic() - started)
                self.stats["writes_unknown"] += 1  # unknown outcome: maybe applied, maybe not
            except StateStoreError:
                self.stats["other_errors"] += 1
            # read-your-writes: our own cache (or the store) must not return less than our last ack
            try:
                got = d.get(k)
                self.stats["reads"] += 1
                if not isinstance(got, int) or got < acked[k]:
                    self.stale("read-your-writes", k, got, acked[k])
            except TransportError:
                self.stats["unavailable"] += 1
            now = time.monotonic()
            if now - last_report >= 0.25:
                last_report = now
                emit("acks", last=acked)
            time.sleep(self.args.pace)  # pacing: a bounded write rate, not synchronisation
        emit("acks", last=acked)
        self.result = {"acked": acked, "attempted": attempted}

    def run_reader(self, d: Any) -> None:
        keys = self.args.keys
        floor = {k: 0 for k in keys}
        cache = d.local_cache
        client = d.client
        # the local cache's revalidator (one task per namespace for its life, started with the first watch)
        # exists before the census: a read of each key starts it
        for k in keys:
            d.get(k)
        census("ready")
        emit("ready")
        rounds = 0
        while self.running():
            rounds += 1
            for k in keys:
                hits = cache.hits if cache is not None else 0
                started = time.monotonic()
                try:
                    got = d.get(k)
                except TransportError:
                    self.longest_call = max(self.longest_call, time.monotonic() - started)
                    self.stats["unavailable"] += 1
                    continue
                self.longest_call = max(self.longest_call, time.monotonic() - started)
                self.stats["reads"] += 1
                if cache is not None and cache.hits > hits:
                    self.stats["cache_hits"] += 1
                else:
                    self.ok()
                if not isinstance(got, int) or got < floor[k]:
                    self.stale("monotonic-read", k, got, floor[k])
                else:
                    floor[k] = got
            if rounds % 5 == 0:
                # a direct GET, past the cache: what it sees is in the store, so the cache may not go below
                k = keys[rounds // 5 % len(keys)]
                try:
                    entry = client.get(self.data_key(d, k))
                    self.ok()
                    self.stats["direct_reads"] += 1
                    if entry is not None:
                        seen = json.loads(entry.value)
                        if seen < floor[k]:
                            self.stale("direct-read", k, seen, floor[k])
                        floor[k] = max(floor[k], seen)
                except TransportError:
                    self.stats["unavailable"] += 1
            time.sleep(self.args.pace)  # pacing: a bounded read rate, not synchronisation
        self.result = {"floor": floor}

    def main(self) -> int:
        args = self.args
        get_loop_thread()
        census("baseline")
        client = StateStoreClient(
            args.host,
            args.port,
            client_id=args.id,
            timeout=args.timeout,
            backoff_initial=0.05,
            backoff_max=2.0,
        )
        client.add_state_listener(self.on_state)
        client.connect()
        d: Any = (
            CacheAsMap(client, args.namespace, ttl=None if args.kind == "cache-nottl" else 600)
            if args.kind.startswith("cache")
            else StateStoreDict(
                client, namespace=args.namespace, listing="index" if args.kind == "dict-index" else "auto"
            )
        )
        threading.Thread(target=self._read_stdin, name=STDIN_THREAD, daemon=True).start()
        self.result = {}
        try:
            if args.role == "writer":
                self.run_writer(d)
            else:
                self.run_reader(d)
            self.stats["reconnects"] = client.async_client.reconnects
            census("end")
        finally:
            d.close()
            client.close()
        census("closed")
        emit("done", stats=self.stats, longest_call=self.longest_call, **self.result)
        return 0

    def _read_stdin(self) -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        self.stop.set()  # "stop", or the test went away (EOF)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["writer", "reader"], required=True)
    parser.add_argument("--id", required=True, help="MQTT client id")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--keys", type=lambda s: s.split(","), required=True)
    parser.add_argument("--seconds", type=float, default=120.0, help="hard deadline of the load")
    parser.add_argument("--timeout", type=float, default=10.0, help="client call timeout (the client's default)")
    parser.add_argument(
        "--kind",
        choices=["dict", "dict-index", "cache", "cache-nottl"],
        default="dict",
        help="StateStoreDict (listing auto, or index) or the cache (entries with a TTL, or without: ledger/SCAN path)",
    )
    parser.add_argument("--pace", type=float, default=0.004, help="pause between operations (s)")
    return Worker(parser.parse_args()).main()


if __name__ == "__main__":
    sys.exit(main())
