"""Tests of ``sskv_mapping.emulator``: the core, the broker wrapper and the emulator process."""
