"""What a key, a namespace and a SCAN pattern are, checked in one place for every API.

A bad key is a :class:`~sskv_mapping.errors.ConfigurationError`, never a ``UnicodeError`` or ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ConfigurationError

__all__ = [
    "check_namespace",
    "escape_glob",
    "is_text_key",
    "scan_pattern",
    "store_key",
    "text_key",
    "text_keys",
    "utf8",
]


def utf8(text: str, what: str = "key") -> bytes:
    """``text`` as UTF-8; a lone surrogate (not encodable) is a :class:`ConfigurationError`."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(f"{what} is not valid UTF-8 text: {exc.reason}") from None


def _str_or_bytes(value: object, what: str, wrong_type: str, empty: str) -> bytes:
    """``str`` (UTF-8) or bytes-like -> non-empty ``bytes``; else :class:`ConfigurationError` with these texts."""
    if isinstance(value, str):
        data = utf8(value, what)
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    else:
        raise ConfigurationError(f"{wrong_type}, not {type(value).__name__}")
    if not data:
        raise ConfigurationError(empty)
    return data


def store_key(key: object) -> bytes:
    """A client key: ``str`` (UTF-8) or bytes-like -> ``bytes``; anything else or empty -> ConfigurationError."""
    if type(key) is str and key:  # the usual key, without the checks' calls (a lone surrogate: the way below)
        try:
            return key.encode("utf-8")
        except UnicodeEncodeError:
            pass
    elif type(key) is bytes and key:  # a dict's or cache's data key
        return key
    return _str_or_bytes(
        key, "state store key", "state store keys are str or bytes", "state store keys may not be empty"
    )


def is_text_key(key: object) -> bool:
    """Could ``key`` be a key of a dict or cache? A non-empty ``str`` that encodes as UTF-8."""
    if not isinstance(key, str) or not key:
        return False
    if key.isascii():
        return True
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_key(key: object, what: str = "key") -> str:
    """``key`` if :func:`is_text_key`, else a :class:`ConfigurationError` saying why."""
    if is_text_key(key):
        assert isinstance(key, str)
        return key
    if not isinstance(key, str):
        raise ConfigurationError(f"{what}s are str, not {type(key).__name__}")
    if not key:
        raise ConfigurationError(f"{what}s may not be empty")
    utf8(key, what)  # raises: a lone surrogate
    raise AssertionError("unreachable")  # pragma: no cover


def text_keys(keys: Iterable[str], what: str = "key") -> list[str]:
    """Each key checked, duplicates dropped (first wins); a single ``str`` is refused (it would iterate chars)."""
    if isinstance(keys, str | bytes):
        raise ConfigurationError("pass an iterable of keys, not a single str")
    return list(dict.fromkeys(text_key(k, what) for k in keys))


def check_namespace(namespace: object) -> bytes:
    """A namespace: a non-empty ``str`` without ``/`` or ``#`` (they separate its keys), as UTF-8."""
    if not isinstance(namespace, str) or not namespace:
        raise ConfigurationError("namespace must be a non-empty str")
    if "/" in namespace or "#" in namespace:
        raise ConfigurationError("namespace may not contain '/' or '#' (they separate its keys)")
    return utf8(namespace, "namespace")


def scan_pattern(pattern: object) -> bytes:
    """A SCAN pattern: ``str`` (UTF-8) or bytes-like, not empty -> ``bytes``; else :class:`ConfigurationError`.

    The glob itself is the service's business (docs/design/protocol.md §8): it is sent as given, not parsed here.
    """
    return _str_or_bytes(
        pattern,
        "SCAN pattern",
        "a SCAN pattern is str or bytes",
        "a SCAN pattern may not be empty (use b'*' to list every key)",
    )


_GLOB_ESCAPES = {ord("*"): b"[*]", ord("?"): b"[?]", ord("["): b"[[]"}


def escape_glob(literal: str | bytes) -> bytes:
    """``literal`` as a glob pattern that matches only itself: ``*`` -> ``[*]``, ``?`` -> ``[?]``, ``[`` -> ``[[]``.

    The service's globs have no backslash escape (docs/design/protocol.md §8); bracketing is the one way to say "this
    character itself". ``escape_glob(prefix) + b"*"`` lists every key that starts with ``prefix``.

    Examples:
        >>> escape_glob("ns[1]*/")
        b'ns[[]1][*]/'
    """
    if isinstance(literal, str):
        data = utf8(literal, "glob literal")
    elif isinstance(literal, bytes | bytearray | memoryview):
        data = bytes(literal)
    else:
        raise ConfigurationError(f"escape_glob takes str or bytes, not {type(literal).__name__}")
    if b"*" not in data and b"?" not in data and b"[" not in data:
        return data
    return b"".join(_GLOB_ESCAPES.get(byte, bytes((byte,))) for byte in data)
