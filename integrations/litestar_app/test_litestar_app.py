"""End-to-end: the example Litestar app over HTTP (Litestar's TestClient) against mosquitto and the emulator
process, with two instances of the app sharing the state store as two deployments of it would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("litestar")

from litestar import Litestar
from litestar.testing import TestClient

from litestar_app.app import create_app
from sskv_mapping import AsyncStateStoreDict
from tests._support.example_apps import (
    check_a_change_reaches_the_reader,
    check_a_session_is_shared,
    check_the_page_is_shared,
    check_the_settings_are_shared,
)

Clients = tuple[TestClient[Litestar], TestClient[Litestar]]


@pytest.fixture
def clients(statestore_url: str, statestore_namespace: str) -> Iterator[Clients]:
    # statestore_url, statestore_namespace: sskv-mapping's pytest plugin (a private mosquitto and the emulator
    # process for the session, a namespace of the test's own); docs/testing.md
    app_a = create_app(statestore_url, name=statestore_namespace, instance="A")
    app_b = create_app(statestore_url, name=statestore_namespace, instance="B")
    with TestClient(app_a) as a, TestClient(app_b) as b:
        yield a, b


def test_the_page_is_cached_in_the_store_and_served_by_either_instance(clients: Clients) -> None:
    assert "render 1 by instance A" in check_the_page_is_shared(*clients)


def test_a_session_started_on_one_instance_is_valid_on_the_other(clients: Clients) -> None:
    check_a_session_is_shared(*clients, instances=("A", "B"))


def test_settings_written_by_one_instance_are_read_by_the_other(clients: Clients) -> None:
    assert "by instance B" in check_the_settings_are_shared(*clients)  # B renders the page anew


def test_a_change_reaches_the_other_instance_that_already_read_the_value(
    clients: Clients, statestore_namespace: str
) -> None:
    a, b = clients
    settings_b: AsyncStateStoreDict[object] = b.app.state.settings
    key = f"{statestore_namespace}-settings/greeting"
    check_a_change_reaches_the_reader(a, b, b.blocking_portal.call, settings_b.client, key)


def test_the_stores_are_namespaced_under_the_app(clients: Clients, statestore_namespace: str) -> None:
    name = statestore_namespace
    a, _ = clients
    a.get("/")
    a.post("/login", json={"user": "ada"})
    assert a.app.stores.get("sessions").namespace == f"{name}.sessions"  # type: ignore[attr-defined]
    assert a.app.stores.get("response_cache").namespace == f"{name}.response_cache"  # type: ignore[attr-defined]
