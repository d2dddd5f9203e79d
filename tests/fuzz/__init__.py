"""Hostile-input tests: fuzzed parsers (hypothesis and atheris), a request flood against the emulator process,
and a randomized misbehaving responder against the client.

A package so that these module names cannot collide with same-named test modules elsewhere under ``tests/``,
and so that ``python -m tests.fuzz.atheris_targets`` works from the repository root.
"""
