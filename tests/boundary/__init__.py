"""API-boundary tests: bad arguments are refused with a typed error before anything is sent.

A package so that its module names cannot collide with same-named test modules elsewhere under ``tests/``.
"""
