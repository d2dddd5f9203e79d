"""The example app's tests take their state store from sskv-mapping's pytest plugin (docs/testing.md):
``statestore_url`` (a private mosquitto and the emulator process, once per test session) and
``statestore_namespace`` (a namespace of the test's own). Nothing to define here but an old name.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def broker_url(statestore_url: str) -> str:
    """The former name of ``statestore_url`` in these examples, kept for tests written against it."""
    return statestore_url
