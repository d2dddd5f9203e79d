"""Layer 1 (pure protocol): the service's error texts, matched exactly, to the exception classes of
:mod:`sskv_mapping.errors` (the tree itself is a leaf module every layer imports).

Must not import anything but the standard library and :mod:`sskv_mapping.errors`.
"""

from __future__ import annotations

from ..errors import (
    FencingTokenLowerVersionError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    KeyLengthZeroError,
    MalformedTimestampError,
    MissingTimestampError,
    NotAuthorizedError,
    QuotaExceededError,
    RequestSyntaxError,
    ResponseTooLargeError,
    ServiceError,
    TimestampSkewError,
    UnknownCommandError,
    WrongNumberOfArgumentsError,
)

__all__ = ["ERROR_TEXTS", "service_error"]

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
    ResponseTooLargeError,
)

#: service text -> exception class, matched exactly.
ERROR_TEXTS: dict[str, type[ServiceError]] = {cls.TEXT: cls for cls in _KNOWN}


def service_error(text: str) -> ServiceError:
    """Return the exception for a service ``-ERR`` text (exact match; unknown texts give the base class)."""
    cls = ERROR_TEXTS.get(text)
    if cls is None:
        return ServiceError(text)
    return cls(text)
