"""The dict: :class:`StateStoreDict`, a ``MutableMapping`` over one namespace, and :class:`AsyncStateStoreDict`.

Named ``mapping``, not ``dict``: ``from sskv_mapping import dict`` would shadow the builtin.
"""

from ._dict import AsyncStateStoreDict, StateStoreDict

__all__ = ["AsyncStateStoreDict", "StateStoreDict"]
