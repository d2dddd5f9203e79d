"""What the benchmark scripts share: the machine line they print, the emulator process they run (a
``subprocess.Popen``: they stop it, read its pid, or its inspector's URL as ``inspector_url``), the throughput of a
call with requests in flight, and the bytes a build retains."""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

READY = "serving state store on"
#: requests in flight in the throughput measures
IN_FLIGHT = 64


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = ", load avg " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()} ({sys.implementation.name}), "
        f"{platform.system()} {platform.release()}{load}"
    )


def start_emulator(
    host: str, port: int, *extra: str, tree: Path | None = None, head: list[str] | None = None
) -> subprocess.Popen[str]:
    """``python -m sskv_mapping.emulator --host HOST --port PORT *extra`` (``head`` in place of ``python -m ...``;
    from ``tree``'s sources if given); returns once it serves, or kills it and raises after 30 s."""
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [*(head or [sys.executable, "-m", "sskv_mapping.emulator"]), "--host", host, "--port", str(port), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tree)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        if " on http://" in line:
            proc.inspector_url = line.rsplit(" on ", 1)[1].strip()  # type: ignore[attr-defined]
        if READY in line:
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    proc.wait(5)
    raise RuntimeError("the emulator did not start")


async def in_flight_throughput(call: Callable[[], Awaitable[object]], ops: int) -> float:
    """``await call()`` ``ops`` times (rounded down to a multiple of :data:`IN_FLIGHT`), ``IN_FLIGHT`` at a time:
    calls per second."""
    per_worker = ops // IN_FLIGHT

    async def worker() -> None:
        for _ in range(per_worker):
            await call()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return per_worker * IN_FLIGHT / (time.perf_counter() - t0)


def traced(build: Callable[[], Any]) -> tuple[int, Any, tracemalloc.Snapshot]:
    """Bytes still allocated after ``build()`` (and a gc), with the snapshot; tracemalloc on only meanwhile."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        obj = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return after - before, obj, snapshot
