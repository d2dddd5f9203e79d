"""Test your app against a state store: what the pytest plugin's fixtures hand out, usable without pytest too.

The fixtures: docs/testing.md.
"""

from ..emulator.launcher import EmulatorProcess, live_emulators, start_emulator
from ..errors import StateStoreStartError
from ._clock import FakeClock
from ._faults import FaultProxy, ProxyStats, Toxic
from ._inprocess import InProcessStore
from ._server import LiveStore, StateStoreServer

__all__ = [
    "EmulatorProcess",
    "FakeClock",
    "FaultProxy",
    "InProcessStore",
    "LiveStore",
    "ProxyStats",
    "StateStoreServer",
    "StateStoreStartError",
    "Toxic",
    "live_emulators",
    "start_emulator",
]
