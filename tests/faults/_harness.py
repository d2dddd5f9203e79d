"""Support code for the fault-injection tests (not a test module): worker processes and their reports."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One ``_worker.py`` child; its JSON lines are collected by a reader thread into ``events``."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = [sys.executable, str(WORKER), *argv]
        self.events: list[dict[str, Any]] = []
        self.junk: list[str] = []  # stdout lines that were not JSON (there should be none)
        self._cond = threading.Condition()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=REPO_ROOT,
            close_fds=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"worker-out-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            try:
                event = json.loads(raw)
            except ValueError:
                self.junk.append(raw.decode("utf-8", "replace"))
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"ev": "eof"})
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float, start: int = 0) -> dict[str, Any]:
        """The first event from index ``start`` on that satisfies ``predicate``; ``TimeoutError`` if none comes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self.events):
                    event = self.events[i]
                    if predicate(event):
                        return event
                    if event["ev"] == "eof":
                        raise RuntimeError(f"worker {self.name} exited early:\n{self.stderr_tail()}")
                    i += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"worker {self.name}: no matching event within {timeout} s")
                self._cond.wait(remaining)

    def mark(self) -> int:
        """The index of the next event (for ``wait_for(start=...)``)."""
        with self._cond:
            return len(self.events)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e["ev"] == kind]

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()

    def finish(self, timeout: float) -> dict[str, Any]:
        """Ask it to stop and wait for its ``done`` report."""
        self.send("stop")
        done = self.wait_for(lambda e: e["ev"] == "done", timeout)
        self.process.wait(timeout)
        return done

    def stderr_tail(self, lines: int = 30) -> str:
        self._stderr.seek(0)
        return "\n".join(self._stderr.read().decode("utf-8", "replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self._reader.join(5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()
