"""Fixtures for client tests: a bare broker and a private stack.

The clients on the session broker + emulator (``broker_address``, ``client``, ``other``) are suite-wide
(tests/conftest.py): the lock tests use them too.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import EmulatorProcess, start_emulator


@pytest.fixture(scope="module")
def bare_broker() -> Iterator[MosquittoBroker]:
    """A broker with no emulator: tests put their own fake service on it."""
    with MosquittoBroker() as broker:
        yield broker


@pytest.fixture
def bare_broker_address(bare_broker: MosquittoBroker) -> tuple[str, int]:
    return bare_broker.host, bare_broker.port


@dataclass
class Stack:
    """A private broker + emulator process that a test may restart, kill or pause."""

    broker: MosquittoBroker
    emulator: PausableEmulator


class PausableEmulator:
    def __init__(self, process: EmulatorProcess) -> None:
        self.process = process

    def pause(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGCONT)


@pytest.fixture
def stack() -> Iterator[Stack]:
    broker = MosquittoBroker().start()
    try:
        emulator = start_emulator(broker.host, broker.port)
        try:
            yield Stack(broker, PausableEmulator(emulator))
        finally:
            if emulator.pid is not None and emulator.running:
                os.kill(emulator.pid, signal.SIGCONT)
            emulator.stop()
    finally:
        broker.stop()


@pytest.fixture
def stack_url(stack: Stack) -> tuple[str, int]:
    return stack.broker.host, stack.broker.port
