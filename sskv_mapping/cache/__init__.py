"""The cache backend: :class:`AsyncStateStoreCache` and its blocking twin :class:`StateStoreCache`.

Private parts, one algorithm each: ``_cache`` (the two classes), ``_generation`` (``clear`` in O(1)), ``_writes``
(entries and the sweep), ``_renewal`` (``touch``/``expire``), ``_counter`` (``incr``/``decr``), ``_single_flight``
(``get_or_set``), ``_stats`` (counters and latencies).

Must not import: sskv_mapping.mapping, sskv_mapping.integrations, sskv_mapping.emulator
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
