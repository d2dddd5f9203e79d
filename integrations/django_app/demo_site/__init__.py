"""A small Django site whose cache, sessions and shared settings live in the Azure IoT Operations state store."""
