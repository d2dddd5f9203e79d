"""Tests of layer 1, the pure protocol core (``sskv_mapping._protocol``).

A package so that these module names (``test_commands`` ...) cannot collide with same-named test modules
elsewhere under ``tests/``.
"""
