"""The Django backend in forked workers (issue 37, finding 1): a process that used the cache forks two workers
(uWSGI's way, and the demo site under ``gunicorn --preload -w 2``); each worker connects with a client id of its
own, both serve, and the parent's cache goes on working. Against mosquitto and the emulator process."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")

from sskv_mapping.integrations._common import close_shared_clients
from sskv_mapping.integrations.django import StateStoreCache
from tests._support.workers import Gunicorn, forked_workers, gunicorn_config

from ..conftest import APP_DIR

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_a_process_that_used_the_cache_forks_two_workers(statestore_url: str) -> None:
    namespace = f"fork{uuid.uuid4().hex[:10]}"
    cache = StateStoreCache(statestore_url, {"OPTIONS": {"namespace": namespace, "codec": "json"}})
    try:
        cache.set("parent", 1)
        cache.add("hits", 0, timeout=None)
        parent_id = cache.client.client_id

        def work() -> dict[str, Any]:
            pid = os.getpid()
            cache.set(f"from-{pid}", pid)
            hits = [cache.incr("hits") for _ in range(5)]
            hits.append(asyncio.run(cache.aincr("hits")))  # the async methods too, on the worker's own loop
            return {"pid": pid, "hits": hits, "parent": cache.get("parent"), "client_id": cache.client.client_id}

        reports = forked_workers(2, work)
        for report in reports:
            assert "error" not in report, report
            assert report["parent"] == 1, report
        ids = {r["client_id"] for r in reports}
        assert len(ids) == 2 and parent_id not in ids, (parent_id, ids)
        assert sorted(h for r in reports for h in r["hits"]) == list(range(1, 13))  # exact: no session taken over
        # the parent: its connection was not taken over; it reads the workers' writes and goes on writing
        assert cache.client.client_id == parent_id and cache.client.async_client.failure is None
        assert cache.get_many([f"from-{r['pid']}" for r in reports]) == {f"from-{r['pid']}": r["pid"] for r in reports}
        assert cache.incr("hits") == 13
    finally:
        cache.clear()
        close_shared_clients()


GUNICORN_CONF = """
def when_ready(server):
    # the arbiter uses the cache after --preload loaded the site and before it forks the workers
    from django.core.cache import cache

    cache.set("arbiter", "was here", timeout=None)
    assert cache.get("arbiter") == "was here"
"""


def test_gunicorn_preload_two_workers_serve_the_demo_site(statestore_url: str, tmp_path: Path) -> None:
    conf = gunicorn_config(tmp_path, GUNICORN_CONF)
    env = {
        **os.environ,
        "SSKV_URL": statestore_url,
        "SSKV_NAMESPACE": f"demo{uuid.uuid4().hex[:10]}",
        "DJANGO_SETTINGS_MODULE": "demo_site.settings",
    }
    env.pop("DEMO_INSTANCE", None)
    with Gunicorn("demo_site.wsgi:application", APP_DIR, env, "-c", str(conf)) as server:
        statuses = server.until_both_workers_served(lambda: server.request("POST", "/counter/"))
        status, body = server.request("POST", "/counter/async/")
        assert status == 200 and json.loads(body)["hits"] == len(statuses) + 1, body
        status, body = server.request("POST", "/config/", {"feature": True})
        assert status == 200 and json.loads(body)["config"] == {"feature": True}, body
        status, body = server.request("GET", "/report/")
        assert status == 200, body
    assert "Traceback" not in server.output, server.output
