"""Example FastAPI app on the state store (see README.md)."""
