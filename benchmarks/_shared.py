"""What the benchmark scripts share: the machine line they print, and the emulator process they run (a
``subprocess.Popen``: they stop it, read its pid, or its inspector's URL as ``inspector_url``)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

READY = "serving state store on"


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
