"""Which connection the client and the emulator make: ``SSKV_MQTT_TRANSPORT=stream|paho``.

The emulator inherits the environment, so one variable switches both ends (``nox -s paho``); see
docs/design/transport.md and docs/environment.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

from ..errors import ConfigurationError
from .base import Connection, InboundMessage
from .settings import ConnectionSettings
from .stream import StreamConnection

__all__ = ["TRANSPORTS", "TRANSPORT_ENV", "chosen_transport", "new_connection"]

Transport = Literal["stream", "paho"]

#: ``SSKV_MQTT_TRANSPORT``: the MQTT transport of the client and the emulator alike, named by its module:
#: ``stream`` (``_transport/stream.py``, the default) or ``paho`` (``_transport/paho.py``, aiomqtt/paho).
TRANSPORT_ENV = "SSKV_MQTT_TRANSPORT"
TRANSPORTS: tuple[Transport, ...] = ("stream", "paho")


def chosen_transport() -> Transport:
    """The transport the environment chooses (read at each new connection): ``stream`` unless told otherwise.

    Raises:
        ConfigurationError: ``SSKV_MQTT_TRANSPORT`` names no transport.
    """
    value = os.environ.get(TRANSPORT_ENV, "").strip().lower()
    if value:
        if value in TRANSPORTS:
            return value
        raise ConfigurationError(f"{TRANSPORT_ENV} must be one of {', '.join(TRANSPORTS)}, not {value[:20]!r}")
    return "stream"


def new_connection(settings: ConnectionSettings, on_message: Callable[[InboundMessage], None]) -> Connection:
    """The default :data:`~sskv_mapping._transport.base.ConnectionFactory`."""
    if chosen_transport() == "stream":
        return StreamConnection(settings, on_message)
    from .paho import PahoConnection

    return PahoConnection(settings, on_message)
