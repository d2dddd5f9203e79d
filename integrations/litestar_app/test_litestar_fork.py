"""The example Litestar app under ``gunicorn --preload -w 2`` with uvicorn workers (issue 37, finding 1): the store
is made with the app in the parent and connects in each worker's lifespan, with a client id of its own there.
Against mosquitto and the emulator process."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("litestar")
pytest.importorskip("uvicorn")
pytest.importorskip("gunicorn")
if sys.platform == "win32":
    pytest.skip("gunicorn forks its workers", allow_module_level=True)

from tests._support.workers import uvicorn_workers

pytestmark = pytest.mark.broker


def test_gunicorn_preload_two_uvicorn_workers_serve_the_example(
    statestore_url: str, statestore_namespace: str, tmp_path: Path
) -> None:
    app = f"litestar_app.app:create_app({statestore_url!r}, name={statestore_namespace!r})"
    numbers = itertools.count()
    with uvicorn_workers(app, tmp_path) as server:
        statuses = server.until_both_workers_served(
            lambda: server.request("PUT", "/settings", {f"k{next(numbers)}": 1})
        )
        status, body = server.request("GET", "/settings")
        assert status == 200 and len(json.loads(body)) == len(statuses), body  # every worker's write is there
    assert "Traceback" not in server.output and "taken over" not in server.output, server.output
