"""Fixtures shared by the framework integration tests (generic only: nothing framework-specific here).

* ``broker_url`` (session): ``mqtt://host:port`` of the session's private mosquitto, with the emulator process
  serving it. Tests using it are marked ``broker`` (it depends on ``mosquitto``).
* after each module: the objects and connections the adapters share in the process are closed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sskv_mapping.integrations._common import close_shared_clients, close_shared_objects


@pytest.fixture(scope="session")
def broker_url(mosquitto: Any, emulator: Any) -> str:
    """The session broker's URL; the emulator process is running on it."""
    return f"mqtt://{mosquitto.host}:{mosquitto.port}"


@pytest.fixture(scope="module", autouse=True)
def _close_shared() -> Iterator[None]:
    """Close what a module's adapters shared (objects, then every shared connection) before the next module."""
    yield
    close_shared_objects()
    close_shared_clients()
