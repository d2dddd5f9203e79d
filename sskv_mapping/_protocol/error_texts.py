"""The service's error texts, matched exactly, to the exception classes of :mod:`sskv_mapping.errors`."""

from __future__ import annotations

from ..errors import (
    FencingTokenLowerVersionError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    KeyLengthZeroError,
    MalformedTimestampError,
    MissingTimestampError,
    NotAuthorizedError,
    OverloadedError,
    QuotaExceededError,
    RequestSyntaxError,
    RequestTooLargeError,
    ResponseTooLargeError,
    ServiceError,
    TimestampSkewError,
    UnknownCommandError,
    WrongNumberOfArgumentsError,
)

__all__ = ["EMULATOR_TEXTS", "ERROR_TEXTS", "service_error"]

_KNOWN: tuple[type[ServiceError], ...] = (
    TimestampSkewError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    FencingTokenLowerVersionError,
    QuotaExceededError,
    RequestSyntaxError,
    NotAuthorizedError,
    UnknownCommandError,
    WrongNumberOfArgumentsError,
    MissingTimestampError,
    MalformedTimestampError,
    KeyLengthZeroError,
)

#: service text -> exception class, matched exactly.
ERROR_TEXTS: dict[str, type[ServiceError]] = {cls.TEXT: cls for cls in _KNOWN}

#: the emulator's own texts, beyond the service's documented (docs/design/protocol.md §3): a response it cannot send
#: (over its broker's Maximum Packet Size or its write bound), a SET over the size limits, a reply it cannot queue.
EMULATOR_TEXTS: dict[str, type[ServiceError]] = {
    cls.TEXT: cls for cls in (ResponseTooLargeError, RequestTooLargeError, OverloadedError)
}


def service_error(text: str) -> ServiceError:
    """Return the exception for a service ``-ERR`` text (exact match; unknown texts give the base class)."""
    cls = ERROR_TEXTS.get(text) or EMULATOR_TEXTS.get(text)
    if cls is None:
        return ServiceError(text)
    return cls(text)
