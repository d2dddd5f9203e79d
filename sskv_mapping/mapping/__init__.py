"""The dict: :class:`StateStoreDict`, a ``MutableMapping`` over one namespace, and :class:`AsyncStateStoreDict`.

Named ``mapping``, not ``dict``: ``from sskv_mapping import dict`` would shadow the builtin.
"""

from ._changes import AsyncChangeStream, Change, ChangeStream
from ._dict import AsyncStateStoreDict, StateStoreDict

__all__ = ["AsyncChangeStream", "AsyncStateStoreDict", "Change", "ChangeStream", "StateStoreDict"]
