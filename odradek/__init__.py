"""Odradek's Python client and wire contract."""
