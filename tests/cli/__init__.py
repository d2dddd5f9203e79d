"""Tests of the ``sskv`` command, run as a real subprocess against mosquitto and the emulator process.

A package so that ``test_cli`` cannot collide with a same-named test module elsewhere under ``tests/``.
"""
