"""The cache backend: :class:`AsyncStateStoreCache` and its blocking twin :class:`StateStoreCache`.

Its private parts, one algorithm each: docs/design/namespaces.md.
"""

from ._cache import (
    DEFAULT_TTL,
    LATENCY_BUCKETS,
    AsyncStateStoreCache,
    OpLatency,
    StateStoreCache,
    StateStoreCacheStats,
    TtlConvention,
    translate_ttl,
)

__all__ = [
    "DEFAULT_TTL",
    "LATENCY_BUCKETS",
    "AsyncStateStoreCache",
    "OpLatency",
    "StateStoreCache",
    "StateStoreCacheStats",
    "TtlConvention",
    "translate_ttl",
]
