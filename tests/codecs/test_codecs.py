"""Codecs (layer 4): round trips, strictness, pickle's opt-in, and the errors that name key and codec."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping.codecs import (
    Codec,
    JsonCodec,
    MsgpackCodec,
    PickleCodec,
    RawCodec,
    StrCodec,
    decode_value,
    encode_value,
    get_codec,
)
from sskv_mapping.errors import CodecError, ConfigurationError, DecodeError, EncodeError, StateStoreError

SECRET = b"a-test-secret-of-more-than-16-bytes"

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = st.none() | st.booleans() | st.integers() | finite_floats | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=25,
)
int64ish = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack can carry
msgpack_scalars = st.none() | st.booleans() | int64ish | st.floats(allow_nan=False) | st.text() | st.binary()
msgpack_keys = st.text(max_size=10) | int64ish | st.binary(max_size=10)
msgpack_values = st.recursive(
    msgpack_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(msgpack_keys, inner, max_size=5),
    max_leaves=25,
)
pickle_values = st.recursive(
    st.none() | st.integers() | st.text() | st.binary() | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=4).map(tuple)
        | st.frozensets(st.integers() | st.text(), max_size=4)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


# ---------------------------------------------------------------------------------------------------------
# the protocol and get_codec


@pytest.mark.parametrize(
    ("codec", "name"),
    [
        (RawCodec(), "raw"),
        (StrCodec(), "str"),
        (JsonCodec(), "json"),
        (MsgpackCodec(), "msgpack"),
        (PickleCodec(allow_unsafe=True), "pickle"),
        (PickleCodec(key=SECRET), "pickle+hmac-sha256"),
    ],
)
def test_builtin_codecs_satisfy_the_protocol(codec: Codec[Any], name: str) -> None:
    assert isinstance(codec, Codec)
    assert codec.name == name


@pytest.mark.parametrize(
    ("name", "cls"), [("raw", RawCodec), ("str", StrCodec), ("json", JsonCodec), ("msgpack", MsgpackCodec)]
)
def test_get_codec_resolves_names(name: str, cls: type) -> None:
    codec = get_codec(name)
    assert type(codec) is cls
    assert get_codec(name.upper()).name == name


def test_get_codec_returns_instances_unchanged() -> None:
    codec = JsonCodec(sort_keys=True)
    assert get_codec(codec) is codec

    class Custom:
        name = "custom"

        def dumps(self, value: int) -> bytes:
            return str(value).encode()

        def loads(self, data: bytes) -> int:
            return int(data)

    custom = Custom()
    assert get_codec(custom) is custom


@pytest.mark.parametrize("name", ["pickle", "PICKLE", " pickle ", "pickle+hmac-sha256"])
def test_get_codec_never_gives_pickle_by_name(name: str) -> None:
    with pytest.raises(ConfigurationError, match="PickleCodec"):
        get_codec(name)


def test_get_codec_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        get_codec("yaml")
    message = str(info.value)
    assert "'yaml'" in message
    for name in ("raw", "str", "json", "msgpack"):
        assert name in message
    assert isinstance(info.value, ValueError)


def test_get_codec_refuses_a_class_and_a_non_codec() -> None:
    with pytest.raises(ConfigurationError, match=r"JsonCodec\(\)"):
        get_codec(JsonCodec)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="not a codec"):
        get_codec(object())  # type: ignore[call-overload]


# ---------------------------------------------------------------------------------------------------------
# raw


@given(st.binary())
def test_raw_round_trip(data: bytes) -> None:
    codec = RawCodec()
    assert codec.loads(codec.dumps(data)) == data
    assert type(codec.loads(codec.dumps(data))) is bytes


def test_raw_accepts_bytes_like_and_copies() -> None:
    buf = bytearray(b"abc")
    out = RawCodec().dumps(buf)
    buf[0] = ord("z")
    assert out == b"abc"
    assert type(out) is bytes
    assert RawCodec().dumps(memoryview(b"xyz")) == b"xyz"


@pytest.mark.parametrize("value", ["text", 1, None, [b"a"]])
def test_raw_refuses_non_bytes(value: object) -> None:
    with pytest.raises(EncodeError) as info:
        encode_value(RawCodec(), b"k", value)  # type: ignore[misc]
    assert isinstance(info.value.__cause__, TypeError)
    assert "'raw'" in str(info.value)


# ---------------------------------------------------------------------------------------------------------
# str


@given(st.text())
def test_str_round_trip(text: str) -> None:
    codec = StrCodec()
    data = codec.dumps(text)
    assert data == text.encode("utf-8")
    assert codec.loads(data) == text


def test_str_refuses_bytes_and_lone_surrogates() -> None:
    with pytest.raises(EncodeError) as info:
        encode_value(StrCodec(), b"k", b"bytes")  # type: ignore[misc]
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(EncodeError) as info:
        encode_value(StrCodec(), b"k", "\ud800")
    assert isinstance(info.value.__cause__, UnicodeEncodeError)


def test_str_refuses_invalid_utf8_naming_key_and_codec() -> None:
    with pytest.raises(DecodeError) as info:
        decode_value(StrCodec(), b"greeting", b"\xff\xfe")
    assert "b'greeting'" in str(info.value)
    assert "'str'" in str(info.value)
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


# ---------------------------------------------------------------------------------------------------------
# json


@given(json_values)
def test_json_round_trip(value: Any) -> None:
    codec = JsonCodec()
    data = codec.dumps(value)
    assert codec.loads(data) == value
    # what we write is plain JSON any other client can read
    assert json.loads(data.decode("utf-8")) == value


def test_json_is_compact_utf8_without_escapes() -> None:
    assert JsonCodec().dumps({"a": [1, 2], "b": "Zoë 🦊"}) == '{"a":[1,2],"b":"Zoë 🦊"}'.encode()


def test_json_null_is_none_and_empty_bytes_are_not() -> None:
    codec = JsonCodec()
    assert codec.dumps(None) == b"null"
    assert decode_value(codec, b"k", b"null") is None
    # an empty stored value is not "null": it must not silently read as None (a missing key does)
    with pytest.raises(DecodeError):
        decode_value(codec, b"k", b"")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"x": math.inf}])
def test_json_refuses_nan_and_infinity_by_default(value: Any) -> None:
    with pytest.raises(EncodeError) as info:
        encode_value(JsonCodec(), b"k", value)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("text", [b"NaN", b"Infinity", b"-Infinity", b"[1,NaN]"])
def test_json_refuses_nan_and_infinity_when_reading_too(text: bytes) -> None:
    with pytest.raises(DecodeError, match="allow_nan"):
        decode_value(JsonCodec(), b"k", text)


def test_json_allow_nan_accepts_them_both_ways() -> None:
    codec = JsonCodec(allow_nan=True)
    assert codec.dumps([math.inf, -math.inf]) == b"[Infinity,-Infinity]"
    assert math.isnan(codec.loads(codec.dumps(math.nan)))
    assert codec.loads(b"-Infinity") == -math.inf


def test_json_reads_only_utf8() -> None:
    utf16 = '{"a":1}'.encode("utf-16")  # json.loads(bytes) would guess this encoding
    with pytest.raises(DecodeError):
        decode_value(JsonCodec(), b"k", utf16)
    with pytest.raises(DecodeError):
        decode_value(JsonCodec(), b"k", b"\xef\xbb\xbf{}")  # a BOM is not JSON either


def test_json_default_and_object_hook() -> None:
    class Point:
        def __init__(self, x: int, y: int) -> None:
            self.x, self.y = x, y

    def default(obj: Any) -> Any:
        if isinstance(obj, Point):
            return {"__point__": [obj.x, obj.y]}
        raise TypeError(f"cannot encode {type(obj).__name__}")

    def hook(obj: dict[str, Any]) -> Any:
        return Point(*obj["__point__"]) if "__point__" in obj else obj

    codec = JsonCodec(default=default, object_hook=hook)
    back = codec.loads(codec.dumps({"p": Point(1, 2)}))
    assert isinstance(back["p"], Point)
    assert (back["p"].x, back["p"].y) == (1, 2)
    with pytest.raises(EncodeError, match="cannot encode set"):
        encode_value(codec, b"k", {1, 2})


def test_json_sort_keys_makes_equal_dicts_equal_bytes() -> None:
    codec = JsonCodec(sort_keys=True)
    assert codec.dumps({"b": 1, "a": 2}) == codec.dumps({"a": 2, "b": 1}) == b'{"a":2,"b":1}'


def test_json_refuses_non_callable_hooks() -> None:
    with pytest.raises(ConfigurationError):
        JsonCodec(default=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        JsonCodec(object_hook="x")  # type: ignore[arg-type]


def test_json_circular_value_is_an_encode_error_and_the_codec_still_works() -> None:
    codec = JsonCodec()
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EncodeError):
        encode_value(codec, b"k", loop)
    assert encode_value(codec, b"k", [1]) == b"[1]"


# ---------------------------------------------------------------------------------------------------------
# msgpack


@given(msgpack_values)
def test_msgpack_round_trip(value: Any) -> None:
    codec = MsgpackCodec()
    assert codec.loads(codec.dumps(value)) == value


def test_msgpack_keeps_bytes_and_str_apart_and_none() -> None:
    codec = MsgpackCodec()
    back = codec.loads(codec.dumps({"s": "x", "b": b"x", 3: None}))
    assert back == {"s": "x", "b": b"x", 3: None}
    assert type(back["s"]) is str
    assert type(back["b"]) is bytes
    assert decode_value(codec, b"k", codec.dumps(None)) is None


def test_msgpack_errors_name_key_and_codec() -> None:
    codec = MsgpackCodec()
    with pytest.raises(EncodeError, match=r"b'big'.*'msgpack'"):
        encode_value(codec, b"big", 2**64)
    with pytest.raises(DecodeError, match=r"b'junk'.*'msgpack'"):
        decode_value(codec, b"junk", b"\xc1")  # 0xc1 is never used in msgpack
    with pytest.raises(DecodeError):
        decode_value(codec, b"k", codec.dumps(1) + codec.dumps(2))  # extra data


def test_msgpack_hooks() -> None:
    codec = MsgpackCodec(
        default=lambda obj: sorted(obj) if isinstance(obj, set) else obj,
        object_hook=lambda d: {k.upper(): v for k, v in d.items()},
    )
    assert codec.loads(codec.dumps({"a": {3, 1, 2}})) == {"A": [1, 2, 3]}


def test_msgpack_missing_extra_names_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "msgpack", None)  # makes `import msgpack` fail
    with pytest.raises(ImportError, match=r"pip install 'sskv-mapping\[msgpack\]'") as info:
        MsgpackCodec()
    assert isinstance(info.value.__cause__, ImportError)
    with pytest.raises(ImportError, match=r"sskv-mapping\[msgpack\]"):
        get_codec("msgpack")
    # the other codecs do not care
    assert get_codec("json").dumps([1]) == b"[1]"


def test_codecs_module_imports_without_msgpack() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["msgpack"] = None
        import sskv_mapping.codecs as c
        assert c.get_codec("json").loads(b"[1]") == [1]
        try:
            c.MsgpackCodec()
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'sskv-mapping[msgpack]'" in out.stdout


# ---------------------------------------------------------------------------------------------------------
# pickle


def test_pickle_refuses_to_be_built_without_a_decision() -> None:
    with pytest.raises(ConfigurationError, match=r"allow_unsafe=True") as info:
        PickleCodec()
    assert "key=" in str(info.value)
    with pytest.raises(ConfigurationError):
        PickleCodec(allow_unsafe=False)
    with pytest.raises(ConfigurationError):
        PickleCodec(allow_unsafe=1)  # type: ignore[arg-type]  # only a literal True opts in


@pytest.mark.parametrize("key", [b"", b"short", b"x" * 15, "a string key of enough length"])
def test_pickle_refuses_weak_or_non_bytes_keys(key: Any) -> None:
    with pytest.raises(ConfigurationError):
        PickleCodec(key=key)


def test_pickle_refuses_a_bad_protocol() -> None:
    with pytest.raises(ConfigurationError):
        PickleCodec(allow_unsafe=True, protocol=pickle.HIGHEST_PROTOCOL + 1)


@given(pickle_values)
def test_pickle_unsafe_round_trip(value: Any) -> None:
    codec = PickleCodec(allow_unsafe=True)
    assert not codec.signed
    assert codec.loads(codec.dumps(value)) == value


@given(pickle_values)
def test_pickle_signed_round_trip(value: Any) -> None:
    codec = PickleCodec(key=SECRET)
    data = codec.dumps(value)
    assert codec.signed
    assert len(data) >= 32
    assert codec.loads(data) == value


@given(st.data())
def test_pickle_signed_detects_any_tampering_without_unpickling(data: st.DataObject) -> None:
    codec = PickleCodec(key=SECRET)
    payload = bytearray(codec.dumps({"user": "alice", "admin": False}))
    index = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    payload[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    unpickled: list[bytes] = []
    real_loads = pickle.loads

    def spy(body: bytes, /, **kwargs: Any) -> Any:
        unpickled.append(body)
        return real_loads(body, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pickle, "loads", spy)
        with pytest.raises(DecodeError, match=r"b'session'.*pickle\+hmac-sha256"):
            decode_value(codec, b"session", bytes(payload))
    assert unpickled == []


_RAN: list[str] = []


def _record(what: str) -> None:
    _RAN.append(what)


class _Exploit:
    """Unpickling this calls ``_record("pwned")``: a stand-in for ``os.system``."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_record, ("pwned",))


def test_pickle_signed_never_runs_a_forged_payload() -> None:
    forged = pickle.dumps(_Exploit())
    codec = PickleCodec(key=SECRET)
    _RAN.clear()
    for payload in (forged, b"\x00" * 32 + forged, PickleCodec(key=b"another-secret-16b!").dumps(1)):
        with pytest.raises(DecodeError):
            decode_value(codec, b"k", payload)
    with pytest.raises(DecodeError, match="shorter than"):
        decode_value(codec, b"k", b"\x00" * 31)
    assert _RAN == []
    # and this is exactly what allow_unsafe=True means:
    PickleCodec(allow_unsafe=True).loads(forged)
    assert _RAN == ["pwned"]


def test_pickle_repr_hides_the_key() -> None:
    assert SECRET.decode() not in repr(PickleCodec(key=SECRET))
    assert "hidden" in repr(PickleCodec(key=SECRET))


def test_pickle_unpicklable_value_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="'pickle'"):
        encode_value(PickleCodec(allow_unsafe=True), b"k", lambda: None)


# ---------------------------------------------------------------------------------------------------------
# encode_value / decode_value


class _Broken:
    name = "broken"

    def dumps(self, value: Any) -> bytes:
        raise RuntimeError("dumps exploded")

    def loads(self, data: bytes) -> Any:
        raise KeyError("looks like a miss but is not")


def test_any_codec_failure_becomes_a_codec_error_naming_key_and_codec() -> None:
    with pytest.raises(EncodeError) as enc:
        encode_value(_Broken(), "user:7", 1)
    assert "'user:7'" in str(enc.value)
    assert "'broken'" in str(enc.value)
    assert "dumps exploded" in str(enc.value)
    assert isinstance(enc.value.__cause__, RuntimeError)

    with pytest.raises(DecodeError) as dec:
        decode_value(_Broken(), b"user:7", b"xyz")
    assert "b'user:7'" in str(dec.value)
    assert "'broken'" in str(dec.value)
    assert isinstance(dec.value.__cause__, KeyError)
    # a codec failure must never look like "key absent" to dict.get()
    assert not isinstance(dec.value, LookupError)
    assert isinstance(dec.value, CodecError)
    assert isinstance(dec.value, ValueError)
    assert isinstance(dec.value, StateStoreError)


def test_long_keys_are_truncated_in_messages() -> None:
    key = b"k" * 6500
    with pytest.raises(DecodeError) as info:
        decode_value(JsonCodec(), key, b"{")
    message = str(info.value)
    assert "b'kkkk" in message
    assert "..." in message
    assert len(message) < 400


def test_codec_returning_non_bytes_is_an_encode_error() -> None:
    class Wrong:
        name = "wrong"

        def dumps(self, value: Any) -> bytes:
            return "not bytes"  # type: ignore[return-value]

        def loads(self, data: bytes) -> Any:
            return data

    with pytest.raises(EncodeError, match=r"'wrong' returned str"):
        encode_value(Wrong(), b"k", 1)


def test_codec_returning_bytearray_is_normalised_to_bytes() -> None:
    class Buf:
        name = "buf"

        def dumps(self, value: bytes) -> bytes:
            return bytearray(value)  # type: ignore[return-value]

        def loads(self, data: bytes) -> bytes:
            return data

    out = encode_value(Buf(), b"k", b"abc")
    assert out == b"abc"
    assert type(out) is bytes


def test_keyboard_interrupt_is_not_swallowed() -> None:
    class Interrupted:
        name = "interrupted"

        def dumps(self, value: Any) -> bytes:
            raise KeyboardInterrupt

        def loads(self, data: bytes) -> Any:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        encode_value(Interrupted(), b"k", 1)
    with pytest.raises(KeyboardInterrupt):
        decode_value(Interrupted(), b"k", b"")


@pytest.mark.parametrize(
    "codec", [RawCodec(), StrCodec(), JsonCodec(), MsgpackCodec(), PickleCodec(key=SECRET)], ids=str
)
def test_encode_value_matches_dumps_for_good_values(codec: Codec[Any]) -> None:
    value: Any = b"v" if isinstance(codec, RawCodec) else "v"
    assert encode_value(codec, b"k", value) == codec.dumps(value)
    assert decode_value(codec, b"k", codec.dumps(value)) == value
