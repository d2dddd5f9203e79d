"""Tests of ``sskv_mapping.mapping``: the dict face, blocking and async, its listing modes and its stored index."""
