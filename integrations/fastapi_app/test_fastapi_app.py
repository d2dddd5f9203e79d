"""End-to-end: the example FastAPI app over HTTP (FastAPI's TestClient) against mosquitto and the emulator
process, with two instances of the app sharing the state store as two deployments of it would."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from fastapi.testclient import TestClient

from fastapi_app.app import create_app
from sskv_mapping import KeyEvent, KeyOperation
from sskv_mapping.integrations.fastapi import AppStateStore

Clients = tuple[TestClient, TestClient]


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


def _store(client: TestClient) -> AppStateStore:
    assert isinstance(client.app, FastAPI)
    store: AppStateStore = client.app.state.statestore
    return store


def test_the_page_is_cached_in_the_store_and_served_by_either_instance(clients: Clients) -> None:
    a, b = clients
    first = a.get("/").text
    assert "<h1>Hello!</h1>" in first
    assert "render 1 by instance A" in first
    assert a.get("/").text == first
    assert b.get("/").text == first  # instance B never rendered it


def test_settings_written_by_one_instance_are_read_by_the_other(clients: Clients) -> None:
    a, b = clients
    assert a.put("/settings", json={"greeting": "Hi"}).json() == {"greeting": "Hi"}
    assert b.get("/settings").json() == {"greeting": "Hi"}
    page = b.get("/").text  # the write emptied the page cache: B renders the page anew
    assert "<h1>Hi!</h1>" in page and "by instance B" in page


def test_a_change_reaches_the_other_instance_that_already_read_the_value(clients: Clients, name: str) -> None:
    a, b = clients
    a.put("/settings", json={"greeting": "Hi"})
    assert b.get("/settings").json() == {"greeting": "Hi"}  # B now keeps it in its local cache
    seen = threading.Event()

    def told(event: KeyEvent) -> None:
        if event.op is KeyOperation.SET:
            seen.set()

    # B's dict learns of changes from the key's notifications; a watch registered after B's own is told after B
    assert b.portal is not None
    client_b = _store(b).client
    sub = b.portal.call(client_b.subscribe_key, f"{name}-settings/greeting", told)
    try:
        a.put("/settings", json={"greeting": "Hey"})
        assert seen.wait(5)
    finally:
        b.portal.call(sub.close)
    assert b.get("/settings").json() == {"greeting": "Hey"}


def test_visits_count_exactly_across_instances(clients: Clients) -> None:
    a, b = clients
    assert [c.post("/visits").json()["visits"] for c in (a, b, a, b)] == [1, 2, 3, 4]


def test_each_instance_has_one_client_of_its_own(clients: Clients) -> None:
    a, b = clients
    a.get("/")
    assert _store(a).client is not _store(b).client
    assert _store(a).client.state.value == "connected"
