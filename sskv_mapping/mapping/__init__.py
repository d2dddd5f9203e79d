"""The dict: :class:`StateStoreDict`, a ``MutableMapping`` over one namespace, and :class:`AsyncStateStoreDict`.

Private parts: ``_dict`` (the two classes), ``_listing`` (SCAN or the stored index, behind the namespace's
``KeyIndex`` seam), ``_index`` (the stored, notification-kept key index). Named ``mapping``, not ``dict``:
``from sskv_mapping import dict`` would shadow the builtin.

Must not import: sskv_mapping.cache, sskv_mapping.integrations, sskv_mapping.emulator
"""

from ._dict import AsyncStateStoreDict, StateStoreDict

__all__ = ["AsyncStateStoreDict", "StateStoreDict"]
