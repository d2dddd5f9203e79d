"""Fixtures for the example app's end-to-end tests: a private mosquitto and the emulator process.

Module-scoped, and stopped before the test session ends, so that the suite's own leak check (tests/conftest.py)
never finds them running whichever order the paths are given in.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[2] / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from _support.procs import start_emulator  # noqa: E402

from sskv_mapping.emulator.broker import MosquittoBroker  # noqa: E402


@pytest.fixture(scope="module")
def broker_url() -> Iterator[str]:
    """``mqtt://host:port`` of a private mosquitto with the emulator process serving it."""
    broker = MosquittoBroker().start()
    try:
        with start_emulator(broker.host, broker.port):
            yield f"mqtt://{broker.host}:{broker.port}"
    finally:
        broker.stop()
