"""The registry's state, as the records of the ``_schemas`` topic build it: the one place that knows them.

Records are Confluent Schema Registry's (its KafkaStore's keys and values): a JSON key with ``keytype``
SCHEMA (subject, version), CONFIG or MODE (subject, or null for the global one), and a JSON value, or a null
value (a tombstone: a permanent delete, or a config/mode reset). One key of Odradek's own, ID_HIGH_WATER, keeps
the largest id ever allocated, so that compaction removing a hard-deleted schema's records never lets an id be
allocated twice.

Invariants: ``apply`` is the only mutator and is given records in offset order, so every broker's copy equals
the primary's at the same offset; ``max_id`` never decreases.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SCHEMA, CONFIG, MODE, ID_HIGH_WATER = "SCHEMA", "CONFIG", "MODE", "ID_HIGH_WATER"
DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One registered version of a subject (Confluent's SchemaValue)."""

    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version)
    deleted: bool = False

    def identity(self) -> tuple[str, str, tuple[tuple[str, str, int], ...]]:
        return self.schema_type, self.schema, self.references

    def render(self) -> dict[str, Any]:
        """Confluent's answer for a version: schemaType and references only when not the defaults."""
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id,
                               "schema": self.schema}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [{"name": n, "subject": s, "version": v} for n, s, v in self.references]
        return out

    def value(self) -> dict[str, Any]:
        out = self.render()
        out["deleted"] = self.deleted
        return out


def schema_key(subject: str, version: int) -> bytes:
    return json.dumps({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1}).encode()


def config_key(subject: str | None) -> bytes:
    return json.dumps({"keytype": CONFIG, "subject": subject, "magic": 0}).encode()


def mode_key(subject: str | None) -> bytes:
    return json.dumps({"keytype": MODE, "subject": subject, "magic": 0}).encode()


def id_key() -> bytes:
    return json.dumps({"keytype": ID_HIGH_WATER, "magic": 0}).encode()


@dataclass
class RegistryState:
    """Subjects' versions, configs and modes; ``max_id`` the largest schema id seen in any record."""

    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of ``_schemas``; records this version does not know are skipped (a newer writer's)."""
        if key is None:
            return
        try:
            k = json.loads(key)
            v = json.loads(value) if value is not None else None
        except ValueError:
            return
        kind = k.get("keytype") if isinstance(k, dict) else None
        if kind == SCHEMA:
            subject, version = k["subject"], int(k["version"])
            if v is None:
                versions = self.subjects.get(subject, {})
                versions.pop(version, None)
                if not versions:
                    self.subjects.pop(subject, None)
                return
            sv = SchemaVersion(subject, version, int(v["id"]), v["schema"], v.get("schemaType") or "AVRO",
                               tuple((r["name"], r["subject"], int(r["version"])) for r in v.get("references") or []),
                               bool(v.get("deleted", False)))
            self.subjects.setdefault(subject, {})[version] = sv
            self.max_id = max(self.max_id, sv.id)
        elif kind == CONFIG:
            self._set(self.configs, k.get("subject"), None if v is None else v.get("compatibilityLevel"))
        elif kind == MODE:
            self._set(self.modes, k.get("subject"), None if v is None else v.get("mode"))
        elif kind == ID_HIGH_WATER and v is not None:
            self.max_id = max(self.max_id, int(v["id"]))

    @staticmethod
    def _set(table: dict[str | None, str], subject: str | None, value: str | None) -> None:
        if value is None:
            table.pop(subject, None)
        else:
            table[subject] = value

    # ----------------------------------------------------------------------------------------------- reads

    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaVersion]:
        return [v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted]

    def subject_names(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(s for s in self.subjects if s.startswith(prefix) and self.versions(s, deleted=deleted))

    def by_id(self, schema_id: int, *, deleted: bool = True) -> list[SchemaVersion]:
        return [v for versions in self.subjects.values() for v in versions.values()
                if v.id == schema_id and (deleted or not v.deleted)]

    def id_of(self, identity: tuple[str, str, tuple[tuple[str, str, int], ...]],
              key: Callable[[SchemaVersion], tuple[str, str, tuple[tuple[str, str, int], ...]]] | None = None,
              ) -> int | None:
        """The id already given to this schema (type, text, references), under any subject; ``key`` gives a
        stored version's identity (its own ``identity()`` by default)."""
        key = key or SchemaVersion.identity
        for versions in self.subjects.values():
            for v in versions.values():
                if key(v) == identity:
                    return v.id
        return None

    def referenced_by(self, subject: str, version: int) -> list[int]:
        return sorted({v.id for versions in self.subjects.values() for v in versions.values()
                       if not v.deleted and any(s == subject and n == version for _, s, n in v.references)})

    def compatibility(self, subject: str | None) -> str:
        return self.configs.get(subject) or self.configs.get(None) or DEFAULT_COMPATIBILITY

    def mode(self, subject: str | None) -> str:
        return self.modes.get(subject) or self.modes.get(None) or DEFAULT_MODE
