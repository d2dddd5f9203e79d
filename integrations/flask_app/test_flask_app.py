"""End-to-end: the example Flask app over HTTP (Flask's test client) against mosquitto and the emulator process,
with two instances of the app sharing the state store as two deployments of it would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("flask_caching")

from flask import Flask
from flask.testing import FlaskClient

from flask_app.app import create_app
from sskv_mapping import KeyOperation, StateStoreDict
from sskv_mapping.integrations._common import close_shared_clients


@pytest.fixture
def name(statestore_namespace: str) -> str:
    return statestore_namespace


@pytest.fixture
def apps(statestore_url: str, name: str) -> Iterator[tuple[Flask, Flask]]:
    # statestore_url, statestore_namespace: sskv-mapping's pytest plugin (a private mosquitto and the emulator
    # process for the session, a namespace of the test's own); docs/testing.md
    pair = create_app(statestore_url, name=name, instance="A"), create_app(statestore_url, name=name, instance="B")
    yield pair
    for app in pair:  # each test has namespaces of its own: nothing to clear, only watches to stop
        app.extensions["sskv_settings"]().close()
    close_shared_clients()


@pytest.fixture
def a(apps: tuple[Flask, Flask]) -> FlaskClient:
    return apps[0].test_client()


@pytest.fixture
def b(apps: tuple[Flask, Flask]) -> FlaskClient:
    return apps[1].test_client()


def test_the_page_is_cached_in_the_store_and_served_by_either_instance(a: FlaskClient, b: FlaskClient) -> None:
    first = a.get("/").get_data(as_text=True)
    assert "<h1>Hello!</h1>" in first
    assert "render 1 by instance A" in first
    assert a.get("/").get_data(as_text=True) == first
    assert b.get("/").get_data(as_text=True) == first  # instance B never rendered it


def test_settings_written_by_one_instance_are_read_by_the_other(a: FlaskClient, b: FlaskClient) -> None:
    assert a.put("/settings/greeting", json="Hi").get_json() == {"greeting": "Hi"}
    assert b.get("/settings").get_json() == {"greeting": "Hi"}
    page = b.get("/").get_data(as_text=True)  # the write cleared the cached page: B renders it anew
    assert "<h1>Hi!</h1>" in page and "by instance B" in page


def test_a_change_reaches_the_other_instance_that_already_read_the_value(
    apps: tuple[Flask, Flask], a: FlaskClient, b: FlaskClient, name: str
) -> None:
    a.put("/settings/greeting", json="Hi")
    assert b.get("/settings").get_json() == {"greeting": "Hi"}  # B now keeps it in its local cache
    settings_b: StateStoreDict[object] = apps[1].extensions["sskv_settings"]()
    # B's dict learns of changes from the key's notifications; a watch started after B's own is told after B
    with settings_b.client.watch(f"{name}-settings/greeting") as changes:
        a.put("/settings/greeting", json="Hey")
        assert changes.next(timeout=5).op is KeyOperation.SET
    assert b.get("/settings").get_json() == {"greeting": "Hey"}
    with settings_b.client.watch(f"{name}-settings/greeting") as changes:
        assert a.delete("/settings/greeting").status_code == 204
        assert changes.next(timeout=5).op is KeyOperation.DELETE
    assert b.get("/settings").get_json() == {}
    assert b.delete("/settings/greeting").status_code == 404


def test_visits_count_exactly_across_instances(a: FlaskClient, b: FlaskClient) -> None:
    assert [c.post("/visits").get_json()["visits"] for c in (a, b, a, b)] == [1, 2, 3, 4]
