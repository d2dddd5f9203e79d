"""Tests of ``sskv_mapping.lock``: leased locks and fencing tokens, on ``store_backend``."""
