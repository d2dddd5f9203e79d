"""Example Litestar app on the state store (see README.md)."""
