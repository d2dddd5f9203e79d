"""Example Flask app on the state store (see README.md)."""
