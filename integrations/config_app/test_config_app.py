"""End-to-end: the config app served by uvicorn (on uvloop) against mosquitto + the emulator process; a value
flipped with the ``sskv set`` CLI changes the service's answers, with no restart, and the delay is measured (from the
CLI's exit, so an upper bound: it includes one HTTP round trip). An invalid value is rejected and logged."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("pydantic_settings")
pytest.importorskip("uvicorn")
if sys.platform == "win32":
    pytest.skip("uvloop has no Windows build", allow_module_level=True)
pytest.importorskip("uvloop")

import httpx

from tests._support.uvicorn_server import UvicornServer

pytestmark = pytest.mark.broker


@pytest.fixture
def served(private_store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[UvicornServer, str]]:
    namespace = f"config-app-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SSKV_CONFIG_NAMESPACE", namespace)
    with UvicornServer("config_app.app:app", sskv_url=private_store_url, loop="uvloop") as server:
        yield server, namespace


def sskv_set(url: str, key: str, value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sskv_mapping.cli", "set", key, value, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def until(client: httpx.Client, path: str, wanted: Callable[[Any], bool], timeout: float = 10) -> float:
    """Seconds until ``GET path`` answers what ``wanted`` accepts (asked again at once: the condition is the wait)."""
    t0 = time.perf_counter()
    while not wanted(client.get(path).json()):
        assert time.perf_counter() - t0 < timeout, f"{path} did not change"
    return time.perf_counter() - t0


def test_a_setting_flipped_with_sskv_set_changes_the_service_live(
    served: tuple[UvicornServer, str], private_store_url: str
) -> None:
    server, namespace = served
    store_url = private_store_url
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        assert c.get("/greet").json() == {"message": "Hello!"}
        assert c.get("/items").json() == [0, 1, 2]
        delays = []
        for greeting in ["Hola", "Salut", "Ciao", "Hallo", "Hej"]:
            sskv_set(store_url, f"{namespace}/greeting", greeting)
            delays.append(until(c, "/greet", lambda got, g=greeting: got == {"message": f"{g}!"}))
        sskv_set(store_url, f"{namespace}/max_items", "5")
        until(c, "/items", lambda got: got == [0, 1, 2, 3, 4])
        print(
            f"\nseen {statistics.median(delays) * 1000:.1f} ms (median of 5; max {max(delays) * 1000:.1f} ms) "
            "after sskv set returned"
        )

        sskv_set(store_url, f"{namespace}/max_items", "0")  # fails validation: rejected, logged, 5 stays
        until(c, "/settings", lambda got: got["rejected"] == 1)
        assert c.get("/items").json() == [0, 1, 2, 3, 4]
        assert c.get("/greet").json() == {"message": "Hej!"}
    server.stop()
    assert "max_items" in server.output and "greater than 0" in server.output, server.output
