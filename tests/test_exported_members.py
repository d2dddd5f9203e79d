"""The public surface, pinned: ``sskv_mapping.__all__`` is exactly this list, every name in it exists, and
every sskv_mapping type that appears in the signature of something exported is exported too (a user can name
what the API hands them). A change to the public API has to change this file.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import typing
from typing import Any

import pytest

import sskv_mapping
import sskv_mapping.errors

EXPECTED = {
    # clients, watches, locks, election
    "AsyncStateStoreClient",
    "StateStoreClient",
    "AsyncKeyWatch",
    "KeyWatch",
    "KeySubscription",
    "KeyEvent",
    "KeyOperation",
    "AsyncLeasedLock",
    "LeasedLock",
    "AsyncLeaderElection",
    "LeaderElection",
    "LeadershipChange",
    # values the client hands back or takes
    "Entry",
    "SetResult",
    "ClientStats",
    "SetCondition",
    "VDeleteResult",
    "HybridLogicalClock",
    "ConnectionState",
    "UNSET",
    "UnsetType",
    "escape_glob",
    # connections
    "Connecting",
    "ConnectionSettings",
    "TlsSettings",
    "Connection",
    "ConnectionFactory",
    "InboundMessage",
    "OutgoingMessage",
    # the dict and the cache
    "AsyncStateStoreDict",
    "StateStoreDict",
    "StoreEntry",
    "Change",
    "AsyncChangeStream",
    "ChangeStream",
    "AsyncStateStoreCache",
    "StateStoreCache",
    "StateStoreCacheStats",
    "CacheCounters",
    "OpLatency",
    "translate_ttl",
    "LocalCache",
    "CachedEntry",
    "CacheStats",
    "ReadTicket",
    "ABSENT",
    # codecs
    "Codec",
    "JsonCodec",
    "MsgpackCodec",
    "PickleCodec",
    "RawCodec",
    "StrCodec",
    "__version__",
    # the exception tree (sskv_mapping.errors), whole
    "StateStoreError",
    "StateStoreStartError",
    "ConfigurationError",
    "ClientStateError",
    "ReentrantCallError",
    "TransportError",
    "BrokerConnectError",
    "ConnectionLostError",
    "CredentialsRefusedError",
    "SessionLostError",
    "SessionTakenOverError",
    "PublishRefusedError",
    "ServiceUnavailableError",
    "ReauthenticationError",
    "RequestTimeoutError",
    "ProtocolError",
    "UnsupportedVersionError",
    "ServiceError",
    "TimestampSkewError",
    "FencingTokenRequiredError",
    "FencingTokenSkewError",
    "FencingTokenLowerVersionError",
    "QuotaExceededError",
    "RequestSyntaxError",
    "NotAuthorizedError",
    "UnknownCommandError",
    "UnsupportedCommandError",
    "ValueTooLargeError",
    "WriteBufferFullError",
    "WrongNumberOfArgumentsError",
    "MissingTimestampError",
    "MalformedTimestampError",
    "KeyLengthZeroError",
    "ResponseTooLargeError",
    "RequestTooLargeError",
    "OverloadedError",
    "RpcStatusError",
    "ClockDriftError",
    "LockError",
    "CodecError",
    "EncodeError",
    "PickleEncodeError",
    "DecodeError",
}


def test_all_is_pinned() -> None:
    assert sorted(sskv_mapping.__all__) == sorted(EXPECTED)
    assert len(sskv_mapping.__all__) == len(set(sskv_mapping.__all__)), "a name is listed twice"


def test_all_is_a_sorted_literal() -> None:
    # ruff's RUF022 order (constants, classes, the rest), so a name is found where a reader looks for it
    def kind(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert sskv_mapping.__all__ == sorted(sskv_mapping.__all__, key=kind)


def test_every_exported_class_and_function_names_the_package_as_its_home() -> None:
    # reprs, the API reference and pickled values name ``sskv_mapping.X``, a path no internal move can break
    homes = {
        name: obj.__module__
        for name in sskv_mapping.__all__
        if isinstance(obj := getattr(sskv_mapping, name), type) or inspect.isfunction(obj)
    }
    assert len(homes) > 70
    assert {name: home for name, home in homes.items() if home != "sskv_mapping"} == {}
    restored = pickle.loads(pickle.dumps(sskv_mapping.HybridLogicalClock(1, 2, "n")))
    assert restored == sskv_mapping.HybridLogicalClock(1, 2, "n")
    assert b"sskv_mapping\n" in pickle.dumps(sskv_mapping.HybridLogicalClock(1, 2, "n"), protocol=0)


#: Every public module's ``__all__``, word for word: ``from sskv_mapping.cache import DEFAULT_TTL`` keeps working
#: whatever moves inside the package.
PUBLIC_MODULES = {
    "client": [
        "UNSET",
        "AsyncKeyWatch",
        "AsyncStateStoreClient",
        "ClientStats",
        "Connecting",
        "ConnectionState",
        "Entry",
        "KeySubscription",
        "KeyWatch",
        "SetResult",
        "StateStoreClient",
        "TlsSettings",
        "UnsetType",
        "escape_glob",
        "ttl_to_ms",
    ],
    "cache": [
        "DEFAULT_TTL",
        "LATENCY_BUCKETS",
        "AsyncStateStoreCache",
        "OpLatency",
        "StateStoreCache",
        "StateStoreCacheStats",
        "TtlConvention",
        "translate_ttl",
    ],
    "mapping": ["AsyncChangeStream", "AsyncStateStoreDict", "Change", "ChangeStream", "StateStoreDict"],
    "lock": ["AsyncLeasedLock", "LeasedLock"],
    "election": ["AsyncLeaderElection", "LeaderElection", "LeadershipChange"],
    "codecs": [
        *["Codec", "JsonCodec", "MsgpackCodec", "PickleCodec", "RawCodec", "StrCodec"],
        *["decode_value", "encode_value", "get_codec"],
    ],
    "local_cache": [
        *["ABSENT", "DEFAULT_MAX_STALENESS", "Absent", "CacheStats", "CachedEntry", "LocalCache", "ReadTicket"],
    ],
    "cli": ["build_parser", "main"],
    "errors": sorted(sskv_mapping.errors.__all__),
}


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_every_public_module_keeps_its_all_and_each_name_resolves(module: str) -> None:
    mod = importlib.import_module(f"sskv_mapping.{module}")
    assert sorted(mod.__all__) == sorted(PUBLIC_MODULES[module])
    assert [name for name in mod.__all__ if not hasattr(mod, name)] == []
    # the same object as the package exports, where the package exports it
    assert [
        n for n in mod.__all__ if n in sskv_mapping.__all__ and getattr(mod, n) is not getattr(sskv_mapping, n)
    ] == []


def test_every_exported_name_exists() -> None:
    missing = [name for name in sskv_mapping.__all__ if not hasattr(sskv_mapping, name)]
    assert missing == []


def test_the_whole_exception_tree_is_exported() -> None:
    assert set(sskv_mapping.errors.__all__) <= set(sskv_mapping.__all__)


#: Members whose signature may name an internal type, each with the reason. Users receive a KeySubscription and
#: never build one.
INTERNAL_PLUMBING = {
    "KeySubscription.__init__": "made by the client's subscribe_key, not by users",
    "ReadTicket.__init__": "made by LocalCache.begin_read, not by users",
}


def _package_types(annotation: Any) -> set[type]:
    """The sskv_mapping classes named anywhere in a (resolved) annotation."""
    found: set[type] = set()
    stack = [annotation]
    while stack:
        tp = stack.pop()
        origin = typing.get_origin(tp)
        if origin is not None:
            stack.extend(typing.get_args(tp))
            stack.append(origin)
        elif isinstance(tp, type) and tp.__module__.startswith("sskv_mapping"):
            found.add(tp)
    return found


def _signatures(obj: Any) -> dict[str, dict[str, Any]]:
    """``{where: resolved annotations}`` for ``obj`` and, for a class, its public methods, properties and fields."""
    out: dict[str, dict[str, Any]] = {}
    if inspect.isclass(obj):
        if dataclasses.is_dataclass(obj):
            # the generated __init__ resolves names in the defining module (the class's __module__ says
            # "sskv_mapping" now, where a private annotation name does not resolve)
            out[f"{obj.__name__} fields"] = typing.get_type_hints(obj.__init__)
        for name, member in vars(obj).items():
            if name.startswith("_") and name not in {"__init__", "__call__", "__getitem__", "__iter__", "__aiter__"}:
                continue
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member):
                out[f"{obj.__name__}.{name}"] = typing.get_type_hints(member)
    elif inspect.isfunction(obj):
        out[obj.__name__] = typing.get_type_hints(obj)
    return out


def test_every_type_in_a_public_signature_is_exported() -> None:
    exported = {id(getattr(sskv_mapping, name)) for name in sskv_mapping.__all__}
    unexported: dict[str, set[str]] = {}
    for name in sskv_mapping.__all__:
        for where, hints in _signatures(getattr(sskv_mapping, name)).items():
            if where in INTERNAL_PLUMBING:
                continue
            for annotation in hints.values():
                for tp in _package_types(annotation):
                    if id(tp) not in exported:
                        unexported.setdefault(f"{tp.__module__}.{tp.__qualname__}", set()).add(where)
    assert unexported == {}


def test_the_signature_check_can_fail() -> None:
    # the walker itself: a private type inside a generic is found
    from sskv_mapping.local_cache import _AbsentType

    assert _package_types(dict[str, list[_AbsentType | None]]) == {_AbsentType}
