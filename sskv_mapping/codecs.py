"""Codecs, the plug point that turns Python values into the bytes the state store keeps.

The built-in codecs and why pickle has no name: docs/guide/local-cache.md, "Codecs".
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import pickle
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Final, Protocol, TypeVar, overload, runtime_checkable

from .errors import ConfigurationError, DecodeError, EncodeError, PickleEncodeError

__all__ = [
    "Codec",
    "JsonCodec",
    "MsgpackCodec",
    "PickleCodec",
    "RawCodec",
    "StrCodec",
    "decode_value",
    "encode_value",
    "get_codec",
]

V = TypeVar("V")

#: How much of a key's repr an error message shows; keys may be 6,500 bytes long.
_KEY_REPR_MAX = 80

MSGPACK_INSTALL_HINT: Final = "pip install 'sskv-mapping[msgpack]'"


@runtime_checkable
class Codec(Protocol[V]):
    """Turns values of type ``V`` into bytes and back. Both functions must be pure (no I/O).

    ``name`` identifies the codec in error messages. ``dumps`` may raise anything on a value it cannot
    represent and ``loads`` anything on bytes it cannot read: :func:`encode_value` / :func:`decode_value`
    wrap those into :class:`EncodeError` / :class:`DecodeError`.

    Example:
        >>> class UpperCodec:
        ...     name = "upper"
        ...     def dumps(self, value: str) -> bytes:
        ...         return value.upper().encode()
        ...     def loads(self, data: bytes) -> str:
        ...         return data.decode()
        >>> isinstance(UpperCodec(), Codec)
        True
    """

    name: str

    def dumps(self, value: V, /) -> bytes:
        """The bytes to store for ``value``; raises on a value the codec cannot carry."""

    def loads(self, data: bytes, /) -> V:
        """The value stored as ``data``; raises on bytes the codec cannot read."""


class RawCodec:
    """Bytes in, bytes out: the store's own representation, no conversion.

    ``bytearray`` and ``memoryview`` are accepted and copied to ``bytes``; anything else (``str``
    included, to avoid guessing an encoding) is refused.

    Example:
        >>> RawCodec().dumps(bytearray(b"\\x00\\xff"))
        b'\\x00\\xff'
        >>> RawCodec().loads(b"abc")
        b'abc'
    """

    name = "raw"

    def dumps(self, value: bytes | bytearray | memoryview, /) -> bytes:
        """The bytes to store for ``value`` (see the class for what it accepts)."""
        if isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise TypeError(f"the raw codec stores bytes, bytearray or memoryview, not {type(value).__name__}")

    def loads(self, data: bytes, /) -> bytes:
        """The value stored as ``data``."""
        return bytes(data)

    def __repr__(self) -> str:
        return "RawCodec()"


class StrCodec:
    """``str`` stored as strict UTF-8 (lone surrogates and invalid bytes are errors, never replaced).

    Example:
        >>> StrCodec().dumps("grüße")
        b'gr\\xc3\\xbc\\xc3\\x9fe'
        >>> StrCodec().loads(b"gr\\xc3\\xbc\\xc3\\x9fe")
        'grüße'
    """

    name = "str"

    def dumps(self, value: str, /) -> bytes:
        """The bytes to store for ``value`` (see the class for what it accepts)."""
        if not isinstance(value, str):
            raise TypeError(f"the str codec stores str, not {type(value).__name__}")
        return value.encode("utf-8")

    def loads(self, data: bytes, /) -> str:
        """The value stored as ``data``."""
        return bytes(data).decode("utf-8")

    def __repr__(self) -> str:
        return "StrCodec()"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not valid JSON (pass allow_nan=True to accept it)")


class JsonCodec:
    """JSON, compact (``,`` and ``:`` separators), UTF-8 without ``\\u`` escapes for non-ASCII text.

    ``NaN`` and ``±Infinity`` are not JSON (RFC 8259); they are refused in both directions unless
    ``allow_nan=True``, so that what this codec writes is readable by every other JSON client of the
    store. A stored ``null`` decodes to ``None``; callers keep that distinct from a missing key.

    JSON has no tuples and only string object keys, so ``(1, 2)`` reads back as ``[1, 2]`` and
    ``{1: "a"}`` as ``{"1": "a"}`` (the standard library's conversions, kept as they are). Use
    ``default=`` / ``object_hook=`` to carry other types.

    Args:
        allow_nan: accept and produce ``NaN``/``Infinity``/``-Infinity``.
        default: called for objects JSON cannot serialize; returns a serializable stand-in or raises.
        object_hook: called with every decoded JSON object (``dict``); its result replaces it.
        sort_keys: sort object keys, so equal dicts always encode to equal bytes (useful with ``VDEL``
            and ``NEX``, which compare stored bytes).

    Example:
        >>> codec = JsonCodec()
        >>> codec.dumps({"name": "Zoë", "tags": [1, 2]})
        b'{"name":"Zo\\xc3\\xab","tags":[1,2]}'
        >>> codec.loads(b"null") is None
        True
    """

    name = "json"

    def __init__(
        self,
        *,
        allow_nan: bool = False,
        default: Callable[[Any], Any] | None = None,
        object_hook: Callable[[dict[str, Any]], Any] | None = None,
        sort_keys: bool = False,
    ) -> None:
        if default is not None and not callable(default):
            raise ConfigurationError("JsonCodec(default=...) must be callable")
        if object_hook is not None and not callable(object_hook):
            raise ConfigurationError("JsonCodec(object_hook=...) must be callable")
        self.allow_nan = allow_nan
        self.default = default
        self.object_hook = object_hook
        self.sort_keys = sort_keys
        self._encoder = json.JSONEncoder(
            ensure_ascii=False,
            allow_nan=allow_nan,
            separators=(",", ":"),
            default=default,
            sort_keys=sort_keys,
        )
        self._decoder = json.JSONDecoder(
            object_hook=object_hook,
            parse_constant=None if allow_nan else _refuse_constant,
        )

    def dumps(self, value: Any, /) -> bytes:
        # strict UTF-8: a lone surrogate in a str is an error here, not mojibake in the store
        """The bytes to store for ``value`` (see the class for what it accepts)."""
        return self._encoder.encode(value).encode("utf-8")

    def loads(self, data: bytes, /) -> Any:
        # Decode as UTF-8 ourselves: json.loads(bytes) would also guess UTF-16/32, which we never write.
        """The value stored as ``data``."""
        return self._decoder.decode(bytes(data).decode("utf-8"))

    def __repr__(self) -> str:
        return f"JsonCodec(allow_nan={self.allow_nan!r}, sort_keys={self.sort_keys!r})"


def _import_msgpack() -> ModuleType:
    try:
        return importlib.import_module("msgpack")
    except ImportError as exc:
        raise ImportError(
            f"MsgpackCodec needs the optional msgpack package; install it with: {MSGPACK_INSTALL_HINT}"
        ) from exc


class MsgpackCodec:
    """MessagePack: compact and binary-safe (``bytes`` stay ``bytes``, ``str`` stays ``str``).

    Packs with ``use_bin_type=True`` and unpacks with ``raw=False`` and ``strict_map_key=False`` (maps may
    have int or bytes keys). Arrays read back as lists. Needs the ``msgpack`` extra; building the codec
    without it raises an :class:`ImportError` naming ``pip install 'sskv-mapping[msgpack]'``.

    Args:
        default: called for objects msgpack cannot serialize.
        object_hook: called with every decoded map (``dict``); its result replaces it.
        ext_hook: called as ``ext_hook(code, data)`` for extension types.

    Example:
        >>> codec = MsgpackCodec()
        >>> codec.loads(codec.dumps({"a": b"\\x00", 1: [1.5, None]}))
        {'a': b'\\x00', 1: [1.5, None]}
    """

    name = "msgpack"

    def __init__(
        self,
        *,
        default: Callable[[Any], Any] | None = None,
        object_hook: Callable[[dict[Any, Any]], Any] | None = None,
        ext_hook: Callable[[int, bytes], Any] | None = None,
    ) -> None:
        msgpack = _import_msgpack()
        self._packb: Callable[..., bytes] = msgpack.packb
        self._unpackb: Callable[..., Any] = msgpack.unpackb
        self._pack_options: dict[str, Any] = {"use_bin_type": True}
        if default is not None:
            self._pack_options["default"] = default
        self._unpack_options: dict[str, Any] = {"raw": False, "strict_map_key": False}
        if object_hook is not None:
            self._unpack_options["object_hook"] = object_hook
        if ext_hook is not None:
            self._unpack_options["ext_hook"] = ext_hook

    def dumps(self, value: Any, /) -> bytes:
        """The bytes to store for ``value`` (see the class for what it accepts)."""
        return self._packb(value, **self._pack_options)

    def loads(self, data: bytes, /) -> Any:
        """The value stored as ``data``."""
        return self._unpackb(data, **self._unpack_options)

    def __repr__(self) -> str:
        return "MsgpackCodec()"


_TAG_SIZE: Final = hashlib.sha256().digest_size
_MIN_KEY_SIZE: Final = 16


class PickleCodec:
    """Pickle. **UNSAFE FOR A STORE ANYONE ELSE CAN WRITE TO.**

    Unpickling bytes runs code chosen by whoever wrote them. Anyone who can SET a key in the state store
    (every client with write access to the broker's store, a compromised device, a mistyped key shared with
    another app) could then run arbitrary code in every process that reads that key through this codec.
    That is why this codec is never picked by name and refuses to be built without a decision:

    * ``PickleCodec(key=secret)`` (recommended): every payload is ``HMAC-SHA256(secret, pickle) || pickle``
      and the tag is checked with :func:`hmac.compare_digest` **before** unpickling; a missing or wrong
      tag is a :class:`DecodeError` and nothing is unpickled. The secret must be at least 16 bytes and
      shared only by processes you trust. ``fallback_keys`` are accepted for reading (key rotation).
    * ``bind_key=True`` makes the tag cover the store key too (``HMAC(secret, len || namespace/key ||
      pickle)``), so a signed payload copied under another key -- or into another namespace -- is refused.
      Such a codec signs through a dict or cache (which know the key); its plain ``dumps``/``loads`` refuse.
    * ``PickleCodec(allow_unsafe=True)``: plain pickle, for stores only trusted code can write.

    Args:
        allow_unsafe: accept unsigned pickles (and write unsigned ones). Ignored when ``key`` is given.
        key: the HMAC-SHA256 secret (``bytes``, at least 16 of them).
        fallback_keys: older secrets, accepted when reading (never used to write).
        bind_key: make the signature cover the store key (see above).
        protocol: the pickle protocol used by ``dumps``.

    Example:
        >>> codec = PickleCodec(key=b"0123456789abcdef-shared-secret")
        >>> codec.loads(codec.dumps({1, 2, 3}))
        {1, 2, 3}
    """

    def __init__(
        self,
        *,
        allow_unsafe: bool = False,
        key: bytes | None = None,
        fallback_keys: Iterable[bytes] = (),
        bind_key: bool = False,
        protocol: int = pickle.DEFAULT_PROTOCOL,
    ) -> None:
        self._fallbacks: tuple[bytes, ...] = ()
        if key is not None:
            for k in (key, *fallback_keys):
                if not isinstance(k, bytes | bytearray):
                    raise ConfigurationError(f"PickleCodec keys must be bytes, not {type(k).__name__}")
                if len(k) < _MIN_KEY_SIZE:
                    raise ConfigurationError(f"PickleCodec keys must be at least {_MIN_KEY_SIZE} bytes long")
            self._key: bytes | None = bytes(key)
            self._fallbacks = tuple(bytes(k) for k in fallback_keys)
        elif allow_unsafe is True:
            self._key = None
        else:
            raise ConfigurationError(
                "PickleCodec runs arbitrary code from whoever can write to the store: pass "
                "key=<secret bytes> to sign and verify payloads, or allow_unsafe=True if only trusted code "
                "can write to it"
            )
        if not isinstance(protocol, int) or not 0 <= protocol <= pickle.HIGHEST_PROTOCOL:
            allowed = f"0..{pickle.HIGHEST_PROTOCOL}"
            raise ConfigurationError(f"pickle protocol must be {allowed}, not {protocol!r}")
        if bind_key and self._key is None:
            raise ConfigurationError("PickleCodec(bind_key=True) needs key=<secret bytes>")
        self.protocol = protocol
        self.bind_key = bind_key
        self.name = "pickle" if self._key is None else "pickle+hmac-sha256"

    @property
    def signed(self) -> bool:
        """Whether payloads carry and require an HMAC tag."""
        return self._key is not None

    #: values that cannot be pickled raise :class:`~sskv_mapping.PickleEncodeError` (a ``pickle.PickleError``)
    pickles = True

    def _tag(self, key: bytes, body: bytes, binding: bytes | None) -> bytes:
        mac = hmac.new(key, digestmod=hashlib.sha256)
        if binding is not None:
            mac.update(len(binding).to_bytes(4, "big") + binding)
        mac.update(body)
        return mac.digest()

    def _dump(self, value: Any, binding: bytes | None) -> bytes:
        body = pickle.dumps(value, protocol=self.protocol)
        if self._key is None:
            return body
        return self._tag(self._key, body, binding) + body

    def _load(self, data: bytes, binding: bytes | None) -> Any:
        data = bytes(data)
        if self._key is None:
            return pickle.loads(data)  # opted in with allow_unsafe=True
        if len(data) < _TAG_SIZE:
            raise DecodeError("signed pickle payload is shorter than its HMAC-SHA256 tag")
        tag, body = data[:_TAG_SIZE], data[_TAG_SIZE:]
        for key in (self._key, *self._fallbacks):
            if hmac.compare_digest(tag, self._tag(key, body, binding)):
                return pickle.loads(body)  # authenticated above
        where = " for this key" if binding is not None else ""
        raise DecodeError(f"signed pickle payload failed HMAC-SHA256 verification{where}; not unpickled")

    def dumps(self, value: Any, /) -> bytes:
        """The bytes to store for ``value`` (see the class for what it accepts)."""
        if self.bind_key:
            raise TypeError("this PickleCodec signs the store key: use it through a dict or a cache")
        return self._dump(value, None)

    def loads(self, data: bytes, /) -> Any:
        """The value stored as ``data``, after its signature is checked (unless ``allow_unsafe``)."""
        if self.bind_key:
            raise TypeError("this PickleCodec signs the store key: use it through a dict or a cache")
        return self._load(data, None)

    def dumps_bound(self, binding: bytes, value: Any, /) -> bytes:
        """``dumps`` with the signature covering ``binding`` (the store key) when the codec binds keys."""
        return self._dump(value, binding if self.bind_key else None)

    def loads_bound(self, binding: bytes, data: bytes, /) -> Any:
        """``loads`` checking a signature over ``binding`` too when the codec binds keys."""
        return self._load(data, binding if self.bind_key else None)

    def __repr__(self) -> str:
        # never show the secret
        how = "key=<hidden>" if self.signed else "allow_unsafe=True"
        return f"PickleCodec({how}, protocol={self.protocol})"


_BY_NAME: Final[dict[str, Callable[[], Codec[Any]]]] = {
    "raw": RawCodec,
    "str": StrCodec,
    "json": JsonCodec,
    "msgpack": MsgpackCodec,
}


@overload
def get_codec(name_or_codec: str) -> Codec[Any]: ...


@overload
def get_codec(name_or_codec: Codec[V]) -> Codec[V]: ...


def get_codec(name_or_codec: str | Codec[Any]) -> Codec[Any]:
    """Resolve a codec name (``"raw"``, ``"str"``, ``"json"``, ``"msgpack"``), or return a codec as is.

    ``"pickle"`` is refused on purpose: build a :class:`PickleCodec` yourself so the unsafe choice is
    visible in your code. A name gives a new instance with default options.

    Raises:
        ConfigurationError: unknown name, ``"pickle"``, or an object that is not a codec.
        ImportError: ``"msgpack"`` without the msgpack extra installed.

    Example:
        >>> get_codec("json").name
        'json'
        >>> codec = StrCodec()
        >>> get_codec(codec) is codec
        True
    """
    if isinstance(name_or_codec, str):
        name = name_or_codec.strip().lower()
        factory = _BY_NAME.get(name)
        if factory is not None:
            return factory()
        if name.startswith("pickle"):
            raise ConfigurationError(
                "the pickle codec is not available by name because unpickling runs arbitrary code; pass "
                "PickleCodec(key=<secret bytes>) (signed) or PickleCodec(allow_unsafe=True) explicitly"
            )
        raise ConfigurationError(
            f"unknown codec name {name_or_codec!r}; known names: {', '.join(sorted(_BY_NAME))} "
            "(or pass a Codec instance)"
        )
    if isinstance(name_or_codec, type):
        raise ConfigurationError(
            f"pass a codec instance, not the class {name_or_codec.__name__} (e.g. {name_or_codec.__name__}())"
        )
    if not isinstance(name_or_codec, Codec):
        raise ConfigurationError(
            f"{type(name_or_codec).__name__} is not a codec: it needs a name and dumps()/loads() methods"
        )
    return name_or_codec


def _key_repr(key: object) -> str:
    text = repr(key)
    if len(text) > _KEY_REPR_MAX:
        text = text[: _KEY_REPR_MAX - 3] + "..."
    return text


def _codec_name(codec: object) -> str:
    name = getattr(codec, "name", None)
    return name if isinstance(name, str) and name else type(codec).__name__


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def encode_value(codec: Codec[V], key: object, value: V, *, binding: bytes | None = None) -> bytes:
    """``codec.dumps(value)``, with any failure raised as :class:`EncodeError` naming the key and codec.

    The original exception is chained (``__cause__``). A codec returning something other than bytes is an
    error too. Nothing is sent: call this before building the request.

    Example:
        >>> encode_value(JsonCodec(), b"k", {"a": 1})
        b'{"a":1}'
        >>> encode_value(JsonCodec(), b"k", float("nan"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        sskv_mapping.errors.EncodeError: cannot encode the value for key b'k' with codec 'json': ...
    """
    bound = getattr(codec, "dumps_bound", None) if binding is not None else None
    try:
        data = bound(binding, value) if bound is not None else codec.dumps(value)
    except Exception as exc:
        where = f"for key {_key_repr(key)} with codec {_codec_name(codec)!r}"
        # a value pickle cannot handle is also a pickle.PickleError, as Django's and cachelib's contracts say
        error = (
            PickleEncodeError
            if isinstance(exc, pickle.PickleError) or getattr(codec, "pickles", False)
            else EncodeError
        )
        raise error(f"cannot encode the value {where}: {_reason(exc)}") from exc
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    what = type(data).__name__
    raise EncodeError(f"codec {_codec_name(codec)!r} returned {what}, not bytes, for key {_key_repr(key)}")


def decode_value(codec: Codec[V], key: object, data: bytes, *, binding: bytes | None = None) -> V:
    """``codec.loads(data)``, with any failure raised as :class:`DecodeError` naming the key and codec.

    The original exception is chained (``__cause__``).

    Example:
        >>> decode_value(JsonCodec(), b"k", b"[1,2]")
        [1, 2]
        >>> decode_value(JsonCodec(), b"user:1", b"{oops")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        sskv_mapping.errors.DecodeError: cannot decode ... key b'user:1' with codec 'json' ...
    """
    bound = getattr(codec, "loads_bound", None) if binding is not None else None
    try:
        return bound(binding, data) if bound is not None else codec.loads(data)
    except Exception as exc:
        raise DecodeError(
            f"cannot decode the stored value of key {_key_repr(key)} with codec {_codec_name(codec)!r} "
            f"({len(data)} bytes): {_reason(exc)}"
        ) from exc
