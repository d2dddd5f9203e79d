"""End-to-end: the example FastAPI app over HTTP (FastAPI's TestClient) against mosquitto and the emulator
process, with two instances of the app sharing the state store as two deployments of it would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from fastapi.testclient import TestClient

from fastapi_app.app import create_app
from sskv_mapping.integrations.fastapi import AppStateStore
from tests._support.example_apps import (
    check_a_change_reaches_the_reader,
    check_the_page_is_shared,
    check_the_settings_are_shared,
)

Clients = tuple[TestClient, TestClient]


@pytest.fixture
def clients(statestore_url: str, statestore_namespace: str) -> Iterator[Clients]:
    # statestore_url, statestore_namespace: sskv-mapping's pytest plugin (a private mosquitto and the emulator
    # process for the session, a namespace of the test's own); docs/testing.md
    app_a = create_app(statestore_url, name=statestore_namespace, instance="A")
    app_b = create_app(statestore_url, name=statestore_namespace, instance="B")
    with TestClient(app_a) as a, TestClient(app_b) as b:
        yield a, b


def _store(client: TestClient) -> AppStateStore:
    assert isinstance(client.app, FastAPI)
    store: AppStateStore = client.app.state.statestore
    return store


def test_the_page_is_cached_in_the_store_and_served_by_either_instance(clients: Clients) -> None:
    assert "render 1 by instance A" in check_the_page_is_shared(*clients)


def test_settings_written_by_one_instance_are_read_by_the_other(clients: Clients) -> None:
    assert "by instance B" in check_the_settings_are_shared(*clients)  # B renders the page anew


def test_a_change_reaches_the_other_instance_that_already_read_the_value(
    clients: Clients, statestore_namespace: str
) -> None:
    a, b = clients
    assert b.portal is not None
    key = f"{statestore_namespace}-settings/greeting"
    check_a_change_reaches_the_reader(a, b, b.portal.call, _store(b).client, key)


def test_visits_count_exactly_across_instances(clients: Clients) -> None:
    a, b = clients
    assert [c.post("/visits").json()["visits"] for c in (a, b, a, b)] == [1, 2, 3, 4]


def test_each_instance_has_one_client_of_its_own(clients: Clients) -> None:
    a, b = clients
    a.get("/")
    assert _store(a).client is not _store(b).client
    assert _store(a).client.state.value == "connected"
