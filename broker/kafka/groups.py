"""Consumer groups over Kafka's wire protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (Kafka's classic group
protocol), DescribeGroups, ListGroups and DeleteGroups, one handler each.

Each handler decodes, authorizes with Kafka's operations (Read on the group to be a member, Describe to see it,
Delete to delete it; ListGroups shows every group to Describe on the cluster, else the groups the caller may
Describe), calls the group coordinator through the group router and answers in the request's version. The rules
(states, generations, the leader, protocol selection, fencing) are consumer_coordinator/classic_group.py's.

Where a request goes: a Kafka client finds its group's coordinator (FindCoordinator, broker/kafka/coordinators.py)
and talks to it, so a group request runs on this broker when it coordinates the group and is answered
NOT_COORDINATOR otherwise (``GroupRouter.here``: never forwarded), as Kafka's brokers answer; the client looks the
coordinator up again. ListGroups lists the groups this broker coordinates (an admin client asks every broker and
merges), plus, on the controller, the stored groups nobody coordinates right now, so each group is listed once.

Group ids are those the HTTP API takes (1 to 249 of ``[A-Za-z0-9._-]``, a ZooKeeper path component):
INVALID_GROUP_ID otherwise. A member's host is ``/<address>``, as Kafka shows it. ZooKeeper out of reach is
COORDINATOR_NOT_AVAILABLE (retriable); an exception that is not a typed error is UNKNOWN_SERVER_ERROR (and
logged), never a dropped connection.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.kafka import codec
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, GROUP, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.errors import NONE, code, coordinator_typed
from broker.kafka.network import Connection
from consumer_coordinator.classic_group import ClassicJoin, JoinResult
from odradek.protocol.errors import (
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    OdradekError,
)

if TYPE_CHECKING:
    from broker.group_router import GroupRouter

log = logging.getLogger(__name__)

JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

NO_THROTTLE = datetime.timedelta(0)
GROUP_TYPE = "classic"  # ListGroups v5: every group here is a classic one (no KIP-848 consumer groups)
UNKNOWN_OPERATIONS = -2147483648  # authorized_operations when not asked for
# Kafka's AclOperation codes of the operations a group has (DescribeGroups' authorized_operations bit field).
GROUP_OPERATIONS = {"Read": 3, "Delete": 6, "Describe": 8}
_GROUP_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")

Handler = Callable[[Connection, Request], Awaitable[Any]]


class GroupCluster(Protocol):
    """What these handlers use of the broker (``broker.server.Broker`` is one)."""

    broker_id: int
    controller_id: int | None
    group_router: GroupRouter


def group_refusal(auth: KafkaAuthorizer, conn: Connection, operation: str, group: str | None) -> OdradekError | None:
    """INVALID_GROUP_ID for an id this broker cannot keep, GROUP_AUTHORIZATION_FAILED without ``operation`` on it."""
    if group is None or not _GROUP_ID.fullmatch(group) or group in (".", ".."):
        return InvalidGroupIdError(f"group id must be 1 to 249 characters of [A-Za-z0-9._-], not {group!r}")
    if not auth.allowed(conn, operation, GROUP, group):
        return GroupAuthorizationFailedError(f"{auth.principal(conn)} may not {operation} group {group}")
    return None


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


class KafkaGroups:
    def __init__(self, cluster: GroupCluster, authorizer: KafkaAuthorizer) -> None:
        self._cluster = cluster
        self._auth = authorizer

    @property
    def _groups(self) -> GroupRouter:
        return self._cluster.group_router

    def handlers(self) -> dict[int, Handler]:
        return {
            JOIN_GROUP: self.handle_join_group,
            SYNC_GROUP: self.handle_sync_group,
            HEARTBEAT: self.handle_heartbeat,
            LEAVE_GROUP: self.handle_leave_group,
            DESCRIBE_GROUPS: self.handle_describe_groups,
            LIST_GROUPS: self.handle_list_groups,
            DELETE_GROUPS: self.handle_delete_groups,
        }

    # ------------------------------------------------------------------------------------------ JoinGroup

    async def handle_join_group(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(JOIN_GROUP, version)
        group = str(body.group_id)
        error = group_refusal(self._auth, conn, "Read", group)
        member_id = str(body.member_id)
        if error is None:
            session = _ms(body.session_timeout)
            rebalance = _ms(getattr(body, "rebalance_timeout", body.session_timeout))
            protocols: dict[str, bytes] = {}
            for p in body.protocols:  # a name offered twice counts once, first metadata kept
                protocols.setdefault(str(p.name), bytes(p.metadata))
            join = ClassicJoin(
                member_id, getattr(body, "group_instance_id", None), request.header.client_id or "",
                f"/{conn.host}", session, rebalance if rebalance >= 0 else session, str(body.protocol_type),
                tuple(protocols.items()), require_known_member_id=version >= 4, reason=getattr(body, "reason", None))
            try:
                outcome = await self._groups.here(group, lambda c: c.join_classic(group, join))
            except Exception as e:
                error = coordinator_typed(e, f"join group {group}")
            else:
                member_id = outcome.member_id
                if isinstance(outcome.answer, JoinResult):
                    return self._joined(cls, outcome.answer)
                error = outcome.answer
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), generation_id=-1,
                    protocol_type=None, protocol_name=None if version >= 7 else "", leader="",
                    skip_assignment=False, member_id=member_id, members=())

    def _joined(self, cls: type[Any], result: JoinResult) -> Any:
        member_cls = nested(cls, "JoinGroupResponseMember")
        version = cls.__version__
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, generation_id=result.generation,
                    protocol_type=result.protocol_type,
                    protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
                    leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
                    members=tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                                       metadata=m.metadata) for m in result.members))

    # ------------------------------------------------------------------------------------------ SyncGroup

    async def handle_sync_group(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(SYNC_GROUP, version)
        group = str(body.group_id)
        error = group_refusal(self._auth, conn, "Read", group)
        if error is None:
            member_id, instance = str(body.member_id), getattr(body, "group_instance_id", None)
            assignments = {str(a.member_id): bytes(a.assignment) for a in body.assignments}
            try:
                synced = await self._groups.here(group, lambda c: c.sync_classic(
                    group, member_id, instance, int(body.generation_id), getattr(body, "protocol_type", None),
                    getattr(body, "protocol_name", None), assignments))
            except Exception as e:
                error = coordinator_typed(e, f"sync group {group}")
            else:
                return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, protocol_type=synced.protocol_type,
                            protocol_name=synced.protocol_name, assignment=synced.assignment)
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), protocol_type=None, protocol_name=None,
                    assignment=b"")

    # ------------------------------------------------------------------------------------------ Heartbeat

    async def handle_heartbeat(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(HEARTBEAT, request.header.api_version)
        group = str(body.group_id)
        error = group_refusal(self._auth, conn, "Read", group)
        if error is None:
            member_id, instance = str(body.member_id), getattr(body, "group_instance_id", None)
            try:
                await self._groups.here(group, lambda c: c.heartbeat_classic(group, member_id, instance,
                                                                             int(body.generation_id)))
            except Exception as e:
                error = coordinator_typed(e, f"heartbeat of group {group}")
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(error))

    # ----------------------------------------------------------------------------------------- LeaveGroup

    async def handle_leave_group(self, conn: Connection, request: Request) -> Any:
        """v0-v2: one member, its error at the top; v3+: a batch (KIP-345), an error per member, the top-level
        error for what concerns the whole group."""
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(LEAVE_GROUP, version)
        group = str(body.group_id)
        if version >= 3:
            leaving = [(str(m.member_id), m.group_instance_id) for m in body.members]
        else:
            leaving = [(str(body.member_id), None)]
        error = group_refusal(self._auth, conn, "Read", group)
        errors: list[OdradekError | None] = []
        if error is None:
            try:
                errors = await self._groups.here(group, lambda c: c.leave_classic(group, leaving))
            except Exception as e:
                error = coordinator_typed(e, f"leave group {group}")
        if version < 3:
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error or (errors[0] if errors else None)))
        member_cls = nested(cls, "MemberResponse")
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), members=tuple(
            make(member_cls, member_id=m, group_instance_id=i, error_code=code(e))
            for (m, i), e in zip(leaving, errors, strict=True)) if error is None else ())

    # ------------------------------------------------------------------------------------- DescribeGroups

    async def handle_describe_groups(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(DESCRIBE_GROUPS, version)
        with_operations = bool(getattr(body, "include_authorized_operations", False))
        described = [await self._describe(cls, conn, str(g), with_operations) for g in body.groups]
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(described))

    async def _describe(self, cls: type[Any], conn: Connection, group: str, with_operations: bool) -> Any:
        version = cls.__version__
        group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
        operations = self._group_operations(conn, group) if with_operations else UNKNOWN_OPERATIONS
        error = group_refusal(self._auth, conn, "Describe", group)
        if error is None:
            try:
                summary = await self._groups.here(group, lambda c: c.summary(group), must_exist=True)
            except GroupIdNotFoundError as e:  # Kafka: a Dead group with no error, GROUP_ID_NOT_FOUND from v6
                return make(group_cls, error_code=code(e) if version >= 6 else NONE,
                            error_message=e.message if version >= 6 else None, group_id=group, group_state="Dead",
                            protocol_type="", protocol_data="", members=(), authorized_operations=operations)
            except Exception as e:
                error = coordinator_typed(e, f"describe group {group}")
            else:
                return make(group_cls, error_code=NONE, error_message=None, group_id=group,
                            group_state=summary.state, protocol_type=summary.protocol_type,
                            protocol_data=summary.protocol_name, authorized_operations=operations,
                            members=tuple(make(member_cls, member_id=m.member_id,
                                               group_instance_id=m.group_instance_id, client_id=m.client_id,
                                               client_host=m.client_host, member_metadata=m.metadata,
                                               member_assignment=m.assignment) for m in summary.members))
        assert error is not None
        return make(group_cls, error_code=code(error), error_message=error.message, group_id=group, group_state="",
                    protocol_type="", protocol_data="", members=(), authorized_operations=operations)

    def _group_operations(self, conn: Connection, group: str) -> int:
        return sum(1 << bit for op, bit in GROUP_OPERATIONS.items() if self._auth.allowed(conn, op, GROUP, group))

    # ----------------------------------------------------------------------------------------- ListGroups

    async def handle_list_groups(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(LIST_GROUPS, request.header.api_version)
        states = {s.lower() for s in getattr(body, "states_filter", ())}
        types = {t.lower() for t in getattr(body, "types_filter", ())}
        try:
            listings = await self._groups.coordinator.listings(
                unclaimed=self._cluster.controller_id == self._cluster.broker_id)
        except Exception as e:
            error = coordinator_typed(e, "list groups")
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), groups=())
        see_all = self._auth.allowed(conn, "Describe", CLUSTER, CLUSTER_NAME)
        listed_cls = nested(cls, "ListedGroup")
        groups = tuple(
            make(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                 group_type=GROUP_TYPE)
            for g in listings
            if (see_all or self._auth.allowed(conn, "Describe", GROUP, g.group_id))
            and (not states or g.state.lower() in states) and (not types or GROUP_TYPE in types))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, groups=groups)

    # --------------------------------------------------------------------------------------- DeleteGroups

    async def handle_delete_groups(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(DELETE_GROUPS, request.header.api_version)
        result_cls = nested(cls, "DeletableGroupResult")
        results = []
        for raw in body.groups_names:
            group = str(raw)
            error = group_refusal(self._auth, conn, "Delete", group)
            if error is None:
                try:
                    await self._groups.here(group, lambda c, g=group: c.delete(g), must_exist=True)
                except Exception as e:
                    error = coordinator_typed(e, f"delete group {group}")
            results.append(make(result_cls, group_id=group, error_code=code(error)))
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))
