"""Does a cost grow with the namespace? The cache and the dict at 1,000 / 10,000 / 100,000 keys.

Run:  python benchmarks/bench_scale.py [--sizes 1000,10000,100000] [--samples 300]

A private mosquitto and the emulator process are started here (loopback only). For each size N a fresh
namespace is filled with N keys, then measured; every figure is a median, and ratios are against a baseline
measured in the same run (the machines are shared and noisy):

cache (``_scale_cache.py``): a new key (``cache.set``) vs ``client.set`` of the same bytes; new keys with 64 in
    flight; ``clear()``; how long after ``clear()`` returned another process stops serving the cleared value;
dict: a new key (``d[key] = v``: list it in its index shard, then SET) vs ``client.set`` of the same bytes; the
    bytes each watcher of the index receives per insert (the size of the rewritten shard); a fresh process's
    ``len()`` (a new interpreter: import, connect, open, ``len``; and ``len`` alone).

The last column of each table is the growth from the smallest size to the largest: 1.00x means flat.
This is a script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _scale_cache
from _shared import machine, start_emulator

from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict, StateStoreDict
from sskv_mapping.mapping._index import shard_of

VALUE = {"feature": "enabled", "limit": 250, "owners": ["a", "b"]}


def fresh_len_main(host: str, port: int, namespace: str) -> int:
    """A new process: connect, open the namespace, ``len()``; prints both times and the length."""
    started = time.perf_counter()
    with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace) as d:
        opened = time.perf_counter()
        n = len(d)
        done = time.perf_counter()
    print(json.dumps({"n": n, "total": done - started, "len": done - opened}))
    return 0


async def measure_dict(host: str, port: int, n: int, samples: int) -> dict[str, Any]:
    namespace = f"scale-dict-{n}-{uuid.uuid4().hex[:6]}"
    raw = json.dumps(VALUE, separators=(",", ":")).encode()
    async with AsyncStateStoreClient(host, port, timeout=60) as client:
        # filled through a dict without a local cache (one SET per key, no watch), measured through a default one
        filler: AsyncStateStoreDict[Any] = AsyncStateStoreDict(
            client, namespace=namespace, local_cache_size=0, listing="index"
        )
        async with filler:
            started = time.perf_counter()
            chunk = 5_000
            for start in range(0, n, chunk):
                await filler.update({f"fill:{i:07d}": VALUE for i in range(start, min(n, start + chunk))})
            fill_s = time.perf_counter() - started
        d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(client, namespace=namespace, listing="index")
        async with d:
            index = d._store.index
            assert index is not None

            new_key: list[float] = []
            floor: list[float] = []
            shard_bytes: list[int] = []
            for i in range(samples):
                key = f"new:{i:07d}"
                t0 = time.perf_counter()
                await d.set(key, VALUE)
                t1 = time.perf_counter()
                await client.set(f"{namespace}-raw/new:{i:07d}", raw)
                t2 = time.perf_counter()
                new_key.append(t1 - t0)
                floor.append(t2 - t1)
                if i % 10 == 0:  # what the insert broadcast to every watcher of that shard
                    shard = await client.get(index.shard_key(shard_of(key, index.shards)))
                    assert shard is not None
                    shard_bytes.append(len(shard.value))
            assert await d.len() == n + samples
    proc = subprocess.run(
        [sys.executable, __file__, "fresh-len", host, str(port), namespace],
        capture_output=True,
        text=True,
        check=True,
    )
    fresh = json.loads(proc.stdout)
    assert fresh["n"] == n + samples, fresh
    return {
        "n": n,
        "fill_s": fill_s,
        "new_key_ms": statistics.median(new_key) * 1e3,
        "floor_ms": statistics.median(floor) * 1e3,
        "shard_kb": statistics.median(shard_bytes) / 1024,
        "shard_max_kb": max(shard_bytes) / 1024,
        "fresh_total_s": fresh["total"],
        "fresh_len_s": fresh["len"],
    }


def dict_table(results: list[dict[str, Any]]) -> str:
    return _scale_cache.growth_table(
        "dict, keys in the namespace",
        results,
        [
            ("new key, `d[key] = v` (ratio to `client.set`)", "{:.3f} ms", "new_key_ms", "floor_ms"),
            ("new key, `client.set` of the same bytes (floor)", "{:.3f} ms", "floor_ms", None),
            ("bytes to each watcher per insert (the shard), median", "{:.1f} KB", "shard_kb", None),
            ("... largest shard seen", "{:.1f} KB", "shard_max_kb", None),
            ("fresh process: `len()` alone", "{:.3f} s", "fresh_len_s", None),
            ("fresh process: connect + open + `len()`", "{:.3f} s", "fresh_total_s", None),
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="namespace sizes, comma-separated")
    parser.add_argument("--samples", type=int, default=300, help="new keys timed one at a time, per size")
    parser.add_argument("--batch", type=int, default=2_000, help="cache: new keys per 64-in-flight round")
    parser.add_argument("--rounds", type=int, default=3, help="cache: 64-in-flight rounds")
    parser.add_argument("--clears", type=int, default=50, help="cache: clear() rounds per size")
    parser.add_argument("--only", choices=["cache", "dict"], help="measure one of the two only")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.monotonic()
    print(f"machine: {machine()}", flush=True)
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            caches, dicts = [], []
            for n in sizes:
                if args.only == "dict":
                    dicts.append(asyncio.run(measure_dict(broker.host, broker.port, n, args.samples)))
                    print(f"dict, {n:,} keys: filled in {dicts[-1]['fill_s']:.1f} s", flush=True)
                    continue
                caches.append(
                    asyncio.run(
                        _scale_cache.measure(
                            broker.host, broker.port, n, args.samples, args.batch, args.rounds, args.clears
                        )
                    )
                )
                print(f"cache, {n:,} keys: filled in {caches[-1]['fill_s']:.1f} s", flush=True)
                if args.only == "cache":
                    continue
                dicts.append(asyncio.run(measure_dict(broker.host, broker.port, n, args.samples)))
                print(f"dict, {n:,} keys: filled in {dicts[-1]['fill_s']:.1f} s", flush=True)
        finally:
            emulator.kill()
            emulator.wait(10)
    if caches:
        print()
        print(_scale_cache.table(caches))
    if dicts:
        print()
        print(dict_table(dicts))
    print(f"\nwhole run: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fresh-len":
        sys.exit(fresh_len_main(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
    sys.exit(main())
