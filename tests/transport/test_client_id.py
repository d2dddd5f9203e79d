"""Client ids that cannot form the response topic are refused when the settings are made (issue 37, finding 3),
and a generated id is never shared with a forked child (finding 1)."""

from __future__ import annotations

import json
import os

import pytest

from sskv_mapping import AsyncStateStoreClient, ConfigurationError, StateStoreClient, StateStoreDict
from sskv_mapping._protocol.topics import response_topic
from sskv_mapping._transport.settings import ConnectionSettings, generate_client_id
from tests._support.workers import forked_workers


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("mqtt://127.0.0.1:1883?client_id=%2B", "wildcard"),
        ("mqtt://127.0.0.1:1883?client_id=%23", "wildcard"),
        ("mqtt://127.0.0.1:1883?client_id=app-%2B-1", "wildcard"),
        ("mqtt://127.0.0.1:1883?client_id=a%00b", "NUL"),
    ],
)
def test_a_client_id_that_cannot_be_in_a_topic_is_refused_from_the_url(url: str, what: str) -> None:
    with pytest.raises(ConfigurationError, match=what) as caught:
        ConnectionSettings.from_url(url)
    assert "response topic" in str(caught.value)
    with pytest.raises(ConfigurationError, match=what):
        StateStoreDict.connect(url, namespace="n")  # before any connection is tried


@pytest.mark.parametrize("client_id", ["+", "#", "a/#", "x+y", "", "a:b"])
def test_the_clients_refuse_it_at_construction(client_id: str) -> None:
    with pytest.raises(ConfigurationError):
        AsyncStateStoreClient("127.0.0.1", 1, client_id=client_id)
    with pytest.raises(ConfigurationError):
        StateStoreClient("127.0.0.1", 1, client_id=client_id)


@pytest.mark.parametrize("client_id", ["app-1", "a/b", "ünïcode_ok", "a.b$c"])
def test_ids_that_make_a_topic_name_are_kept(client_id: str) -> None:
    assert ConnectionSettings(client_id=client_id).client_id == client_id
    topic = response_topic(client_id)
    assert "+" not in topic and "#" not in topic


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_settings_made_before_a_fork_give_each_child_a_new_generated_id() -> None:
    generated = ConnectionSettings()
    chosen = ConnectionSettings(client_id="chosen-by-me")
    assert generated.for_this_process() is generated and chosen.for_this_process() is chosen  # same process

    def work() -> dict[str, str]:
        again = generated.for_this_process()
        made_here = ConnectionSettings()
        client = AsyncStateStoreClient(settings=generated)  # what the adapters do with settings parsed earlier
        return {
            "child": again.client_id,
            "same object": str(again.for_this_process() is again),
            "client": client.client_id,
            "made here": str(made_here.for_this_process() is made_here),
            "chosen": chosen.for_this_process().client_id,
        }

    reports = forked_workers(2, work)
    for report in reports:
        assert report["child"] != generated.client_id and report["child"].startswith("sskv-"), report
        assert report["client"] not in (generated.client_id, report["child"]), report
        assert report["same object"] == report["made here"] == "True", report
        assert report["chosen"] == "chosen-by-me", report  # a chosen id is the user's to give out
    assert len({r["child"] for r in reports}) == 2, json.dumps(reports)
    assert generate_client_id() != generate_client_id()
