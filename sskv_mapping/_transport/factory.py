"""Which connection the client and the emulator make by default.

:class:`~sskv_mapping._transport.stream.StreamConnection` (the fast path, our own MQTT 5 on an asyncio
``Protocol``), unless ``SSKV_MQTT_FASTPATH=0`` is in the environment: then the stock aiomqtt/paho
:class:`~sskv_mapping._transport.paho.PahoConnection`. The emulator process inherits
the environment, so one variable switches both ends (``nox -s stock-paho``): a bug shared by both ends of our
own fast path cannot hide behind it.

Must not import aiomqtt/paho at import time (the stock transport is imported when chosen), nor anything above
``_transport``. ``_transport/paho.py`` does not import this module (no import cycle).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .base import Connection, InboundMessage
from .settings import ConnectionSettings
from .stream import StreamConnection

__all__ = ["FASTPATH_ENV", "fast_path", "new_connection"]

#: ``SSKV_MQTT_FASTPATH=0``: the stock aiomqtt/paho transport, for client and emulator alike.
FASTPATH_ENV = "SSKV_MQTT_FASTPATH"


def fast_path() -> bool:
    """Whether the fast path is on (read at each new connection)."""
    return os.environ.get(FASTPATH_ENV, "1") != "0"


def new_connection(settings: ConnectionSettings, on_message: Callable[[InboundMessage], None]) -> Connection:
    """The default :data:`~sskv_mapping._transport.base.ConnectionFactory`."""
    if fast_path():
        return StreamConnection(settings, on_message)
    from .paho import PahoConnection

    return PahoConnection(settings, on_message)
