"""The active/passive pair end to end: two worker processes, the active one killed, the standby takes over
and continues the cursor (never going back). Synchronisation on the workers' output, never a sleep."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().with_name("worker.py")


class Worker:
    def __init__(self, url: str, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), url, name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def wait_for(self, predicate: Any, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            record = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if predicate(record):
                return record

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def test_the_standby_takes_over_and_continues(statestore_url: str) -> None:
    # statestore_url: sskv-mapping's pytest plugin, a private mosquitto with the emulator process (docs/testing.md)
    a = Worker(statestore_url, "a")
    a.wait_for(lambda r: r.get("state") == "active")
    b = Worker(statestore_url, "b")
    try:
        b.wait_for(lambda r: r.get("state") == "standby")
        last_a = a.wait_for(lambda r: r.get("cursor", 0) >= 5)["cursor"]
        killed = time.monotonic()
        a.stop()
        b.wait_for(lambda r: r.get("state") == "active")
        first_b = b.wait_for(lambda r: "cursor" in r)
        assert first_b["cursor"] > last_a  # continued from where the cursor stood, never back
        assert first_b["t"] - killed < 2.0 + 1.5  # within the term (2 s), with a margin for CI
    finally:
        a.stop()
        b.stop()
