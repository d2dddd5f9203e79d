"""The client's inbound side: each message its connection receives goes to its call or to the watches, or is counted.

docs/design/architecture.md, "The client's parts".
"""

from __future__ import annotations

import contextlib
import logging

from .._protocol import headers, topics
from .._protocol.hlc import HlcClock
from .._protocol.notifications import parse_notification
from .._transport.base import InboundMessage
from ..errors import ProtocolError, StateStoreError
from ._keeper import ConnectionKeeper, ConnectionState
from ._requests import RequestSender
from ._watches import Watches

log = logging.getLogger("sskv_mapping.client")
_CONNECTING = ConnectionState.CONNECTING  # (a module constant: read on every message received)


class InboundRouter:
    """A response to its call's future, a notification of this client's to the watches (its version merged into the
    clock); a malformed notification, and what the broker kept for a previous process with this id, counted."""

    __slots__ = (
        "_client_id",
        "_hlc",
        "_keeper",
        "_sender",
        "_watches",
        "bad_notifications",
        "previous_session_messages",
    )

    def __init__(
        self, client_id: str, hlc: HlcClock, keeper: ConnectionKeeper, sender: RequestSender, watches: Watches
    ) -> None:
        self._client_id = client_id
        self._hlc = hlc
        self._keeper = keeper
        self._sender = sender
        self._watches = watches
        self.bad_notifications = 0
        #: messages kept in the session for a previous process with this client id: dropped, never matched
        self.previous_session_messages = 0

    def on_message(self, message: InboundMessage) -> None:
        if self._keeper.state is _CONNECTING:
            # before our first connect completes, nothing is ours: kept by the broker for a previous process
            self.previous_session_messages += 1
            return
        sender = self._sender
        if message.topic == sender.response_topic:
            # sender.pending.resolve(message), inline (one per response): its call's future, if still waiting
            pending = sender.pending
            corr = message.correlation_data
            fut = pending.calls.get(corr) if corr is not None else None
            if fut is None or fut.done():
                pending.unmatched += 1
            else:
                fut.set_result(message)
            return
        if message.topic.startswith(topics.NOTIFY_PREFIX):
            try:
                client_id, event = parse_notification(
                    message.topic, message.payload, message.user_property(headers.TIMESTAMP)
                )
            except ProtocolError as exc:
                self.bad_notifications += 1
                log.warning("dropping a malformed notification on %r: %s", message.topic, exc)
                return
            if client_id != self._client_id:
                return
            if event.version is not None:
                with contextlib.suppress(StateStoreError):
                    self._hlc.update(event.version)
            self._watches.notify(event)
