"""dogpile.cache's own backend, mutex and serializer suites (``dogpile/testing/fixtures.py``, shipped in its
wheel and imported from the installed package) against the ``sskv`` backend, found through its entry point, on
mosquitto and the emulator process. Their ``time_intensive`` tests run too (threads, sleeps of their own)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("dogpile.cache")

from dogpile.testing.fixtures import (
    _GenericBackendTestSuite,
    _GenericMutexTestSuite,
    _GenericSerializerTestSuite,
)

pytestmark = pytest.mark.broker


class _OnOurStore:
    backend = "sskv"  # the entry point in pyproject.toml, as a user's region.configure("sskv") finds it
    config_args: dict[str, Any] = {}

    @classmethod
    def setup_class(cls) -> None:
        """Theirs builds a backend from ``config_args``, which needs the session's broker: see ``_configure``."""


@pytest.fixture(scope="class", autouse=True)
def _configure(request: pytest.FixtureRequest, broker_url: str) -> None:
    cls = request.cls
    # a namespace per class: their keys ("foo", "key1") are the same in every suite
    cls.config_args = {"arguments": {"url": broker_url, "namespace": f"dogpile-{uuid.uuid4().hex[:10]}"}}
    super(_OnOurStore, cls).setup_class()  # theirs: load the backend by name, build one


class TestStateStoreBackend(_OnOurStore, _GenericBackendTestSuite):
    pass


class TestStateStoreMutex(_OnOurStore, _GenericMutexTestSuite):
    pass


class TestStateStoreRegionSerializer(_OnOurStore, _GenericSerializerTestSuite, _GenericBackendTestSuite):
    """Their serializer suite: a region's own serializer wins over the backend's codec."""
