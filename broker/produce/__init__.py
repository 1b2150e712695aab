"""The produce service (validate, route, append, wait for acks) and forwarding of requests to partition leaders."""
