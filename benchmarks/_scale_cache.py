"""The cache half of ``bench_scale.py``: what a new key and ``clear()`` cost at 1k / 10k / 100k keys.

For each size N, a fresh namespace is filled with N entries (TTL 600 s), then, in the same run:

(a) a new key alone: ``AsyncStateStoreCache.set`` of a key never written vs ``client.set`` of the same bytes under
    another new key (the floor), interleaved one for one, median of ``--samples`` each;
(b) new keys with 64 in flight: ``set_many`` of ``--batch`` new keys (``max_fanout=64``) vs the same
    number of ``client.set`` calls gathered 64 at a time; keys per second, median of ``--rounds``;
(c) ``clear()``: its latency, and how long after it returned another process (a reader holding the key in its
    local cache, reading it in a loop that yields the GIL between reads) stops serving the cleared value: ``time.perf_counter`` is
    CLOCK_MONOTONIC, one clock for both processes on Linux; a miss seen before ``clear()`` returned counts 0.

Cost must not grow with N: the script prints each figure at every size and its ratio to the smallest.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient

VALUE = {"user": 12345, "name": "a typical cached value", "tags": ["a", "b", "c"]}


async def _fill(cache: AsyncStateStoreCache[Any], n: int) -> None:
    chunk = 5_000
    for start in range(0, n, chunk):
        failed = await cache.set_many({f"fill:{i:07d}": VALUE for i in range(start, min(n, start + chunk))}, ttl=600)
        assert not failed, failed[:5]


async def _gather(coros: list[Any], limit: int) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(c: Any) -> None:
        async with gate:
            await c

    await asyncio.gather(*(one(c) for c in coros))


def reader_main(host: str, port: int, namespace: str) -> int:
    """The other process of (c): for each line ``KEY``, cache it, say ``P``, read until it is gone."""
    clock = time.perf_counter
    with StateStoreClient(host, port, timeout=10) as client:
        cache: StateStoreCache[Any] = StateStoreCache(client, namespace=namespace, local_cache_size=16)
        print("READY", flush=True)
        for line in sys.stdin:
            key = line.strip()
            assert cache.get(key) is not None and cache.get(key) is not None  # read, then served locally
            sys.stdout.write("P\n")
            sys.stdout.flush()
            reads = 0
            while cache.get(key) is not None:  # sleep(0) hands the GIL to the loop thread that applies the
                reads += 1  # notification (a tight spin would measure the 5 ms switch interval: bench_dict (ii))
                time.sleep(0)
            sys.stdout.write(json.dumps({"seen": clock(), "reads": reads}) + "\n")
            sys.stdout.flush()
        cache.close()
    return 0


async def measure(host: str, port: int, n: int, samples: int, batch: int, rounds: int, clears: int) -> dict[str, Any]:
    namespace = f"scale-cache-{n}-{uuid.uuid4().hex[:6]}"
    async with AsyncStateStoreClient(host, port, timeout=30) as client:
        cache: AsyncStateStoreCache[Any] = AsyncStateStoreCache(client, namespace=namespace, max_fanout=64)
        async with cache:
            started = time.perf_counter()
            await _fill(cache, n)
            fill_s = time.perf_counter() - started
            raw = json.dumps(VALUE, separators=(",", ":")).encode()

            # (a) a new key alone, interleaved with the floor
            new_key: list[float] = []
            floor: list[float] = []
            for i in range(samples):
                t0 = time.perf_counter()
                await cache.set(f"new:{i:07d}", VALUE, ttl=600)
                t1 = time.perf_counter()
                await client.set(f"{namespace}-raw/new:{i:07d}", raw, ttl=600)
                t2 = time.perf_counter()
                new_key.append(t1 - t0)
                floor.append(t2 - t1)

            # (b) new keys, 64 in flight
            cache_rate: list[float] = []
            raw_rate: list[float] = []
            for r in range(rounds):
                keys = [f"bulk{r}:{i:07d}" for i in range(batch)]
                t0 = time.perf_counter()
                failed = await cache.set_many(dict.fromkeys(keys, VALUE), ttl=600)
                t1 = time.perf_counter()
                await _gather([client.set(f"{namespace}-raw/{k}", raw, ttl=600) for k in keys], 64)
                t2 = time.perf_counter()
                assert not failed
                cache_rate.append(batch / (t1 - t0))
                raw_rate.append(batch / (t2 - t1))

            # (c) clear, and another process stops serving what it cleared
            reader = subprocess.Popen(
                [sys.executable, __file__, "reader", host, str(port), namespace],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            assert reader.stdin is not None and reader.stdout is not None
            clear_s: list[float] = []
            miss_after: list[float] = []
            try:
                if reader.stdout.readline().strip() != "READY":
                    raise RuntimeError("the reader did not start")
                for i in range(clears):
                    key = f"probe{i}"
                    await cache.set(key, VALUE, ttl=600)
                    reader.stdin.write(key + "\n")
                    reader.stdin.flush()
                    if reader.stdout.readline().strip() != "P":
                        raise RuntimeError("the reader stopped")
                    t0 = time.perf_counter()
                    await cache.clear()
                    t1 = time.perf_counter()
                    report = json.loads(reader.stdout.readline())
                    clear_s.append(t1 - t0)
                    miss_after.append(max(0.0, report["seen"] - t1))
                    await cache.sweep()  # not timed: the background part of a clear
                reader.stdin.close()
                reader.wait(20)
            finally:
                if reader.poll() is None:
                    reader.kill()
                    reader.wait(5)
    return {
        "n": n,
        "fill_s": fill_s,
        "new_key_ms": statistics.median(new_key) * 1e3,
        "floor_ms": statistics.median(floor) * 1e3,
        "cache_rate": statistics.median(cache_rate),
        "raw_rate": statistics.median(raw_rate),
        "clear_ms": statistics.median(clear_s) * 1e3,
        "clear_max_ms": max(clear_s) * 1e3,
        "miss_p50_ms": _pct(miss_after, 50) * 1e3,
        "miss_p99_ms": _pct(miss_after, 99) * 1e3,
    }


def _pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


Row = tuple[str, str, str, "str | None"]  # name, format of a cell, the result's key, the key of its baseline


def growth_table(title: str, results: list[dict[str, Any]], rows: list[Row]) -> str:
    """A markdown table: one column per namespace size, each cell with its ratio to the baseline measured in the
    same run where one is named, and the growth from the smallest size to the largest."""
    base = results[0]
    lines = [
        f"| {title} | "
        + " | ".join(f"{r['n']:,}" for r in results)
        + f" | growth {results[0]['n']:,} -> {results[-1]['n']:,} |",
        "|---|" + "---|" * (len(results) + 1),
    ]
    for name, fmt, key, ratio_of in rows:
        cells = [fmt.format(r[key]) + (f" ({r[key] / r[ratio_of]:.2f}x)" if ratio_of else "") for r in results]
        growth = results[-1][key] / base[key] if base[key] else float("nan")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {growth:.2f}x |")
    return "\n".join(lines)


def table(results: list[dict[str, Any]]) -> str:
    return growth_table(
        "cache, keys in the namespace",
        results,
        [
            ("new key, `cache.set` (ratio to `client.set`)", "{:.3f} ms", "new_key_ms", "floor_ms"),
            ("new key, `client.set` of the same bytes (floor)", "{:.3f} ms", "floor_ms", None),
            ("new keys/s, 64 in flight, `set_many` (ratio to `client.set`)", "{:,.0f}", "cache_rate", "raw_rate"),
            ("new keys/s, 64 in flight, `client.set`", "{:,.0f}", "raw_rate", None),
            ("`clear()` median", "{:.2f} ms", "clear_ms", None),
            ("`clear()` max", "{:.2f} ms", "clear_max_ms", None),
            ("another process misses a cleared key, p50 after `clear()` returns", "{:.2f} ms", "miss_p50_ms", None),
            ("... p99", "{:.2f} ms", "miss_p99_ms", None),
        ],
    )


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "reader":
    sys.exit(reader_main(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
