"""Fixtures for the example app's end-to-end tests: a private mosquitto and the emulator process.

Module-scoped, and stopped before the test session ends, so that the suite's own leak check (tests/conftest.py)
never finds them running whichever order the paths are given in.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import start_emulator


@pytest.fixture(scope="module")
def broker_url() -> Iterator[str]:
    """``mqtt://host:port`` of a private mosquitto with the emulator process serving it."""
    broker = MosquittoBroker().start()
    try:
        with start_emulator(broker.host, broker.port):
            yield f"mqtt://{broker.host}:{broker.port}"
    finally:
        broker.stop()
