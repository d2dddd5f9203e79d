"""Tests of ``sskv_mapping.local_cache``: the in-process cache the dict and the cache faces keep."""
