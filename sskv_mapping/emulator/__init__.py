"""A faithful local emulator of the Azure IoT Operations state store (docs/emulator.md).

``from sskv_mapping.emulator import EmulatorCore`` loads no MQTT library: the server and broker load lazily.
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
