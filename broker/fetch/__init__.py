"""Reads as services: consumer and follower fetches (service.py) and partition offsets (offsets.py)."""
