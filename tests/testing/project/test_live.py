# A user's test module against the real store (mosquitto + the emulator process): see test_inprocess.py.
import os
from pathlib import Path

from sskv_mapping import StateStoreDict


def _record(url: str) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with (Path(os.environ["SSKV_PROJECT_RECORD"]) / f"url-{worker}-{os.getpid()}").open("a") as out:
        out.write(url + "\n")


def test_a_dict_of_my_own_on_the_url(statestore_url, statestore_namespace):
    _record(statestore_url)
    with StateStoreDict.connect(statestore_url, namespace=statestore_namespace) as config:
        config["greeting"] = "hello"
        assert config["greeting"] == "hello"


def test_the_live_faces(statestore_live):
    _record(statestore_live.url)
    statestore_live.dict()["n"] = 1
    assert statestore_live.dict(local_cache_size=0)["n"] == 1
    hits = statestore_live.cache()
    hits.set("hits", 0)
    assert hits.incr("hits") == 1


def test_each_test_has_its_own_namespace(statestore_live):
    _record(statestore_live.url)
    assert "greeting" not in statestore_live.dict()


def test_django_caches_points_at_the_fixture(statestore_live):
    _record(statestore_live.url)
    from django.conf import settings

    if not settings.configured:
        settings.configure(SECRET_KEY="a throwaway project")  # the backend signs its pickles with it
    from django.core.cache import caches
    from django.test.utils import override_settings

    with override_settings(CACHES=statestore_live.django_caches()):
        caches["default"].set("answer", 42, 30)
        assert caches["default"].get("answer") == 42
    assert list(statestore_live.client.scan(statestore_live.namespace + "*"))  # the backend wrote in our namespace
