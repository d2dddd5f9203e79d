"""The namespace layer shared by the dict and the cache: ``store``, ``key_layout``, ``key_locks``, ``fanout``,
``key_index``, ``watches``.

Design: docs/design/namespaces.md.
"""
