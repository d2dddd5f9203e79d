"""A faithful local emulator of the Azure IoT Operations state store.

* :class:`EmulatorCore` (``core.py``): the service as a pure state machine (no I/O, injected clock).
* :class:`EmulatorServer` (``server.py``): serves a core over a real MQTT broker.
* :class:`MosquittoBroker` (``broker.py``): a private mosquitto configured for the emulator.

Run it with ``python -m sskv_mapping.emulator --port 1883`` or ``sskv emulator --with-broker``.

The server and broker are imported lazily, so ``from sskv_mapping.emulator import EmulatorCore`` loads
no MQTT library. Must not import the client, mapping or cache layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core import CoreResult, EmulatorCore, Notification

if TYPE_CHECKING:
    from .broker import MosquittoBroker
    from .server import EmulatorServer

__all__ = ["CoreResult", "EmulatorCore", "EmulatorServer", "MosquittoBroker", "Notification"]


def __getattr__(name: str) -> Any:
    if name == "EmulatorServer":
        from .server import EmulatorServer

        return EmulatorServer
    if name == "MosquittoBroker":
        from .broker import MosquittoBroker

        return MosquittoBroker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
