"""Tests of ``sskv_mapping.cache``: the cache face, blocking and async, on ``store_backend``."""
