"""The transport package (see :mod:`~sskv_mapping._transport.base`).

Must not import anything above ``_transport``.
"""
