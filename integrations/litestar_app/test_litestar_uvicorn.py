"""End-to-end: the example Litestar app served the way its docstring says (``uvicorn litestar_app.app:app``), in
real ``uvicorn`` processes on uvloop (``--loop uvloop``, what ``uvicorn[standard]`` picks by default), two
instances sharing sessions, the response cache and settings through mosquitto and the emulator process."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("litestar")
pytest.importorskip("uvicorn")
if sys.platform == "win32":
    pytest.skip("uvloop has no Windows build", allow_module_level=True)
pytest.importorskip("uvloop")

import httpx

from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import start_emulator
from tests._support.uvicorn_server import STOPPED, UvicornServer

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    """A private mosquitto with the emulator process serving it (stopped with the module)."""
    broker = MosquittoBroker().start()
    try:
        with start_emulator(broker.host, broker.port):
            yield f"mqtt://{broker.host}:{broker.port}"
    finally:
        broker.stop()


@pytest.fixture
def servers(store_url: str) -> Iterator[tuple[UvicornServer, UvicornServer]]:
    with (
        UvicornServer("litestar_app.app:app", sskv_url=store_url, loop="uvloop") as a,
        UvicornServer("litestar_app.app:app", sskv_url=store_url, loop="uvloop") as b,
    ):
        yield a, b


def test_the_app_serves_on_uvloop_and_shares_the_store(servers: tuple[UvicornServer, UvicornServer]) -> None:
    a, b = servers
    for server in servers:  # uvloop's extension is loaded in the serving process: the app runs on its loop
        assert "uvloop/loop." in server.loaded_modules()
    with httpx.Client(base_url=a.base_url, timeout=30) as ca, httpx.Client(base_url=b.base_url, timeout=30) as cb:
        page = ca.get("/")
        assert page.status_code == 200
        assert "<h1>Hello!</h1>" in page.text
        assert cb.get("/").text == page.text  # B serves A's render from the shared response cache
        assert ca.get("/me").status_code == 401
        assert ca.post("/login", json={"user": "ada"}).json() == {"user": "ada"}
        cb.cookies = ca.cookies  # the same browser, routed to the other process
        assert cb.get("/me").json() == {"user": "ada", "instance": "1"}
        assert cb.post("/logout").status_code == 204  # deletes the session in the store
        ca.cookies = cb.cookies
        assert ca.get("/me").status_code == 401
        assert ca.put("/settings", json={"greeting": "Hi"}).json() == {"greeting": "Hi"}
        assert cb.get("/settings").json() == {"greeting": "Hi"}
        assert "<h1>Hi!</h1>" in cb.get("/").text  # the write emptied the shared response cache


def test_the_app_stops_cleanly_on_uvloop(store_url: str) -> None:
    server = UvicornServer("litestar_app.app:app", sskv_url=store_url, loop="uvloop").start()
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        assert c.get("/settings").status_code == 200
    status = server.stop()
    # uvicorn re-raises the SIGTERM it handled once shut down (0.29+): killed by it, after a clean shutdown
    assert status in (0, -signal.SIGTERM), server.output
    assert STOPPED in server.output  # the lifespans' exits (closing the store) ran and succeeded
    assert "Traceback" not in server.output
