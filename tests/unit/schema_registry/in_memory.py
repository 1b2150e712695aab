"""A Schema Registry service with no collaborators, for the unit tests of its rules: the primary's plan of a
write is applied to the in-memory state as the primary's own copy would apply the records it appends."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from broker.schema_registry.service import SchemaRegistryService


def planning_service() -> SchemaRegistryService:
    """The plan reads only the state: no ZooKeeper, produce, fetch or inter-broker collaborator is touched, and
    the metadata cache knows no ``_schemas`` topic, so a read's ``sync`` has nothing to wait for."""
    none: Any = None
    no_topics: Any = SimpleNamespace(partition_count=lambda topic: 0)
    return SchemaRegistryService(1, none, none, none, none, none, no_topics, new_producer_id=lambda: 0)


def run(s: SchemaRegistryService, op: dict[str, Any]) -> Any:
    """Plan ``op`` and apply its records to the state, as the primary's own copy would."""
    rows, result = s._plan(op)
    for key, value, _, _ in rows:
        s.state.apply(key, value)
    return result


def in_memory_service() -> SchemaRegistryService:
    """A service whose writes are planned and applied here (no primary, no ``_schemas``)."""
    s = planning_service()

    async def write(op: dict[str, Any]) -> Any:
        return run(s, op)

    s.write = write  # type: ignore[method-assign]
    return s
