"""The cache backend: :class:`AsyncStateStoreCache` and its blocking twin :class:`StateStoreCache`.

Its private parts, one algorithm each: docs/design/namespaces.md.
"""

from ._cache import *  # noqa: F403 (the names of ``_cache.__all__``, one list)
from ._cache import __all__ as __all__
