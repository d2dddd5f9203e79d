"""Tests of ``sskv_mapping.election``: leader election, in-process on ``store_backend`` and across processes."""
