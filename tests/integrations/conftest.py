"""Fixtures shared by the framework integration tests (generic only: nothing framework-specific here).

* ``broker_url`` (session): ``mqtt://host:port`` of the session's private mosquitto, with the emulator process
  serving it. Tests using it are marked ``broker`` (it depends on ``mosquitto``).
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def broker_url(mosquitto: Any, emulator: Any) -> str:
    """The session broker's URL; the emulator process is running on it."""
    return f"mqtt://{mosquitto.host}:{mosquitto.port}"
