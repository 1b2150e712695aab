"""Reads as services: consumer and follower fetches (service.py), partition offsets (offsets.py), and incremental
fetch sessions (sessions.py)."""
