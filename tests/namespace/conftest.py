"""The dict's and the cache's factories (``make_dict``, ``make_cache``, ``make_sync_cache``), for the tests here that
hold both faces to one rule of the namespace layer."""

from tests.cache.conftest import make_cache, make_sync_cache
from tests.mapping.conftest import make_dict

__all__ = ["make_cache", "make_dict", "make_sync_cache"]
