"""The transport package: the only I/O (see :mod:`~sskv_mapping._transport.base` and docs/design/transport.md)."""
