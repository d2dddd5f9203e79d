"""Layer 2 (transport), I/O part: the correctness hooks :class:`~sskv_mapping._transport.mqtt.MqttConnection`
installs on the paho client of its ``aiomqtt.Client``; see :class:`PahoHooks`.

Part of the one place that imports aiomqtt/paho (the ``_transport.mqtt`` package), and the only module that
touches their private names: each one is listed, with what it is for, in :data:`_INTERNALS`, and each access
is marked ``# noqa: SLF001``. Only what correctness needs is here: PUBACK waits and refusals through paho's
public ``on_publish``, the server's Receive Maximum and Maximum Packet Size from ``on_connect``, and
``on_disconnect`` ending a CONNECT the broker closed before CONNACK. paho reads, decodes, encodes and writes
every packet itself (this transport is the second, independent implementation next to
:class:`~sskv_mapping._transport.stream.StreamConnection`: ``nox -s stock-paho``).

Must not import anything above ``_transport``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, cast

import aiomqtt
import paho.mqtt.client as paho_client
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from ...errors import PublishRefusedError, ServiceUnavailableError

__all__ = ["PahoHooks", "paho_client_of"]

#: Every private name of aiomqtt's and paho's ``Client`` this module touches, as ``(owner, name)``, and what for.
_INTERNALS: tuple[tuple[str, str], ...] = (
    # aiomqtt.Client
    ("aiomqtt", "_client"),  # its paho client: where the hooks go, and paho's own publish (no per-message wait)
    ("aiomqtt", "_connected"),  # the CONNACK future: failed at once when the broker closes before CONNACK
    ("aiomqtt", "_pending_publishes"),  # its publish()'s PUBACK waits: its on_publish runs only if there are some
    # paho.Client
    ("paho", "_max_inflight_messages"),  # the in-flight limit, set from CONNACK (the public setter refuses then)
)

_NO_MATCHING_SUBSCRIBERS = 0x10  # a PUBACK reason code: accepted, but no subscription matched


def paho_client_of(client: aiomqtt.Client) -> paho_client.Client:
    """The paho client that ``client`` drives."""
    paho: paho_client.Client = client._client  # noqa: SLF001
    return paho


def _fail_connect(connected: asyncio.Future[Any]) -> None:
    if not connected.done():
        connected.set_exception(aiomqtt.MqttError("the broker closed the connection before CONNACK"))


class PahoHooks:
    """The hooks of one ``aiomqtt.Client``'s paho client, installed before CONNECT; paho's public callbacks,
    each calling aiomqtt's own on.

    aiomqtt keeps owning the connection: CONNECT/TLS/auth, SUBSCRIBE, keepalive, DISCONNECT, reading and
    writing the socket, and reporting the end of the connection.

    * **PUBACK waits**: :meth:`MqttConnection.publish` waits on one future per packet id in :attr:`acks`,
      resolved from paho's ``on_publish`` and failed when the connection ends (aiomqtt's wait only times out);
      a refusing PUBACK fails it, or the future a ``publish_nowait`` caller left in :attr:`refusals`.
    * **Receive Maximum**: paho ignores the server's (CONNACK); MQTT 5 says a client must not have more
      unacknowledged QoS 1 PUBLISHes than that ([MQTT-3.3.4-7]). It becomes paho's in-flight limit: publishes
      beyond it wait in paho's queue and go out as PUBACKs come back.
    * **Maximum Packet Size**: the server's, from CONNACK, kept in :attr:`max_packet_size` for
      :class:`MqttConnection` to refuse a larger PUBLISH before paho sends it ([MQTT-3.2.2-15]).
    * **disconnect before CONNACK**: fails the connect at once instead of after ``connect_timeout``.
    """

    def __init__(self, client: aiomqtt.Client, loop: asyncio.AbstractEventLoop) -> None:
        paho = paho_client_of(client)
        self._aiomqtt = client
        self._loop = loop
        self._thread = threading.get_ident()
        #: packet id -> future of a :meth:`MqttConnection.publish` waiting for its PUBACK
        self.acks: dict[int, asyncio.Future[None]] = {}
        #: packet id -> future that a refusing PUBACK fails (see :meth:`MqttConnection.publish_nowait`)
        self.refusals: dict[int, asyncio.Future[Any]] = {}
        #: the server's Maximum Packet Size from CONNACK (None: it stated none, or no CONNACK yet)
        self.max_packet_size: int | None = None
        # aiomqtt's pending-publish table: only its own publish() fills it, and we never call that one.
        self._aiomqtt_pending_publishes: dict[int, Any] = client._pending_publishes  # noqa: SLF001
        # aiomqtt's own callbacks, called on from ours (paho types them as a union of its callback API versions)
        self._aiomqtt_on_publish = cast(Callable[..., None], paho.on_publish)
        self._aiomqtt_on_connect = cast(Callable[..., None], paho.on_connect)
        self._aiomqtt_on_disconnect = cast(Callable[..., None], paho.on_disconnect)
        paho.on_publish = self._on_publish
        paho.on_connect = self._on_connect
        paho.on_disconnect = self._on_disconnect

    def _on_publish(
        self, client: paho_client.Client, userdata: Any, mid: int, reason_code: ReasonCode, properties: Properties
    ) -> None:
        fut = self.acks.pop(mid, None)
        refusal = self.refusals.pop(mid, None) if self.refusals else None
        if reason_code.is_failure:
            # e.g. 0x87 Not authorized: mosquitto's ACL denied the PUBLISH, nothing was delivered
            error = PublishRefusedError(
                f"the broker refused the PUBLISH: {reason_code.getName()} (0x{reason_code.value:02X})"
            )
            for waiter in (fut, refusal):
                if waiter is not None and not waiter.done():
                    waiter.set_exception(error)
        else:
            if reason_code.value == _NO_MATCHING_SUBSCRIBERS and refusal is not None and not refusal.done():
                # Accepted, but delivered to nobody: the state store is not subscribed (not started, or
                # restarting and not yet re-subscribed). A definite "not delivered", unlike a lost response: the
                # requester may send it again. (A plain publish is still acknowledged: it was accepted.)
                refusal.set_exception(ServiceUnavailableError("no subscriber took the PUBLISH (PUBACK 0x10)"))
            if fut is not None and not fut.done():
                fut.set_result(None)
        if self._aiomqtt_pending_publishes:
            self._aiomqtt_on_publish(client, userdata, mid, reason_code, properties)

    def _on_connect(
        self,
        client: paho_client.Client,
        userdata: Any,
        flags: paho_client.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None = None,
    ) -> None:
        maximum = getattr(properties, "ReceiveMaximum", None) if properties is not None else None
        # Nothing is in flight yet (clean start, a new client). 0 is paho's "no limit": what an absent Receive
        # Maximum (65,535) amounts to with 16-bit packet ids, and it spares paho a scan of all in-flight
        # messages per PUBACK.
        limit = maximum if isinstance(maximum, int) and 0 < maximum < 65535 else 0
        client._max_inflight_messages = limit  # noqa: SLF001
        size = getattr(properties, "MaximumPacketSize", None) if properties is not None else None
        self.max_packet_size = size if isinstance(size, int) and size > 0 else None
        self._aiomqtt_on_connect(client, userdata, flags, reason_code, properties)

    def _on_disconnect(self, client: paho_client.Client, userdata: Any, *args: Any) -> None:
        """End a CONNECT that the broker closed before its CONNACK at once, not after ``connect_timeout``.

        aiomqtt ignores a disconnect before CONNACK (its ``__aenter__`` then waits for the timeout). It happens
        when the TCP connection lands on a broker that is dying or restarting, or when a TLS broker drops a
        client whose certificate it refuses after the handshake.
        """
        connected: asyncio.Future[Any] = self._aiomqtt._connected  # noqa: SLF001
        if threading.get_ident() == self._thread:
            _fail_connect(connected)
        else:  # pragma: no cover - paho reports from the loop thread; be safe if it ever does not
            self._loop.call_soon_threadsafe(_fail_connect, connected)
        self._aiomqtt_on_disconnect(client, userdata, *args)

    def fail_acks(self, exc: BaseException) -> None:
        acks, self.acks = self.acks, {}
        self.refusals = {}  # their owners learn of the drop otherwise (a requester: its pending call fails)
        for fut in acks.values():
            if not fut.done():
                fut.set_exception(exc)
