"""The state store client: :class:`AsyncStateStoreClient` and its blocking twin :class:`StateStoreClient`.

Private parts: ``_client`` (the two clients), ``_keeper`` (the connection and reconnects), ``_requests`` (sending,
matching responses, resending what reached nobody), ``_in_flight`` (the bound on requests in flight), ``_watches``
(KEYNOTIFY), ``_scan`` (the SCAN pager).

Must not import: sskv_mapping.mapping, sskv_mapping.cache, sskv_mapping.integrations, sskv_mapping.emulator
"""

from ._client import (
    UNSET,
    AsyncKeyWatch,
    AsyncStateStoreClient,
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
