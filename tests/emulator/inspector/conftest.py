"""Fixtures of the inspector tests: emulator processes started with ``--inspect 0``, each on a broker of its own.

* ``inspected`` (module): a read-only inspector; ``writable`` (module): one started with ``--inspect-writable``.
  Each is an :class:`Inspected`: the broker's ``host``/``port`` for library clients, the page's ``url``, the process.

A broker of their own, not the session's: two emulators on one broker would both answer every request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import EmulatorProcess, start_emulator

_URL = re.compile(r"inspector \((read-only|writable)\) on (http://\S+)")


@dataclass
class Inspected:
    host: str
    port: int
    url: str
    process: EmulatorProcess


def _inspected(*extra: str) -> Iterator[Inspected]:
    broker = MosquittoBroker().start()
    try:
        with start_emulator(broker.host, broker.port, "--inspect", "0", *extra) as proc:
            found = _URL.search(proc.output)
            assert found, f"no inspector line in the emulator's output:\n{proc.output}"
            yield Inspected(broker.host, broker.port, found.group(2), proc)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def inspected() -> Iterator[Inspected]:
    yield from _inspected()


@pytest.fixture(scope="module")
def writable() -> Iterator[Inspected]:
    yield from _inspected("--inspect-writable")
