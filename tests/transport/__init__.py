"""Tests of ``sskv_mapping._transport``: connections, settings, SAT, limits and the reconnect backoff."""
