"""The Django backend's ``delete_pattern`` (django-redis's) over 100,000 keys: requests in flight and keys held
counted, not timed; the peak of traced memory at 10k and 100k keys, to show it does not grow with the keys.

Run:  python benchmarks/bench_delete_pattern.py [--sizes 10000,100000] [--itersize 1000]

A private mosquitto and the emulator process are started here (loopback only). For each size the keys are
written through the backend's cache, then ``delete_pattern("bulk:*")`` runs with the client's ``delete`` wrapped
to count calls and the most in flight at once, ``progress`` recording each batch, and ``tracemalloc`` tracing the
peak of memory allocated during the delete (our process: the keys of a page and a batch, the requests). Printed:
deleted, calls, peak in flight (bound: ``itersize`` and the cache's ``max_fanout``), largest batch, traced peak
and wall time (for scale only). Exits non-zero if a count breaks its bound. This is a script, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django
from django.conf import settings

settings.configure(SECRET_KEY="bench", CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})
django.setup()

from sskv_mapping.emulator.broker import MosquittoBroker  # noqa: E402
from sskv_mapping.integrations.django import StateStoreCache, close_all  # noqa: E402
from tests._support.procs import start_emulator  # noqa: E402


def run(url: str, size: int, itersize: int) -> dict[str, Any]:
    backend = StateStoreCache(url, {"OPTIONS": {"namespace": f"bench{uuid.uuid4().hex[:8]}", "codec": "json"}})
    core = backend._cache()
    for start in range(0, size, 5_000):
        failed = core.set_many({backend.make_key(f"bulk:{i}"): i for i in range(start, min(size, start + 5_000))}, 900)
        assert failed == [], failed[:3]
    client = core.async_cache.client
    counts = {"calls": 0, "in_flight": 0, "peak": 0}
    original = client.delete

    async def counted(*args: Any, **kwargs: Any) -> Any:
        counts["calls"] += 1
        counts["in_flight"] += 1
        counts["peak"] = max(counts["peak"], counts["in_flight"])
        try:
            return await original(*args, **kwargs)
        finally:
            counts["in_flight"] -= 1

    client.delete = counted  # type: ignore[method-assign]
    batches = [0]
    seen = [0]

    def progress(scanned: int, deleted: int) -> None:
        batches.append(scanned - seen[0])
        seen[0] = scanned

    tracemalloc.start()
    started = time.perf_counter()
    try:
        deleted = backend.delete_pattern("bulk:*", itersize=itersize, progress=progress)
    finally:
        elapsed = time.perf_counter() - started
        _, peak_bytes = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del client.delete
    return {
        "size": size,
        "deleted": deleted,
        "calls": counts["calls"],
        "peak_in_flight": counts["peak"],
        "max_batch": max(batches),
        "traced_peak_kib": peak_bytes // 1024,
        "seconds": round(elapsed, 1),
        "fanout": core.async_cache._core.max_fanout,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--itersize", type=int, default=1000)
    args = parser.parse_args()
    failures = 0
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            url = f"mqtt://{broker.host}:{broker.port}"
            for size in (int(s) for s in args.sizes.split(",")):
                row = run(url, size, args.itersize)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                bound = min(args.itersize, row["fanout"])
                if row["deleted"] != size or row["calls"] != size:
                    failures += 1
                if row["peak_in_flight"] > bound or row["max_batch"] > args.itersize:
                    failures += 1
        finally:
            close_all()
            emulator.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
