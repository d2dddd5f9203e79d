"""Election tests use the shared ``new_client`` fixture (tests/conftest.py): loopback and a real broker."""
