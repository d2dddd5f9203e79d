"""The one exception tree of sskv_mapping, imported by every layer (drawn in docs/reference/errors.md).

No ``StateStoreError`` is a ``LookupError``: a network failure must never look like "key absent".
"""

from __future__ import annotations

import pickle

__all__ = [
    "BrokerConnectError",
    "ClientStateError",
    "ClockDriftError",
    "CodecError",
    "ConfigurationError",
    "ConnectionLostError",
    "CredentialsRefusedError",
    "DecodeError",
    "EncodeError",
    "FencingTokenLowerVersionError",
    "FencingTokenRequiredError",
    "FencingTokenSkewError",
    "KeyLengthZeroError",
    "LockError",
    "MalformedTimestampError",
    "MissingTimestampError",
    "NotAuthorizedError",
    "OverloadedError",
    "PickleEncodeError",
    "ProtocolError",
    "PublishRefusedError",
    "QuotaExceededError",
    "ReauthenticationError",
    "ReentrantCallError",
    "RequestSyntaxError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ResponseTooLargeError",
    "RpcStatusError",
    "ServiceError",
    "ServiceUnavailableError",
    "SessionLostError",
    "SessionTakenOverError",
    "StateStoreError",
    "StateStoreStartError",
    "TimestampSkewError",
    "TransportError",
    "UnknownCommandError",
    "UnsupportedCommandError",
    "UnsupportedVersionError",
    "ValueTooLargeError",
    "WriteBufferFullError",
    "WrongNumberOfArgumentsError",
]


class StateStoreError(Exception):
    """Base class of every error sskv_mapping raises on purpose."""


class StateStoreStartError(StateStoreError, RuntimeError):
    """A private broker or the emulator process did not start: the message says why (its output, or the command that
    installs mosquitto)."""


class ConfigurationError(StateStoreError, ValueError):
    """Bad arguments or settings; raised before anything is sent."""


class ValueTooLargeError(ConfigurationError):
    """A request would be larger than the broker accepts (its CONNACK Maximum Packet Size) or than the
    client's ``max_payload``: it is refused before anything is sent, the connection stays up and the calls in
    flight are untouched. ``size`` is the request's size in bytes and ``limit`` the limit it exceeds (both
    counted the same way: the whole MQTT packet for the broker's limit, the command for ``max_payload``)."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only fields survive pickling (multiprocessing)
        return (_rebuild_too_large, (str(self), self.size, self.limit))


def _rebuild_too_large(message: str, size: int, limit: int) -> ValueTooLargeError:
    return ValueTooLargeError(message, size=size, limit=limit)


class ClientStateError(StateStoreError, RuntimeError):
    """The client cannot do this now (closed, wrong thread, not connected yet...)."""


class ReentrantCallError(ClientStateError):
    """A call that would wait for itself forever: ``get_or_set(key)`` from inside the builder computing ``key``
    (in the same task, or the same thread for the blocking cache). Nothing was stored; the outer call fails too
    unless the builder catches this."""


class TransportError(StateStoreError):
    """The broker connection failed; the outcome of an in-flight write is unknown."""


class BrokerConnectError(TransportError):
    """Could not connect to the broker (refused, TLS failure, bad credentials...)."""


class ConnectionLostError(TransportError):
    """The connection dropped while the request was in flight."""


class SessionLostError(ConnectionLostError):
    """The client reconnected and the broker no longer had its MQTT session (CONNACK session present = 0: the
    broker restarted without persistence, or the session expired): what the call had sent may or may not have
    been carried out, and its response is gone. Only the calls in flight at that moment fail so; the client
    goes on (it subscribes and registers its watches again)."""


class SessionTakenOverError(TransportError):
    """Another connection with this client's id took its session (MQTT reason code 0x8E): two processes use
    one client id. The client stops reconnecting (the two would take the session from each other in a loop)
    and every call raises this error; ``client_id`` names the duplicate id."""

    def __init__(self, message: str, *, client_id: str = "") -> None:
        super().__init__(message)
        self.client_id = client_id


class CredentialsRefusedError(BrokerConnectError):
    """The broker refused this client's credentials (bad user name or password, not authorized, bad
    authentication method) at every reconnect of a few tries, the token re-read each time. The client stops
    reconnecting and every call raises this error."""


class RequestTimeoutError(TransportError, TimeoutError):
    """No response arrived within the request timeout."""


class PublishRefusedError(TransportError):
    """The broker refused the request's PUBLISH (a PUBACK reason code >= 0x80, e.g. "Not authorized" from an
    ACL): it never reached the state store."""


class ServiceUnavailableError(TransportError):
    """The broker acknowledged the request with "no matching subscribers" (PUBACK 0x10) until the call's
    deadline: the state store was not serving on that broker, the request reached nobody and nothing was
    written. Raised after about a second when the service never answered this client (a bare broker), else when
    the call's own timeout ran out while the service was restarting."""


class WriteBufferFullError(TransportError):
    """The connection's write backlog (what waits to be written to the broker: the socket's buffer and the
    publishes held for the broker's Receive Maximum) is at its bound, because the broker stopped reading or
    stopped acknowledging. Raised by a publish that must not wait (``publish_nowait``: a request on the hot path,
    the emulator's replies) instead of growing the backlog without limit; nothing was sent, the connection stays
    up. A publish that may wait waits instead, within its deadline."""


class ReauthenticationError(TransportError):
    """A re-authentication on a live connection (MQTT 5 AUTH, method ``K8S-SAT``, sent before the presented
    token expires) was refused or not answered in time. The connection is dropped with it; the client reconnects
    as after any drop, reading the token again for its CONNECT."""


class ProtocolError(StateStoreError):
    """A reply, notification, header or timestamp that does not follow the protocol."""


class UnsupportedVersionError(ProtocolError):
    """The peer speaks a protocol major version other than 1."""


class ClockDriftError(StateStoreError):
    """The hybrid logical clock would run more than the allowed drift ahead of the wall clock."""


class LockError(StateStoreError):
    """A lock could not be acquired, renewed or confirmed."""


class CodecError(StateStoreError, ValueError):
    """A value could not be encoded or decoded."""


class EncodeError(CodecError):
    """A value could not be encoded by its codec."""


class PickleEncodeError(EncodeError, pickle.PicklingError):
    """A value pickle cannot handle. Also a :class:`pickle.PickleError`, as Django's and cachelib's cache
    contracts promise (``except pickle.PickleError`` keeps working with this backend)."""


class DecodeError(CodecError):
    """Stored bytes could not be decoded by the codec."""


class ServiceError(StateStoreError):
    """The state store answered ``-ERR <text>``.

    ``text`` is the service's text, verbatim. Known texts map to subclasses; an unknown text (a future
    service version) gives this base class with the text kept.
    """

    #: The canonical service text for this class (empty on the base class).
    TEXT: str = ""

    def __init__(self, text: str | None = None) -> None:
        self.text = self.TEXT if text is None else text
        super().__init__(self.text)


class TimestampSkewError(ServiceError):
    """The request ``__ts`` is more than 60 s ahead of the service clock."""

    TEXT = (
        "the request timestamp is too far in the future; "
        "ensure that the client and broker system clocks are synchronized"
    )


class FencingTokenRequiredError(ServiceError):
    """The key is protected by a fencing token and the request carried none."""

    TEXT = "a fencing token is required for this request"


class FencingTokenSkewError(ServiceError):
    """The request fencing token is more than 60 s ahead of the service clock."""

    TEXT = (
        "the request fencing token timestamp is too far in the future; "
        "ensure that the client and broker system clocks are synchronized"
    )


class FencingTokenLowerVersionError(ServiceError):
    """The request fencing token is older than the one protecting the key."""

    TEXT = "the request fencing token is a lower version than the fencing token protecting the resource"


class QuotaExceededError(ServiceError):
    """The store's key quota is full."""

    TEXT = "the quota has been exceeded"


class RequestSyntaxError(ServiceError):
    """The payload is not a valid request."""

    TEXT = "syntax error"


class NotAuthorizedError(ServiceError):
    """The caller is not authorized."""

    TEXT = "not authorized"


class UnknownCommandError(ServiceError):
    """The verb is not recognised."""

    TEXT = "unknown command"


class UnsupportedCommandError(UnknownCommandError):
    """The service does not know the command at all: it answered the first page of a SCAN with ``unknown
    command`` (an older service; docs/design/protocol.md §8). The client remembers it for the connection
    (``supports_scan is False``) and raises this again without asking until it reconnects."""


class WrongNumberOfArgumentsError(ServiceError):
    """The command had the wrong number of arguments."""

    TEXT = "wrong number of arguments"


class MissingTimestampError(ServiceError):
    """A SET arrived without ``__ts``."""

    TEXT = "missing timestamp"


class MalformedTimestampError(ServiceError):
    """``__ts`` or ``__ft`` is not a valid HLC."""

    TEXT = "malformed timestamp"


class KeyLengthZeroError(ServiceError):
    """The key is empty."""

    TEXT = "the key length is zero"


class ResponseTooLargeError(ServiceError):
    """The answer to this request would be a packet over the broker's Maximum Packet Size (e.g. a GET of a
    large value with a long response topic), or a payload over the emulator's 16 MiB write bound (a value stored
    by another MQTT client past the limits): the emulator answers this error instead of a packet the broker would
    drop it for, or of silence. The request itself was carried out (a SET applied, a DEL deleted); only its
    answer could not be delivered."""

    TEXT = "the response is too large for the broker's maximum packet size"


class RequestTooLargeError(ServiceError):
    """(The emulator) a SET refused because its value or key is over the size limits (docs/reliability.md,
    "Limits"): its GET reply or its change notifications could never be sent. Nothing was written. The library
    refuses such a SET itself before sending (:class:`ValueTooLargeError`); this is what another MQTT client
    gets."""

    TEXT = "the key or value is over the size limit: it could not be read back or notified"


class OverloadedError(ServiceError):
    """(The emulator) the reply could not be queued: its connection to the broker has more waiting to be written
    than it bounds (the broker is not taking its writes). The request itself was carried out."""

    TEXT = "the service is overloaded: its replies are not being written"


class RpcStatusError(ServiceError):
    """The response carried ``__stat`` other than 200/204 (an RPC-level failure).

    ``status`` is the code (400, 408, 500, 503, 505...); ``text`` the ``__stMsg`` message.
    """

    def __init__(self, status: int, text: str = "") -> None:
        self.status = status
        super().__init__(text)

    def __str__(self) -> str:
        return f"RPC status {self.status}: {self.text}" if self.text else f"RPC status {self.status}"
