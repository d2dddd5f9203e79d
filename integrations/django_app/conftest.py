"""Fixtures of the example project's end-to-end tests: the demo site run as real server processes on loopback.

The state store comes from sskv-mapping's pytest plugin (docs/testing.md): ``statestore_url`` is a private
mosquitto with the emulator process serving it, started once per test session."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

APP_DIR = Path(__file__).resolve().parent


class DemoServer:
    """``python serve.py 0`` in the example project: one instance of the site, its own process."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self._env = {**env, "DEMO_INSTANCE": name, "PYTHONUNBUFFERED": "1"}
        self._lines: list[str] = []
        self._listening = threading.Event()
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    @property
    def output(self) -> str:
        return "".join(self._lines)

    def start(self, timeout: float = 30.0) -> DemoServer:
        self._process = subprocess.Popen(
            [sys.executable, "serve.py", "0"],
            cwd=APP_DIR,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # drained all along: the request log must never fill the pipe and block the server
        threading.Thread(target=self._read, name=f"demo-{self.name}-output", daemon=True).start()
        self._listening.wait(timeout)  # set by the "serving on" line, or by the end of the output
        if not self.url:
            self.stop()
            raise RuntimeError(f"demo server {self.name} did not start:\n{self.output}")
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        try:
            for line in self._process.stdout:
                self._lines.append(line)
                if line.startswith("serving on "):
                    self.url = line.split()[-1].rstrip("/")
                    self._listening.set()
        finally:
            self._listening.set()  # the process ended its output: wake the starter (it checks url)

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            with contextlib.suppress(OSError):
                process.stdout.close()


@pytest.fixture(scope="module")
def servers(statestore_url: str) -> Iterator[tuple[DemoServer, DemoServer]]:
    """Two instances of the site (two processes) on the same broker and namespace, as behind a load balancer."""
    env = {**os.environ, "SSKV_URL": statestore_url, "SSKV_NAMESPACE": f"demo{uuid.uuid4().hex[:10]}"}
    a = DemoServer("a", env)
    b = DemoServer("b", env)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()
