"""Flask-Caching's own ``GenericCacheTests`` (from its sdist's ``tests/test_backend_cache.py``) against our
backend, built directly in its default configuration, as their suite builds its Redis backend. Not collected
from here: ``run_pytest_suite.py`` copies it next to the extracted tests (``SSKV_PEER_URL`` names the broker).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from test_backend_cache import GenericCacheTests

from sskv_mapping.integrations.flask_caching import StateStoreCache


class TestStateStoreCache(GenericCacheTests):
    _can_use_fast_sleep = False  # the emulator's expiry clock is real, as Redis's is: their tests then sleep

    @pytest.fixture
    def make_cache(self) -> Callable[..., StateStoreCache]:
        def make(**kwargs: Any) -> StateStoreCache:
            return StateStoreCache(os.environ["SSKV_PEER_URL"], namespace=f"fc-{uuid.uuid4().hex[:8]}", **kwargs)

        return make
