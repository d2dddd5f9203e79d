"""The shared namespace layer under the dict and the cache: ``store`` (one namespace: key layout, codec, local
cache, and the ``KeyIndex`` seam a face injects its listing through), ``key_locks`` (per-key leased locks),
``fanout`` (bounded concurrency for the ``*_many`` forms).

Must not import: sskv_mapping.mapping, sskv_mapping.cache, sskv_mapping.integrations, sskv_mapping.emulator
"""
