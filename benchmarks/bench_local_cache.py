"""Local cache benchmark: the cost of a hit (the ``d[key]`` hot path) and the memory of an entry.

Run:  python benchmarks/bench_local_cache.py [--rounds 7] [--hits 200000] [--entries 100000]

(1) Per-hit time, median over ``--rounds`` rounds of ``--hits`` hits each, all candidates measured in the
    same rounds, interleaved, on the same keys (1,000 hot keys, every lookup a hit):
    * ``cachetools.TTLCache`` ``cache[key]`` -- the baseline; the target is LocalCache.get <= 2x this;
    * the same through the bound ``cache.__getitem__`` (no ``[]`` slot dispatch), for reference;
    * ``LocalCache.get`` as configured by default (an ``LRUCache`` inside) and with a local ``ttl``
      (a ``TTLCache`` inside).
    Each figure includes the same ``for key in keys`` loop overhead.
(2) Memory per cached entry for ``--entries`` small entries, measured with tracemalloc: the bytes the cache
    itself allocates (entry objects + cachetools structures), apart from the keys/values/versions it is
    handed, and the total including those.

This is a script, not a test: the machines are shared and noisy; only same-run ratios mean anything.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

from _shared import traced
from cachetools import LRUCache, TTLCache

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping.local_cache import CachedEntry, LocalCache

HOT_KEYS = 1_000


def _version(i: int) -> HybridLogicalClock:
    return HybridLogicalClock(1_700_000_000_000 + i, i % 7, "StateStore")


def _entry(i: int) -> CachedEntry[int]:
    return CachedEntry(i, str(i).encode(), _version(i))


def time_hits(rounds: int, hits: int) -> dict[str, list[float]]:
    keys = [b"user:%08d" % i for i in range(HOT_KEYS)]
    per_round = max(1, hits // len(keys))

    ttl_cache: TTLCache[bytes, CachedEntry[int]] = TTLCache(maxsize=len(keys), ttl=3600)
    lru_local: LocalCache[int] = LocalCache(maxsize=len(keys))
    ttl_local: LocalCache[int] = LocalCache(maxsize=len(keys), ttl=3600)
    for i, key in enumerate(keys):
        ttl_cache[key] = _entry(i)
        lru_local.store_write(key, _entry(i))
        ttl_local.store_write(key, _entry(i))

    candidates: dict[str, tuple[str, dict[str, Any]]] = {
        "TTLCache cache[key]  (baseline)": ("for k in keys: c[k]", {"c": ttl_cache}),
        "TTLCache.__getitem__ (bound call)": ("for k in keys: f(k)", {"f": ttl_cache.__getitem__}),
        "LocalCache.get  (LRUCache inside)": ("for k in keys: f(k)", {"f": lru_local.get}),
        "LocalCache.get  (ttl=, TTLCache inside)": ("for k in keys: f(k)", {"f": ttl_local.get}),
    }
    results: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, (stmt, env) in candidates.items():  # interleaved: each round sees the same noise
            timer = timeit.Timer(stmt, globals={"keys": keys, **env})
            seconds = timer.timeit(number=per_round)
            results[name].append(seconds / (per_round * len(keys)) * 1e9)
    for local in (lru_local, ttl_local):  # every lookup must have been a hit, or we timed the wrong path
        assert local.misses == 0 and local.hits == rounds * per_round * len(keys), local.stats()
    return results


def measure_memory(entries: int) -> list[tuple[str, float, float]]:
    """(what, cache bytes per entry, total bytes per entry incl. keys/values/raw/versions)."""
    payload_bytes, payload, _ = traced(
        lambda: [(b"user:%08d" % i, i + 1_000_000, str(i).encode(), _version(i)) for i in range(entries)]
    )
    payload_per_entry = payload_bytes / entries
    rows: list[tuple[str, float, float]] = []

    def fill_local(ttl: float | None) -> LocalCache[int]:
        cache: LocalCache[int] = LocalCache(maxsize=entries, ttl=ttl)
        for key, value, raw, version in payload:
            cache.store_write(key, CachedEntry(value, raw, version))
        return cache

    def fill_plain(cache: Any) -> Any:
        for key, value, raw, version in payload:
            cache[key] = CachedEntry(value, raw, version)
        return cache

    builds: list[tuple[str, Callable[[], Any]]] = [
        ("LRUCache[key] = CachedEntry  (reference)", lambda: fill_plain(LRUCache(maxsize=entries))),
        ("TTLCache[key] = CachedEntry  (reference)", lambda: fill_plain(TTLCache(maxsize=entries, ttl=3600))),
        ("LocalCache (LRUCache inside)", lambda: fill_local(None)),
        ("LocalCache (ttl=, TTLCache inside)", lambda: fill_local(3600.0)),
    ]
    for name, build in builds:
        used, cache, _ = traced(build)
        assert len(cache) == entries
        rows.append((name, used / entries, used / entries + payload_per_entry))
        del cache
    return rows


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--hits", type=int, default=200_000, help="hits per round per candidate")
    parser.add_argument("--entries", type=int, default=100_000, help="entries for the memory measurement")
    args = parser.parse_args()

    print(
        f"python {platform.python_version()} ({sys.implementation.name}) on {platform.machine()}, "
        f"{platform.system()}; {args.rounds} rounds x {args.hits:,} hits, {HOT_KEYS:,} hot keys"
    )
    print()
    times = time_hits(args.rounds, args.hits)
    baseline = statistics.median(next(iter(times.values())))
    print(f"{'per hit (median of rounds)':<42} {'ns':>7} {'min':>7} {'max':>7} {'x baseline':>11}")
    for name, samples in times.items():
        med = statistics.median(samples)
        print(f"{name:<42} {med:7.0f} {min(samples):7.0f} {max(samples):7.0f} {med / baseline:10.2f}x")
    print()
    print(
        f"{'memory, ' + format(args.entries, ',') + ' small entries':<42} {'cache B/entry':>14} {'total B/entry':>14}"
    )
    for name, own, total in measure_memory(args.entries):
        print(f"{name:<42} {own:14.0f} {total:14.0f}")
    print("(total adds the key, value, raw bytes and version objects the cache is handed)")


if __name__ == "__main__":
    main()
