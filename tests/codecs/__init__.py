"""Tests of ``sskv_mapping.codecs``."""
