"""The example FastAPI app under ``gunicorn --preload -w 2`` with uvicorn workers (issue 37, finding 1): the app,
and the settings its lifespan connects with, are made in the parent; each worker connects in its own lifespan with a
client id of its own, so neither takes over the other's session. Against mosquitto and the emulator process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("gunicorn")
if sys.platform == "win32":
    pytest.skip("gunicorn forks its workers", allow_module_level=True)

from tests._support.workers import uvicorn_workers

pytestmark = pytest.mark.broker


def test_gunicorn_preload_two_uvicorn_workers_serve_the_example(
    statestore_url: str, statestore_namespace: str, tmp_path: Path
) -> None:
    app = f"fastapi_app.app:create_app({statestore_url!r}, name={statestore_namespace!r})"
    with uvicorn_workers(app, tmp_path) as server:
        statuses = server.until_both_workers_served(lambda: server.request("POST", "/visits"))
        status, body = server.request("POST", "/visits")  # exact across the workers: no session taken over
        assert status == 200 and json.loads(body) == {"visits": len(statuses) + 1}, body
        status, body = server.request("PUT", "/settings", {"greeting": "Hi"})
        assert status == 200 and json.loads(body) == {"greeting": "Hi"}, body
    assert "Traceback" not in server.output and "taken over" not in server.output, server.output
