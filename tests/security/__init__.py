"""Security tests: TLS, username/password, X.509 client auth, K8S-SAT, secrets kept out of reprs and logs.

A package so that its module names cannot collide with same-named test modules elsewhere under ``tests/``.
"""
