"""The test suite: one folder per package of ``sskv_mapping`` (``protocol/`` for ``_protocol``, ``transport/`` for
``_transport``, ``namespace/`` for ``_namespace``, ``client/``, ``mapping/``, ``cache/``, ``cli/``, ``emulator/``,
``integrations/``), one per top-level module that needs several files (``local_cache/``, ``lock/``, ``election/``,
``codecs/``), ``test_<module>.py`` for the rest, and the cross-cutting suites (``faults/``, ``fuzz/``, ``security/``,
``peer/``, ``boundary/``, ``recovery/``).

Every folder is a package: support code is imported as ``tests._support...`` and two folders may hold test modules
of the same name. The repository root is on ``sys.path`` (``pythonpath`` in ``pyproject.toml``).
"""
