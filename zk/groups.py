"""Consumer-group verbs over ZooKeeper: coordinator claim (zk/coordinators.py), member registrations, group state,
partition owners and committed offsets (layout: docs/consumer-groups.md; paths and codecs: zk/znodes.py).

Why a separate facade: only the group coordinator writes these nodes, and it needs a handful of verbs that the
controller's facade (zk.client) should not grow. Every kazoo call runs inside ``zk.retrying`` so the one retry
policy and the translation of connection errors apply. Ephemeral nodes (coordinator, ids, owners) belong to the
coordinating broker's session: when it dies, they go with it, and the next coordinator rebuilds from the
persistent ``state`` and ``offsets`` nodes.

Concurrency: blocking, thread-safe (kazoo is); asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from zk import coordinators
from zk.client import ZkClient
from zk.znodes import (
    ConsumerGroupCoordinatorZNode,
    ConsumerGroupIdsZNode,
    ConsumerGroupMemberZNode,
    ConsumerGroupOffsetsZNode,
    ConsumerGroupOffsetZNode,
    ConsumerGroupOwnersZNode,
    ConsumerGroupOwnerZNode,
    ConsumerGroupStateZNode,
    ConsumerGroupZNode,
    ConsumersZNode,
)

Watch = Callable[[], None]
TP = tuple[str, int]
Offset = tuple[int, str, int]  # offset, metadata, commit timestamp (ms)


class GroupStore:
    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    @property
    def _k(self) -> Any:
        return self._zk.kazoo

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._zk.retrying(fn, *args)

    # ------------------------------------------------------------------------------------------ coordinator

    def claim_coordinator(self, group: str, broker_id: int, epoch: int) -> int:
        """Create the ephemeral coordinator node if nobody holds it; return the holder's broker id (-1: retry)."""
        return coordinators.claim(self._zk, ConsumerGroupZNode.path(group), ConsumerGroupCoordinatorZNode.path(group),
                                  broker_id, epoch)

    def get_coordinator(self, group: str, watch: Watch | None = None) -> int | None:
        return coordinators.get(self._zk, ConsumerGroupCoordinatorZNode.path(group), watch)

    def release_coordinator(self, group: str, broker_id: int) -> None:
        coordinators.release(self._zk, ConsumerGroupCoordinatorZNode.path(group), broker_id)

    # ----------------------------------------------------------------------------------------------- groups

    def list_groups(self) -> list[str]:
        def ls() -> list[str]:
            try:
                return sorted(self._k.get_children(ConsumersZNode.path))
            except NoNodeError:
                return []

        return list(self._run(ls))

    def exists(self, group: str) -> bool:
        return self._run(self._k.exists, ConsumerGroupZNode.path(group)) is not None

    def get_state(self, group: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            try:
                data, _ = self._k.get(ConsumerGroupStateZNode.path(group))
            except NoNodeError:
                return None
            return ConsumerGroupStateZNode.decode(data)

        result = self._run(get)
        return None if result is None else dict(result)

    def set_state(self, group: str, state: dict[str, Any]) -> None:
        path = ConsumerGroupStateZNode.path(group)
        data = ConsumerGroupStateZNode.encode(state)

        def put() -> None:
            try:
                self._k.set(path, data)
            except NoNodeError:
                self._k.ensure_path(ConsumerGroupZNode.path(group))
                try:
                    self._k.create(path, data)
                except NodeExistsError:
                    self._k.set(path, data)

        self._run(put)

    def delete_group(self, group: str) -> None:
        """Everything under /consumers/<group>, offsets included."""

        def delete() -> None:
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self._k.delete(ConsumerGroupZNode.path(group), recursive=True)

        self._run(delete)

    # ---------------------------------------------------------------------------------------------- members

    def register_member(self, group: str, member_id: str, member: dict[str, Any]) -> None:
        path = ConsumerGroupMemberZNode.path(group, member_id)
        data = ConsumerGroupMemberZNode.encode(member)

        def register() -> None:
            try:
                self._k.set(path, data)
            except NoNodeError:
                self._k.ensure_path(ConsumerGroupIdsZNode.path(group))
                try:
                    self._k.create(path, data, ephemeral=True)
                except NodeExistsError:
                    self._k.set(path, data)

        self._run(register)

    def deregister_member(self, group: str, member_id: str) -> None:
        path = ConsumerGroupMemberZNode.path(group, member_id)

        def delete() -> None:
            with contextlib.suppress(NoNodeError):
                self._k.delete(path)

        self._run(delete)

    # ----------------------------------------------------------------------------------------------- owners

    def claim_owner(self, group: str, topic: str, partition: int, member_id: str) -> bool:
        """Create the owner node for ``member_id``; False if another member's node is still there."""
        path = ConsumerGroupOwnerZNode.path(group, topic, partition)

        def claim() -> bool:
            try:
                self._k.create(path, ConsumerGroupOwnerZNode.encode(member_id), ephemeral=True, makepath=True)
                return True
            except NodeExistsError:
                try:
                    data, _ = self._k.get(path)
                except NoNodeError:
                    return False
                return ConsumerGroupOwnerZNode.decode(data) == member_id

        return bool(self._run(claim))

    def release_owner(self, group: str, topic: str, partition: int, member_id: str) -> None:
        """Delete the owner node if ``member_id`` holds it (never another member's)."""
        path = ConsumerGroupOwnerZNode.path(group, topic, partition)

        def release() -> None:
            try:
                data, stat = self._k.get(path)
                if ConsumerGroupOwnerZNode.decode(data) == member_id:
                    self._k.delete(path, version=stat.version)
            except NoNodeError:
                pass

        self._run(release)

    def get_owners(self, group: str) -> dict[tuple[str, int], str]:
        return self._read_partition_tree(ConsumerGroupOwnersZNode.path(group),
                                         lambda topic: ConsumerGroupOwnersZNode.topic_path(group, topic),
                                         lambda topic, p: ConsumerGroupOwnerZNode.path(group, topic, p),
                                         ConsumerGroupOwnerZNode.decode)

    def _read_partition_tree(self, base: str, topic_path: Callable[[str], str],
                             leaf_path: Callable[[str, int], str], decode: Callable[[bytes], Any]) -> dict[TP, Any]:
        """``base/<topic>/<partition>`` leaves (owners, offsets), the leaves read in one pipelined round trip.
        A leaf that vanished or does not decode is skipped: one bad node must not hide the rest of the group."""

        def get() -> dict[TP, Any]:
            try:
                topics = self._k.get_children(base)
            except NoNodeError:
                return {}
            keys: list[TP] = []
            for topic in topics:
                try:
                    partitions = self._k.get_children(topic_path(topic))
                except NoNodeError:
                    continue
                keys += [(topic, int(p)) for p in partitions if p.isascii() and p.isdigit()]
            pending = [(key, self._k.get_async(leaf_path(*key))) for key in keys]
            out: dict[TP, Any] = {}
            for key, result in pending:
                try:
                    data, _ = result.get()
                    out[key] = decode(data)
                except (NoNodeError, ValueError, KeyError):
                    continue
            return out

        return dict(self._run(get))

    # ---------------------------------------------------------------------------------------------- offsets

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], Offset]) -> None:
        def commit() -> None:
            for (topic, partition), (offset, metadata, ts) in offsets.items():
                path = ConsumerGroupOffsetZNode.path(group, topic, partition)
                data = ConsumerGroupOffsetZNode.encode(offset, metadata, ts)
                try:
                    self._k.set(path, data)
                except NoNodeError:
                    try:
                        self._k.create(path, data, makepath=True)
                    except NodeExistsError:
                        self._k.set(path, data)

        self._run(commit)

    def get_offsets(self, group: str) -> dict[tuple[str, int], Offset]:
        return self._read_partition_tree(ConsumerGroupOffsetsZNode.path(group),
                                         lambda topic: ConsumerGroupOffsetsZNode.topic_path(group, topic),
                                         lambda topic, p: ConsumerGroupOffsetZNode.path(group, topic, p),
                                         ConsumerGroupOffsetZNode.decode)

    def has_offsets(self, group: str) -> bool:
        """Whether the group ever committed an offset that is still stored (a topic under its offsets node)."""

        def any_topic() -> bool:
            try:
                return bool(self._k.get_children(ConsumerGroupOffsetsZNode.path(group)))
            except NoNodeError:
                return False

        return bool(self._run(any_topic))

    def delete_offsets(self, group: str, topic: str | None = None) -> None:
        """Offsets of one topic (a deleted topic), or all of a group's offsets (retention of an empty group)."""
        path = (ConsumerGroupOffsetsZNode.path(group) if topic is None
                else ConsumerGroupOffsetsZNode.topic_path(group, topic))

        def delete() -> None:
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self._k.delete(path, recursive=True)

        self._run(delete)

    def delete_partition_offsets(self, group: str, topic: str, partitions: list[int]) -> None:
        """Some partitions' offsets of one topic (Kafka's OffsetDelete for named partitions)."""

        def delete() -> None:
            for partition in partitions:
                with contextlib.suppress(NoNodeError):
                    self._k.delete(ConsumerGroupOffsetZNode.path(group, topic, partition))

        self._run(delete)

    def delete_topic_offsets_everywhere(self, topic: str) -> None:
        """A topic was deleted: remove its offsets from every group (idempotent; any broker may do it)."""
        for group in self.list_groups():
            self.delete_offsets(group, topic)

