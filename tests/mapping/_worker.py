"""A StateStoreDict in a process of its own, driven by the multiprocess tests over stdin/stdout.

Run:  python tests/mapping/_worker.py HOST PORT NAMESPACE [NAME]

It opens ``StateStoreDict.connect(f"mqtt://{HOST}:{PORT}", namespace=NAMESPACE)``, prints ``{"ready": ...}`` and then
answers one JSON line on stdout per JSON command line on stdin (stdout carries nothing else; stderr is
for tracebacks). Commands, by ``"op"``:

* ``set`` ``key`` ``value`` / ``del`` ``key``: write; answered once the service acknowledged it.
* ``read`` ``keys``: ``{"values": {key: value}, "absent": [...]}``: warms the local cache (and its watches).
* ``wait`` ``key`` ``value`` ``timeout``: poll ``d[key]`` (no sleeping) until it equals ``value``;
  first answers ``{"polling": true}``, then ``{"saw": value, "at": t, "misses": n}`` or ``{"timeout": ...}``.
* ``wait_absent`` ``key`` ``timeout``: the same until ``key not in d``.
* ``follow`` ``key`` ``until`` ``timeout``: answer ``{"polling": true}``, then record each distinct value
  ``d[key]`` takes until it equals ``until``; answer ``{"seen": [...], ...}``.
* ``insert`` ``prefix`` ``n`` ``threads``: wait for a ``go`` line, then ``d[prefix + str(i)] = i`` for
  ``i < n`` from ``threads`` threads; answer ``{"done": n, "seconds": s}``.
* ``stats``: the local cache's hits/misses. ``quit``: close and exit 0.

``at`` is ``time.monotonic()``, the system-wide CLOCK_MONOTONIC on Linux, so the test process can compare it
with its own clock. ``misses`` counts local-cache misses while polling: 0 means every read was served from
the notification-kept cache, never from the network.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sskv_mapping.mapping import StateStoreDict

_ABSENT = object()


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def misses(d: StateStoreDict[Any]) -> int:
    cache = d.local_cache
    assert cache is not None
    return cache.misses


def wait_for(d: StateStoreDict[Any], key: str, done: Any, timeout: float) -> None:
    """Spin on ``d[key]`` until ``done(value)``; every read is a local-cache hit unless the cache lost it."""
    say({"polling": True})
    before = misses(d)
    deadline = time.monotonic() + timeout
    while True:
        value = d.get(key, _ABSENT)
        now = time.monotonic()
        if done(value):
            say(
                {
                    "saw": None if value is _ABSENT else value,
                    "absent": value is _ABSENT,
                    "at": now,
                    "misses": misses(d) - before,
                }
            )
            return
        if now > deadline:
            say({"timeout": timeout, "last": None if value is _ABSENT else value, "misses": misses(d) - before})
            return


def follow(d: StateStoreDict[Any], key: str, until: Any, timeout: float) -> None:
    before = misses(d)
    # the first read before "polling" is said: what B held before the writer starts is surely the first value seen
    seen: list[Any] = [d.get(key)]
    say({"polling": True})
    deadline = time.monotonic() + timeout
    reads = 1
    while True:
        value = d.get(key)
        reads += 1
        if not seen or seen[-1] != value:
            seen.append(value)
        if value == until:
            break
        if time.monotonic() > deadline:
            say({"timeout": timeout, "seen": seen, "misses": misses(d) - before})
            return
    say({"seen": seen, "reads": reads, "misses": misses(d) - before})


def insert(d: StateStoreDict[Any], prefix: str, n: int, threads: int) -> None:
    say({"armed": True})
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected 'go'")
    started = time.monotonic()

    def put(i: int) -> None:
        d[f"{prefix}{i}"] = i

    if threads <= 1:
        for i in range(n):
            put(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, range(n)))
    say({"done": n, "seconds": time.monotonic() - started})


def serve(d: StateStoreDict[Any]) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "set":
            d[cmd["key"]] = cmd["value"]
            say({"ok": op, "at": time.monotonic()})
        elif op == "del":
            del d[cmd["key"]]
            say({"ok": op, "at": time.monotonic()})
        elif op == "read":
            found = {k: d.get(k, _ABSENT) for k in cmd["keys"]}
            say(
                {
                    "values": {k: v for k, v in found.items() if v is not _ABSENT},
                    "absent": [k for k, v in found.items() if v is _ABSENT],
                }
            )
        elif op == "wait":
            expected = cmd["value"]
            wait_for(d, cmd["key"], lambda v, e=expected: v is not _ABSENT and v == e, cmd["timeout"])
        elif op == "wait_absent":
            wait_for(d, cmd["key"], lambda v: v is _ABSENT, cmd["timeout"])
        elif op == "follow":
            follow(d, cmd["key"], cmd["until"], cmd["timeout"])
        elif op == "insert":
            insert(d, cmd["prefix"], cmd["n"], cmd.get("threads", 1))
        elif op == "stats":
            cache = d.local_cache
            assert cache is not None
            say({"hits": cache.hits, "misses": cache.misses, "size": cache.size})
        elif op == "quit":
            say({"bye": True})
            return
        else:
            raise SystemExit(f"unknown op {op!r}")


def main(argv: list[str]) -> int:
    host, port, namespace = argv[1], int(argv[2]), argv[3]
    name = argv[4] if len(argv) > 4 else "worker"
    with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace, client_id=f"{name}-{namespace}") as d:
        say({"ready": name, "client_id": d.client.client_id})
        serve(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
