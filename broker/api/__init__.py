"""The broker's HTTP API: thin handlers that translate requests into broker calls, and nothing else."""
