"""The broker's metrics as the HTTP app's middleware uses them, counting nothing: for apps built over doubles."""

from __future__ import annotations

from types import SimpleNamespace


class NullMetric:
    """A Prometheus counter or histogram that accepts every label, increment and observation."""

    def labels(self, *names: str) -> NullMetric:
        return self

    def inc(self) -> None:
        return None

    def observe(self, value: float) -> None:
        return None


def null_metrics() -> SimpleNamespace:
    """What ``broker.metrics`` offers the metrics middleware: ``requests``, ``latency`` and the cache of their
    labelled children."""
    return SimpleNamespace(requests=NullMetric(), latency=NullMetric(), route_children={})
