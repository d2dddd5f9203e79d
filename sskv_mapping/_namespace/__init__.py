"""The namespace layer shared by the dict and the cache: ``store``, ``key_layout``, ``key_locks``, ``fanout``,
``key_index``.

Design: docs/design/namespaces.md.
"""
