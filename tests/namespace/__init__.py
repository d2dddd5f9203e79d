"""Tests of ``sskv_mapping._namespace``: the shared namespace layer under the dict and the cache (fan-out here)."""
