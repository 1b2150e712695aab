"""Fakes of the group coordinator's collaborators: its ZooKeeper group store, the session it watches, the metadata
view and the clock.

Why a fake of the store and not of ZooKeeper: the coordinator reaches ZooKeeper only through ``zk.groups.GroupStore``
verbs, so the fake keeps exactly what those verbs promise: one coordinator node per group (the first claim
wins), member and owner nodes that are ephemeral (gone with the coordinator's session, ``expire_session``), an
owner node that only its member can release, and persistent state and offsets. States are stored as JSON, so a
state that would not survive ZooKeeper fails here too. Integration tests run the real store.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.model import TopicAssignment

TP = tuple[str, int]
Offset = tuple[int, str, int]


class FakeGroupStore:
    """The ``GroupStore`` verbs the coordinator calls (from worker threads: every verb takes the lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.groups: set[str] = set()
        self.coordinators: dict[str, int] = {}
        self.states: dict[str, str] = {}  # group -> the state's JSON
        self.members: dict[str, dict[str, dict[str, Any]]] = {}
        self.owners: dict[str, dict[TP, str]] = {}
        self.offsets: dict[str, dict[TP, Offset]] = {}

    # ----------------------------------------------------------------------------------- test controls

    def expire_session(self, broker_id: int) -> None:
        """The broker's ZooKeeper session expired: its ephemeral nodes (coordinator, ids, owners) are gone."""
        with self._lock:
            for group in [g for g, holder in self.coordinators.items() if holder == broker_id]:
                del self.coordinators[group]
                self.members.pop(group, None)
                self.owners.pop(group, None)

    def state(self, group: str) -> dict[str, Any] | None:
        with self._lock:
            raw = self.states.get(group)
        return None if raw is None else json.loads(raw)

    # ------------------------------------------------------------------------------------- coordinator

    def claim_coordinator(self, group: str, broker_id: int, epoch: int) -> int:
        with self._lock:
            self.groups.add(group)
            return self.coordinators.setdefault(group, broker_id)

    def get_coordinator(self, group: str, watch: Callable[[], None] | None = None) -> int | None:
        with self._lock:
            return self.coordinators.get(group)

    def release_coordinator(self, group: str, broker_id: int) -> None:
        with self._lock:
            if self.coordinators.get(group) == broker_id:
                del self.coordinators[group]

    # ------------------------------------------------------------------------------------------ groups

    def list_groups(self) -> list[str]:
        with self._lock:
            return sorted(self.groups)

    def exists(self, group: str) -> bool:
        with self._lock:
            return group in self.groups

    def get_state(self, group: str) -> dict[str, Any] | None:
        return self.state(group)

    def set_state(self, group: str, state: dict[str, Any]) -> None:
        raw = json.dumps(state)
        with self._lock:
            self.groups.add(group)
            self.states[group] = raw

    def delete_group(self, group: str) -> None:
        with self._lock:
            self.groups.discard(group)
            for nodes in (self.coordinators, self.states, self.members, self.owners, self.offsets):
                nodes.pop(group, None)

    # ----------------------------------------------------------------------------------------- members

    def register_member(self, group: str, member_id: str, member: dict[str, Any]) -> None:
        with self._lock:
            self.members.setdefault(group, {})[member_id] = json.loads(json.dumps(member))

    def deregister_member(self, group: str, member_id: str) -> None:
        with self._lock:
            self.members.get(group, {}).pop(member_id, None)

    # ------------------------------------------------------------------------------------------ owners

    def claim_owner(self, group: str, topic: str, partition: int, member_id: str) -> bool:
        with self._lock:
            owners = self.owners.setdefault(group, {})
            return owners.setdefault((topic, partition), member_id) == member_id

    def release_owner(self, group: str, topic: str, partition: int, member_id: str) -> None:
        with self._lock:
            owners = self.owners.get(group, {})
            if owners.get((topic, partition)) == member_id:
                del owners[(topic, partition)]

    def get_owners(self, group: str) -> dict[TP, str]:
        with self._lock:
            return dict(self.owners.get(group, {}))

    # ----------------------------------------------------------------------------------------- offsets

    def commit_offsets(self, group: str, offsets: dict[TP, Offset]) -> None:
        with self._lock:
            self.groups.add(group)
            self.offsets.setdefault(group, {}).update(offsets)

    def get_offsets(self, group: str) -> dict[TP, Offset]:
        with self._lock:
            return dict(self.offsets.get(group, {}))

    def has_offsets(self, group: str) -> bool:
        with self._lock:
            return bool(self.offsets.get(group))

    def delete_offsets(self, group: str, topic: str | None = None) -> None:
        with self._lock:
            kept = {tp: o for tp, o in self.offsets.get(group, {}).items() if topic is not None and tp[0] != topic}
            self.offsets[group] = kept

    def delete_partition_offsets(self, group: str, topic: str, partitions: list[int]) -> None:
        with self._lock:
            for p in partitions:
                self.offsets.get(group, {}).pop((topic, p), None)

    def delete_topic_offsets_everywhere(self, topic: str) -> None:
        for group in self.list_groups():
            self.delete_offsets(group, topic)


class FakeSession:
    """The ZooKeeper client as the coordinator sees it besides the store: a source of session states."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[str], None]] = []

    def add_state_listener(self, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def change(self, state: str) -> None:
        for listener in self.listeners:
            listener(state)


@dataclass
class FakeMetadata:
    """A ``MetadataView``: topics and their partitions."""

    topics: dict[str, TopicAssignment] = field(default_factory=dict)

    def set_partitions(self, topic: str, count: int) -> None:
        self.topics[topic] = TopicAssignment({p: [1] for p in range(count)})

    def delete(self, topic: str) -> None:
        del self.topics[topic]


@dataclass
class FakeClock:
    """The coordinator's two clocks (timers and stored times), moved only by the test."""

    now: int = 1_000_000

    def advance(self, ms: int) -> None:
        self.now += ms
