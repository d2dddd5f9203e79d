"""Fault-injection tests (``-m faults``): real mosquitto, real emulator and worker processes, broken on purpose.

A package so that these module names cannot collide with same-named test modules elsewhere under ``tests/``.
"""
