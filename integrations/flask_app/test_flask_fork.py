"""The example Flask app in forked workers (issue 37, finding 1): made and used in the parent, then served by two
``os.fork()`` children (uWSGI's way) and by ``gunicorn --preload -w 2``: every worker serves with a client id of its
own, and the parent's connection goes on working. Against mosquitto and the emulator process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("flask_caching")

from flask import Flask

from flask_app.app import create_app
from sskv_mapping.integrations._common import close_shared_clients
from sskv_mapping.integrations.flask_caching import StateStoreCache
from tests._support.workers import Gunicorn, forked_workers

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def app(statestore_url: str, statestore_namespace: str) -> Iterator[Flask]:
    app = create_app(statestore_url, name=statestore_namespace, instance="parent")
    yield app
    app.extensions["sskv_settings"]().close()
    close_shared_clients()


def _backend(app: Flask) -> StateStoreCache:
    return cast(StateStoreCache, app.extensions["cache"][next(iter(app.extensions["cache"]))])


def test_forked_workers_serve_and_the_parent_keeps_working(app: Flask) -> None:
    web = app.test_client()
    assert web.get("/").status_code == 200  # the parent connected and used the cache and the settings
    assert web.put("/settings/from-parent", json=1).status_code == 200
    parent_id = _backend(app).client.client_id

    def work() -> dict[str, Any]:
        child = app.test_client()
        pid = os.getpid()
        return {
            "page": child.get("/").status_code,
            "settings": child.get("/settings").get_json(),
            "visits": [child.post("/visits").get_json()["visits"] for _ in range(5)],
            "client_id": _backend(app).client.client_id,
            "pid": pid,
        }

    reports = forked_workers(2, work)
    for report in reports:
        assert "error" not in report, report
        assert report["page"] == 200 and report["settings"] == {"from-parent": 1}, report
    ids = {r["client_id"] for r in reports}
    assert len(ids) == 2 and parent_id not in ids, (parent_id, ids)  # a client id of its own in each worker
    assert sorted(v for r in reports for v in r["visits"]) == list(range(1, 11))  # exact across both workers
    # the parent: the same connection, still serving, and it counts on from what the workers counted
    backend = _backend(app)
    assert backend.client.client_id == parent_id and backend.client.async_client.failure is None
    assert web.post("/visits").get_json() == {"visits": 11}
    assert web.put("/settings/after", json=2).status_code == 200
    assert web.get("/settings").get_json() == {"from-parent": 1, "after": 2}


def test_gunicorn_preload_two_workers_serve_the_example(statestore_url: str, statestore_namespace: str) -> None:
    env = {**os.environ, "SSKV_URL": statestore_url}
    app = f"flask_app.app:create_app(name={statestore_namespace!r})"
    with Gunicorn(app, Path(__file__).resolve().parent.parent, env) as server:
        statuses = server.until_both_workers_served(lambda: server.request("POST", "/visits"))
        status, body = server.request("POST", "/visits")  # exact across the workers
        assert status == 200 and f'"visits":{len(statuses) + 1}' in body.replace(" ", ""), body
        assert server.request("PUT", "/settings/greeting", "Hi")[0] == 200  # (clears the pages and the counter)
        status, page = server.request("GET", "/")
        assert status == 200 and "<h1>Hi!</h1>" in page, server.output
    assert "Traceback" not in server.output, server.output
