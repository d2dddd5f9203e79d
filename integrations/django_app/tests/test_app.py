"""End to end over HTTP: two instances of the demo site (two processes, ``serve.py``) on one mosquitto + the
emulator process, as two workers behind a load balancer. Cached pages, sessions, the hit counter and the shared
settings written through one instance are seen by the other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("django")
httpx = pytest.importorskip("httpx")

pytest.importorskip("constance")

from constance.codecs import dumps  # noqa: E402

from sskv_mapping import StateStoreDict  # noqa: E402

from ..conftest import APP_DIR, DemoServer  # noqa: E402

Servers = tuple[DemoServer, DemoServer]


def get(server: DemoServer, path: str, **kwargs: Any) -> Any:
    response = httpx.get(server.url + path, timeout=10, **kwargs)
    assert response.status_code == 200, f"{response.text}\nserver {server.name} said:\n{server.output[-4000:]}"
    return response


def post_json(server: DemoServer, path: str, body: Any = None) -> dict[str, Any]:
    response = httpx.post(server.url + path, json=body, timeout=10)
    assert response.status_code == 200, f"{response.text}\nserver {server.name} said:\n{server.output[-4000:]}"
    result: dict[str, Any] = response.json()
    return result


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Another process's change reaches a local cache through a notification, milliseconds later: ask again until
    ``check()`` holds (each try is a real request), failing after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the change was not seen in time"
        time.sleep(0.01)  # a polling interval between tries, not a wait standing in for the change


def test_project_passes_djangos_checks(statestore_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=APP_DIR,
        env={**os.environ, "SSKV_URL": statestore_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_page_is_served_from_the_cache_by_both_instances(servers: Servers) -> None:
    a, b = servers
    host = {"Host": "localhost"}  # what a load balancer forwards: the page's cache key includes the host
    first = get(a, "/report/", headers=host)
    assert first.json()["rendered_by"] == "a"
    assert "max-age=60" in first.headers["Cache-Control"]
    second = get(a, "/report/", headers=host)
    assert second.json() == first.json()  # not rendered again: served from the state store
    third = get(b, "/report/", headers=host)
    assert third.json() == first.json()  # instance b serves the page instance a rendered
    other = get(b, "/report/", headers={"Host": "127.0.0.1"})
    assert other.json()["render_id"] != first.json()["render_id"]  # another URL, another cache entry


def test_session_survives_across_requests_and_instances(servers: Servers) -> None:
    a, b = servers
    with httpx.Client(timeout=10) as browser:  # keeps the session cookie, as a browser does
        assert browser.get(a.url + "/visits/").json() == {"visits": 1, "served_by": "a"}
        assert browser.get(a.url + "/visits/").json() == {"visits": 2, "served_by": "a"}
        assert browser.get(b.url + "/visits/").json() == {"visits": 3, "served_by": "b"}
        assert browser.get(a.url + "/visits/").json()["visits"] == 4
    with httpx.Client(timeout=10) as other_browser:
        assert other_browser.get(b.url + "/visits/").json()["visits"] == 1  # a new visitor, a new session


def test_counter_is_shared_and_exact_under_concurrent_requests(servers: Servers) -> None:
    a, b = servers
    before = get(b, "/counter/").json()["hits"]
    targets = [a, b] * 15
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda s: post_json(s, "/counter/")["hits"], targets))
    assert sorted(results) == list(range(before + 1, before + 31))  # every increment counted exactly once
    assert get(a, "/counter/").json()["hits"] == before + 30
    assert post_json(b, "/counter/async/")["hits"] == before + 31  # the async view counts on the same key
    assert get(a, "/counter/").json()["hits"] == before + 31


def test_shared_config_changed_through_one_instance_is_seen_by_the_other(servers: Servers) -> None:
    a, b = servers
    assert "greeting" not in get(b, "/config/").json()["config"]
    assert post_json(a, "/config/", {"greeting": "hello", "beta": False})["config"]["greeting"] == "hello"
    eventually(lambda: get(b, "/config/").json()["config"] == {"greeting": "hello", "beta": False})
    post_json(b, "/config/", {"beta": True})
    eventually(lambda: get(a, "/config/").json()["config"] == {"greeting": "hello", "beta": True})


def test_a_constance_setting_changed_in_the_store_is_seen_by_both_instances(
    servers: Servers, statestore_url: str
) -> None:
    a, b = servers
    assert get(a, "/banner/").json()["banner"] == "Welcome"  # constance's default
    assert get(b, "/banner/").json()["banner"] == "Welcome"
    namespace = a._env["SSKV_NAMESPACE"] + "-constance"  # the settings' CONSTANCE_SSKV_NAMESPACE
    with StateStoreDict.connect(statestore_url, namespace=namespace, codec="str") as store:
        store["BANNER"] = dumps("Sale today")  # what another instance's admin (constance's backend) writes
    eventually(lambda: get(a, "/banner/").json()["banner"] == "Sale today")
    eventually(lambda: get(b, "/banner/").json()["banner"] == "Sale today")
