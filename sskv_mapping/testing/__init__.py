"""Test your app against a state store: what the pytest plugin's fixtures hand out, usable without pytest too.

The fixtures: docs/testing.md.
"""

from ._clock import FakeClock
from ._faults import FaultProxy, ProxyStats, Toxic
from ._inprocess import InProcessStore
from ._server import LiveStore, StateStoreServer, StateStoreStartError

__all__ = [
    "FakeClock",
    "FaultProxy",
    "InProcessStore",
    "LiveStore",
    "ProxyStats",
    "StateStoreServer",
    "StateStoreStartError",
    "Toxic",
]
