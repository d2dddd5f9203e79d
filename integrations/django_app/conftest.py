"""Fixtures of the example project's end-to-end tests: the demo site run as real server processes on loopback.

The state store comes from sskv-mapping's pytest plugin (docs/testing.md): ``statestore_url`` is a private
mosquitto with the emulator process serving it, started once per test session."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.procs import ServerProcess

APP_DIR = Path(__file__).resolve().parent


class DemoServer(ServerProcess):
    """``python serve.py 0`` in the example project: one instance of the site, its own process, started once it
    prints ``serving on URL``."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        env = {**env, "DEMO_INSTANCE": name}
        super().__init__([sys.executable, "serve.py", "0"], cwd=APP_DIR, env=env, listening=r"^serving on (\S+?)/?$")


@pytest.fixture(scope="module")
def servers(statestore_url: str) -> Iterator[tuple[DemoServer, DemoServer]]:
    """Two instances of the site (two processes) on the same broker and namespace, as behind a load balancer."""
    env = {**os.environ, "SSKV_URL": statestore_url, "SSKV_NAMESPACE": f"demo{uuid.uuid4().hex[:10]}"}
    with DemoServer("a", env) as a, DemoServer("b", env) as b:
        yield a, b
