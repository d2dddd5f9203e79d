"""The state store client: :class:`AsyncStateStoreClient` and its blocking twin :class:`StateStoreClient`.

Its private parts: docs/design/architecture.md, "The client's parts".
"""

from ._client import *  # noqa: F403 (the names of ``_client.__all__``, one list)
from ._client import __all__ as __all__
