"""Test support code shared by the whole suite (importable as ``_support``: conftest puts ``tests/`` on
``sys.path``). Not a test package: nothing here is collected."""
