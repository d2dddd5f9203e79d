"""The state store client: :class:`AsyncStateStoreClient` and its blocking twin :class:`StateStoreClient`.

Its private parts: docs/design/architecture.md, "The client's parts".
"""

from ._client import (
    UNSET,
    AsyncKeyWatch,
    AsyncStateStoreClient,
    Connecting,
    ConnectionState,
    Entry,
    KeySubscription,
    KeyWatch,
    SetResult,
    StateStoreClient,
    TlsSettings,
    UnsetType,
    escape_glob,
    ttl_to_ms,
)

__all__ = [
    "UNSET",
    "AsyncKeyWatch",
    "AsyncStateStoreClient",
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
]
