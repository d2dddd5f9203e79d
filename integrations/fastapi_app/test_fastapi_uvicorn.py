"""End-to-end: the example FastAPI app served the way its docstring says (``uvicorn fastapi_app.app:app``), in
real ``uvicorn`` processes on uvloop (``--loop uvloop``, what ``uvicorn[standard]`` picks by default), two
instances sharing the state store through mosquitto and the emulator process."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
if sys.platform == "win32":
    pytest.skip("uvloop has no Windows build", allow_module_level=True)
pytest.importorskip("uvloop")

from tests._support.example_apps import (
    check_a_clean_stop,
    check_the_page_is_shared,
    check_the_settings_are_shared,
    two_clients,
)
from tests._support.uvicorn_server import two_servers

pytestmark = pytest.mark.broker
APP = "fastapi_app.app:app"


def test_the_app_serves_on_uvloop_and_shares_the_store(private_store_url: str) -> None:
    with two_servers(APP, sskv_url=private_store_url) as servers, two_clients(servers) as (ca, cb):
        check_the_page_is_shared(ca, cb)
        check_the_settings_are_shared(ca, cb)
        counts = [c.post("/visits").json()["visits"] for c in (ca, cb, ca, cb)]
        assert counts == [1, 2, 3, 4]  # one counter across both processes


def test_the_app_stops_cleanly_on_uvloop(private_store_url: str) -> None:
    check_a_clean_stop(APP, private_store_url)
