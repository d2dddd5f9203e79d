"""sskv_mapping: the Azure IoT Operations state store as a Python dict and cache backend.

``import sskv_mapping`` needs no optional extra: the framework adapters live in ``sskv_mapping.integrations``.
"""

from types import FunctionType

from ._namespace.store import StoreEntry
from ._protocol.commands import SetCondition, VDeleteResult
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation
from ._transport.base import Connection, ConnectionFactory, InboundMessage, OutgoingMessage
from ._transport.settings import ConnectionSettings, TlsSettings
from .cache._cache import AsyncStateStoreCache, StateStoreCache, translate_ttl
from .cache._stats import CacheCounters, OpLatency, StateStoreCacheStats
from .client._client import (
    UNSET,
    AsyncKeyWatch,
    AsyncStateStoreClient,
    ClientStats,
    Connecting,
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
from .errors import *
from .local_cache import ABSENT, CachedEntry, CacheStats, LocalCache, ReadTicket
from .lock import AsyncLeasedLock, LeasedLock
from .mapping._changes import AsyncChangeStream, Change, ChangeStream
from .mapping._dict import AsyncStateStoreDict, StateStoreDict

#: The package version.
__version__ = "0.1.0"

__all__ = [
    "ABSENT",
    "UNSET",
    "AsyncChangeStream",
    "AsyncKeyWatch",
    "AsyncLeaderElection",
    "AsyncLeasedLock",
    "AsyncStateStoreCache",
    "AsyncStateStoreClient",
    "AsyncStateStoreDict",
    "BrokerConnectError",
    "CacheCounters",
    "CacheStats",
    "CachedEntry",
    "Change",
    "ChangeStream",
    "ClientStateError",
    "ClientStats",
    "ClockDriftError",
    "Codec",
    "CodecError",
    "ConfigurationError",
    "Connecting",
    "Connection",
    "ConnectionFactory",
    "ConnectionLostError",
    "ConnectionSettings",
    "ConnectionState",
    "CredentialsRefusedError",
    "DecodeError",
    "EncodeError",
    "Entry",
    "FencingTokenLowerVersionError",
    "FencingTokenRequiredError",
    "FencingTokenSkewError",
    "HybridLogicalClock",
    "InboundMessage",
    "JsonCodec",
    "KeyEvent",
    "KeyLengthZeroError",
    "KeyOperation",
    "KeySubscription",
    "KeyWatch",
    "LeaderElection",
    "LeadershipChange",
    "LeasedLock",
    "LocalCache",
    "LockError",
    "MalformedTimestampError",
    "MissingTimestampError",
    "MsgpackCodec",
    "NotAuthorizedError",
    "OpLatency",
    "OutgoingMessage",
    "OverloadedError",
    "PickleCodec",
    "PickleEncodeError",
    "ProtocolError",
    "PublishRefusedError",
    "QuotaExceededError",
    "RawCodec",
    "ReadTicket",
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
    "SetCondition",
    "SetResult",
    "StateStoreCache",
    "StateStoreCacheStats",
    "StateStoreClient",
    "StateStoreDict",
    "StateStoreError",
    "StateStoreStartError",
    "StoreEntry",
    "StrCodec",
    "TimestampSkewError",
    "TlsSettings",
    "TransportError",
    "UnknownCommandError",
    "UnsetType",
    "UnsupportedCommandError",
    "UnsupportedVersionError",
    "VDeleteResult",
    "ValueTooLargeError",
    "WriteBufferFullError",
    "WrongNumberOfArgumentsError",
    "__version__",
    "escape_glob",
    "translate_ttl",
]

# Every exported class and function says it lives here (as httpx does): reprs, tracebacks, the API reference and
# pickled values (PickleCodec stores them across versions) then name a path that no later move inside the
# package can break. Constants, type aliases and ``__version__`` keep theirs.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type | FunctionType):
        _obj.__module__ = "sskv_mapping"
del _name, _obj
