"""sskv_mapping: the Azure IoT Operations state store as a Python dict and cache backend.

``import sskv_mapping`` needs no optional extra (framework adapters live in ``sskv_mapping.integrations``
and import their framework only when imported themselves).

Must not import any optional extra (msgpack, a framework) at import time.
"""

from ._cache_stats import CacheCounters, OpLatency, StateStoreCacheStats
from ._protocol.commands import SetCondition, VDeleteResult
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation
from ._store import StoreEntry
from ._transport.base import Connection, ConnectionFactory, InboundMessage
from ._transport.settings import ConnectionSettings, TlsSettings
from .cache import AsyncStateStoreCache, StateStoreCache, translate_ttl
from .client import (
    UNSET,
    AsyncKeyWatch,
    AsyncStateStoreClient,
    ConnectionState,
    Entry,
    KeySubscription,
    KeyWatch,
    SetResult,
    StateStoreClient,
    UnsetType,
    escape_glob,
)
from .codecs import Codec, JsonCodec, MsgpackCodec, PickleCodec, RawCodec, StrCodec
from .election import AsyncLeaderElection, LeaderElection, LeadershipChange
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .local_cache import ABSENT, CachedEntry, CacheStats, LocalCache, ReadTicket
from .lock import AsyncLeasedLock, LeasedLock
from .mapping import AsyncStateStoreDict, StateStoreDict

#: The package version.
__version__ = "0.1.0"

__all__ = [
    "ABSENT",
    "UNSET",
    "AsyncKeyWatch",
    "AsyncLeaderElection",
    "AsyncLeasedLock",
    "AsyncStateStoreClient",
    "AsyncStateStoreDict",
    "Codec",
    "ConnectionSettings",
    "ConnectionState",
    "Entry",
    "HybridLogicalClock",
    "JsonCodec",
    "KeyEvent",
    "KeyOperation",
    "KeyWatch",
    "LeaderElection",
    "LeadershipChange",
    "LeasedLock",
    "MsgpackCodec",
    "PickleCodec",
    "RawCodec",
    "SetCondition",
    "SetResult",
    "StateStoreClient",
    "StateStoreDict",
    "AsyncStateStoreCache",
    "StrCodec",
    "StateStoreCache",
    "TlsSettings",
    "VDeleteResult",
    "CacheStats",
    "CachedEntry",
    "Connection",
    "ConnectionFactory",
    "InboundMessage",
    "KeySubscription",
    "LocalCache",
    "OpLatency",
    "StateStoreCacheStats",
    "StoreEntry",
    "UnsetType",
    "ReadTicket",
    "CacheCounters",
    "__version__",
    "escape_glob",
    "translate_ttl",
    *_errors_all,
]
