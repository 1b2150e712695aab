"""The registry's state as _schemas' records build it (Confluent's KafkaStore keys and values,
confluentinc/schema-registry core/.../storage/SchemaRegistryKey*.java and SchemaValue.java): versions, soft and
hard deletes (tombstones), configs, modes, and the id high-water mark that survives compaction."""

from __future__ import annotations

import json

from broker.schema_registry.store import RegistryState, SchemaVersion, config_key, id_key, mode_key, schema_key


def value(sv: SchemaVersion) -> bytes:
    return json.dumps(sv.value()).encode()


def test_versions_deletes_and_ids() -> None:
    state = RegistryState()
    v1 = SchemaVersion("s", 1, 1, '"int"')
    v2 = SchemaVersion("s", 2, 2, '"long"')
    state.apply(schema_key("s", 1), value(v1))
    state.apply(schema_key("s", 2), value(v2))
    assert [v.version for v in state.versions("s")] == [1, 2] and state.max_id == 2
    state.apply(schema_key("s", 1), json.dumps({**v1.value(), "deleted": True}).encode())
    assert [v.version for v in state.versions("s")] == [2]
    assert [v.version for v in state.versions("s", deleted=True)] == [1, 2]
    state.apply(schema_key("s", 1), None)
    assert state.by_id(1) == [] and state.id_of(v2.identity()) == 2
    state.apply(schema_key("s", 2), None)
    assert state.subject_names(deleted=True) == [] and state.max_id == 2  # never decreases


def test_the_high_water_mark_outlives_compacted_schemas() -> None:
    state = RegistryState()
    state.apply(id_key(), json.dumps({"id": 41}).encode())
    assert state.max_id == 41


def test_configs_and_modes_fall_back_to_global_then_defaults() -> None:
    state = RegistryState()
    assert state.compatibility("s") == "BACKWARD" and state.mode("s") == "READWRITE"
    state.apply(config_key(None), json.dumps({"compatibilityLevel": "FULL"}).encode())
    state.apply(config_key("s"), json.dumps({"compatibilityLevel": "NONE"}).encode())
    state.apply(mode_key("s"), json.dumps({"mode": "READONLY"}).encode())
    assert state.compatibility("s") == "NONE" and state.compatibility("t") == "FULL" and state.mode("s") == "READONLY"
    state.apply(config_key("s"), None)
    state.apply(mode_key("s"), None)
    assert state.compatibility("s") == "FULL" and state.mode("s") == "READWRITE"


def test_unknown_records_are_skipped() -> None:
    state = RegistryState()
    state.apply(b'{"keytype": "NOOP", "magic": 0}', b"{}")
    state.apply(b"not json", b"{}")
    state.apply(None, b"{}")
    assert state.subjects == {} and state.max_id == 0
