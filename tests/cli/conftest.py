"""The CLI tests' store: the session's mosquitto with the emulator process (``url``), a library client on it, and
the ``sskv`` processes a test started (``clis``), cleaned up after it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import EmulatorProcess

if TYPE_CHECKING:
    from .test_cli_holds_on import Cli


@pytest.fixture
def url(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> str:
    return mosquitto.url


@pytest.fixture
def store(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> Iterator[StateStoreClient]:
    """A library client on the same broker: what the CLI wrote, as the store has it."""
    with StateStoreClient(mosquitto.host, mosquitto.port, timeout=10) as client:
        yield client


@pytest.fixture
def clis() -> Iterator[list[Cli]]:
    """Append each ``sskv`` process the test starts: each is killed (with its process group) after the test."""
    made: list[Cli] = []
    yield made
    for cli in made:
        cli.cleanup()
