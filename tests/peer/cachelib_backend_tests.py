"""cachelib's own backend mixins (``CommonTests``, ``ClearTests``, ``HasTests`` from the cachelib sdist's
``tests/``) against the Flask-Caching backend, built as cachelib's suites build theirs: directly, in its default
configuration. Not collected from here: ``run_pytest_suite.py`` copies this module next to the extracted
cachelib tests and runs pytest there (``SSKV_PEER_URL`` names the broker it started).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import conftest as cachelib_conftest
import pytest
from clear import ClearTests
from common import CommonTests
from has import HasTests

from sskv_mapping.integrations.flask_caching import StateStoreCache


def _install_factory(request: pytest.FixtureRequest, key_prefix: str | None) -> None:
    def _factory(self: Any, *args: Any, **kwargs: Any) -> StateStoreCache:
        namespace = f"cachelib-{uuid.uuid4().hex[:8]}{(key_prefix or '').rstrip(':')}"
        return StateStoreCache(os.environ["SSKV_PEER_URL"], *args, namespace=namespace, **kwargs)

    request.cls.cache_factory = _factory


if hasattr(cachelib_conftest, "key_prefix"):  # newer suites run every test with and without a key prefix

    @pytest.fixture(autouse=True)
    def cache_factory(request: pytest.FixtureRequest, key_prefix: str | None) -> None:
        _install_factory(request, key_prefix)

else:

    @pytest.fixture(autouse=True)
    def cache_factory(request: pytest.FixtureRequest) -> None:
        _install_factory(request, None)


class TestStateStoreCache(CommonTests, ClearTests, HasTests):
    pass
