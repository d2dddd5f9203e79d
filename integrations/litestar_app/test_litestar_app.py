"""End-to-end: the example Litestar app over HTTP (Litestar's TestClient) against mosquitto and the emulator
process, with two instances of the app sharing the state store as two deployments of it would."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("litestar")

from litestar import Litestar
from litestar.testing import TestClient

from litestar_app.app import create_app
from sskv_mapping import AsyncStateStoreDict, KeyEvent, KeyOperation

Clients = tuple[TestClient[Litestar], TestClient[Litestar]]


@pytest.fixture
def name(statestore_namespace: str) -> str:
    return statestore_namespace


@pytest.fixture
def clients(statestore_url: str, name: str) -> Iterator[Clients]:
    # statestore_url, statestore_namespace: sskv-mapping's pytest plugin (a private mosquitto and the emulator
    # process for the session, a namespace of the test's own); docs/testing.md
    app_a = create_app(statestore_url, name=name, instance="A")
    app_b = create_app(statestore_url, name=name, instance="B")
    with TestClient(app_a) as a, TestClient(app_b) as b:
        yield a, b


def test_the_page_is_cached_in_the_store_and_served_by_either_instance(clients: Clients) -> None:
    a, b = clients
    first = a.get("/").text
    assert "<h1>Hello!</h1>" in first
    assert "render 1 by instance A" in first
    assert a.get("/").text == first
    assert b.get("/").text == first  # instance B never rendered it


def test_a_session_started_on_one_instance_is_valid_on_the_other(clients: Clients) -> None:
    a, b = clients
    assert a.get("/me").status_code == 401
    assert a.post("/login", json={"user": "ada"}).json() == {"user": "ada"}
    assert a.get("/me").json() == {"user": "ada", "instance": "A"}
    b.cookies = a.cookies  # the same browser, routed to the other instance
    assert b.get("/me").json() == {"user": "ada", "instance": "B"}
    assert b.post("/logout").status_code == 204  # deletes the session in the store
    a.cookies.clear()
    a.cookies.update(b.cookies)
    assert a.get("/me").status_code == 401


def test_settings_written_by_one_instance_are_read_by_the_other(clients: Clients) -> None:
    a, b = clients
    assert a.put("/settings", json={"greeting": "Hi"}).json() == {"greeting": "Hi"}
    assert b.get("/settings").json() == {"greeting": "Hi"}
    page = b.get("/").text  # the write emptied the response cache: B renders the page anew
    assert "<h1>Hi!</h1>" in page and "by instance B" in page


def test_a_change_reaches_the_other_instance_that_already_read_the_value(clients: Clients, name: str) -> None:
    a, b = clients
    a.put("/settings", json={"greeting": "Hi"})
    assert b.get("/settings").json() == {"greeting": "Hi"}  # B now keeps it in its local cache
    settings_b: AsyncStateStoreDict[object] = b.app.state.settings
    seen = threading.Event()

    def told(event: KeyEvent) -> None:
        if event.op is KeyOperation.SET:
            seen.set()

    # B's dict learns of changes from the key's notifications; a watch registered after B's own is told after B
    sub = b.blocking_portal.call(settings_b.client.subscribe_key, f"{name}-settings/greeting", told)
    try:
        a.put("/settings", json={"greeting": "Hey"})
        assert seen.wait(5)
    finally:
        b.blocking_portal.call(sub.close)
    assert b.get("/settings").json() == {"greeting": "Hey"}


def test_the_stores_are_namespaced_under_the_app(clients: Clients, name: str) -> None:
    a, _ = clients
    a.get("/")
    a.post("/login", json={"user": "ada"})
    assert a.app.stores.get("sessions").namespace == f"{name}.sessions"  # type: ignore[attr-defined]
    assert a.app.stores.get("response_cache").namespace == f"{name}.response_cache"  # type: ignore[attr-defined]
