"""Pure logic of the group consumer and REST instances: rebalance plans, join answers, liveness, pause/resume,
commit bodies, instance settings. No network: nothing here sends a request."""

from __future__ import annotations

from typing import Any

import pytest

from broker.rest_consumers import InstanceConfig
from odradek.client.group_consumer import GroupConsumer, OffsetAndMetadata
from odradek.client.group_membership import GroupApi, JoinResult, Membership, error_name, plan_rebalance
from odradek.client.transport import Transport
from odradek.client.types import TopicPartition as TP
from odradek.protocol.errors import (
    IllegalGenerationError,
    InvalidConfigError,
    InvalidRequestError,
    UnknownMemberIdError,
    error_for,
)


def result(assignment: list[tuple[str, int]], revoke: list[tuple[str, int]] = ()) -> JoinResult:  # type: ignore[assignment]
    return JoinResult.parse({"member_id": "m", "generation": 3, "assignment": [list(a) for a in assignment],
                             "revoke": [list(r) for r in revoke], "assignor": "cooperative-sticky", "coordinator": 2})


def test_join_answer_is_parsed() -> None:
    r = result([("t", 0), ("t", 1)], [("u", 2)])
    assert r.member_id == "m" and r.generation == 3 and r.coordinator == 2
    assert r.assignment == {TP("t", 0), TP("t", 1)} and r.revoke == {TP("u", 2)}


def test_plan_keeps_unmoved_partitions_and_adds_new_ones() -> None:
    plan = plan_rebalance({TP("t", 0), TP("t", 1)}, result([("t", 0), ("t", 1), ("t", 2)]))
    assert plan.keep == {TP("t", 0), TP("t", 1)} and plan.added == {TP("t", 2)} and not plan.revoked
    assert not plan.must_rejoin


def test_plan_revokes_what_the_answer_names_and_rejoins() -> None:
    plan = plan_rebalance({TP("t", 0), TP("t", 1)}, result([("t", 0), ("t", 1)], [("t", 1)]))
    assert plan.revoked == {TP("t", 1)} and plan.keep == {TP("t", 0)} and not plan.added
    assert plan.must_rejoin


def test_plan_revokes_owned_partitions_an_eager_answer_leaves_out_without_rejoining() -> None:
    plan = plan_rebalance({TP("t", 0), TP("t", 1)}, result([("t", 1), ("t", 2)]))
    assert plan.revoked == {TP("t", 0)} and plan.added == {TP("t", 2)} and plan.keep == {TP("t", 1)}
    assert not plan.must_rejoin


def test_a_partition_both_assigned_and_revoked_is_never_added() -> None:
    plan = plan_rebalance(set(), result([("t", 0)], [("t", 0)]))
    assert not plan.added and not plan.revoked and plan.must_rejoin


def test_error_names_survive_the_http_boundary() -> None:
    assert error_name(error_for("UNKNOWN_MEMBER_ID", 40403, "x")) == "UNKNOWN_MEMBER_ID"
    assert error_name(error_for("ILLEGAL_GENERATION", None, "x")) == "ILLEGAL_GENERATION"
    assert isinstance(error_for("UNKNOWN_MEMBER_ID", 40403), UnknownMemberIdError)
    assert isinstance(error_for("ILLEGAL_GENERATION", 40905), IllegalGenerationError)


class _Listener:
    def __init__(self) -> None:
        self.lost: list[str] = []

    def owned_partitions(self) -> set[TP]:
        return set()

    def on_join(self, result: JoinResult) -> None:
        pass

    def on_lost(self, reason: str) -> None:
        self.lost.append(reason)


def membership(session_ms: int = 1000) -> Membership:
    api = GroupApi(Transport(), "g", lambda: ["http://127.0.0.1:1"], 1000)
    return Membership(api, _Listener(), client_id="c", assignor="range", session_timeout_ms=session_ms,
                      rebalance_timeout_ms=1000, max_poll_interval_ms=1000, heartbeat_interval_ms=3000,
                      retry_backoff_ms=10)


def test_session_counts_from_the_last_successful_send_even_while_joining() -> None:
    m = membership(1000)
    assert not m.session_expired(now=1e9)  # not a member yet
    m.member_id, m._alive_since = "m", 100.0
    assert not m.session_expired(now=100.7)
    assert m.session_expired(now=100.85)  # 0.8 of the session: stop before the coordinator can expire us
    m._joining = True  # heartbeats go on during a join: a frozen coordinator is noticed even then
    assert m.session_expired(now=500.0)


def test_heartbeat_interval_is_at_most_a_third_of_the_session() -> None:
    assert membership(900).heartbeat_interval_s == pytest.approx(0.3)


def consumer(**kwargs: Any) -> GroupConsumer:
    return GroupConsumer("127.0.0.1:1", group_id="g", **kwargs)


def test_configuration_is_checked() -> None:
    with pytest.raises(InvalidConfigError):
        GroupConsumer("127.0.0.1:1", group_id="")
    with pytest.raises(InvalidConfigError):
        consumer(partition_assignment_strategy="sticky")
    c = consumer()
    with pytest.raises(InvalidConfigError):
        c.subscribe(["a"], pattern="a.*")
    with pytest.raises(InvalidConfigError):
        c.subscribe(pattern="(")
    with pytest.raises(InvalidConfigError):
        c.assign([TP("a", 0)])
    c.close()


def test_pause_resume_and_commit_bodies_without_a_network() -> None:
    c = consumer(enable_auto_commit=False)
    with c._cond:
        from odradek.client.consumer import _PartitionState

        states = {TP("t", 0): _PartitionState(None), TP("t", 1): _PartitionState(None)}
        states[TP("t", 0)].position = 5
        states[TP("t", 1)].position = 9
        c._set_states(states)
    c.pause(TP("t", 1))
    assert c.paused() == {TP("t", 1)} and c.assignment() == {TP("t", 0), TP("t", 1)}
    assert set(c._states) == {TP("t", 0)}  # not fetched, not handed out
    assert c.position(TP("t", 1)) == 9  # still assigned: position and seek work
    c.seek(TP("t", 1), 7)
    assert c._commit_body(None) == {TP("t", 0): OffsetAndMetadata(5), TP("t", 1): OffsetAndMetadata(7)}
    assert c._commit_body({TP("t", 0): 3}) == {TP("t", 0): OffsetAndMetadata(3, "")}
    with pytest.raises(ValueError):
        c._commit_body({TP("t", 0): -1})
    c.resume(TP("t", 1))
    assert not c.paused() and set(c._states) == {TP("t", 0), TP("t", 1)}
    with pytest.raises(ValueError):
        c.pause(TP("x", 0))
    c._drop({TP("t", 0)})
    assert c.assignment() == {TP("t", 1)}
    c.close()


def test_a_lost_session_drops_partitions_at_once_and_reports_them() -> None:
    c = consumer()
    seen: list[list[TP]] = []
    c._on_revoke = lambda _c, tps: seen.append(tps)
    from odradek.client.consumer import _PartitionState

    c._set_states({TP("t", 0): _PartitionState(None)})
    c.on_lost("session timed out")
    assert c.assignment() == set()
    c._coordinate()
    assert seen == [[TP("t", 0)]]
    c.close()


def test_rest_instance_settings_are_validated() -> None:
    cfg = InstanceConfig.parse({"format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
                                "fetch.min.bytes": "10", "consumer.request.timeout.ms": 500})
    assert (cfg.format, cfg.auto_offset_reset, cfg.auto_commit_enable, cfg.fetch_min_bytes,
            cfg.request_timeout_ms) == ("json", "earliest", False, 10, 500)
    assert InstanceConfig.parse({"auto.offset.reset": "smallest"}).auto_offset_reset == "earliest"
    for fmt in ("AVRO", "jsonschema", "Protobuf"):  # backed by the cluster's registry (issue 26)
        assert InstanceConfig.parse({"format": fmt}).format == fmt.lower()
    for bad in ({"format": "xml"}, {"auto.offset.reset": "middle"}, {"auto.commit.enable": "maybe"},
                {"fetch.min.bytes": "x"}, {"consumer.request.timeout.ms": -1}, {"fetch.min.bytes": True}):
        with pytest.raises(InvalidRequestError):
            InstanceConfig.parse(bad)


def test_poll_returns_nothing_of_partitions_whose_session_may_have_expired() -> None:
    import time

    from odradek.client.consumer import _Fetched, _PartitionState
    from odradek.client.types import ConsumerRecord

    c = consumer()
    state = _PartitionState(None)
    state.position = 0
    state.buffered = _Fetched(0, [ConsumerRecord("t", 0, 0, 0, None, b"v")], 1)
    c._set_states({TP("t", 0): state})
    c._membership.member_id, c._membership._alive_since = "m", time.monotonic() - 60  # 60 s > 10 s session
    assert c.poll(timeout_ms=0) == {}
    assert c.assignment() == set()
    c._membership.member_id = None  # nothing to leave: no request at close
    c.close()


def test_generation_is_the_applied_assignments_not_a_join_answer_waiting_for_poll() -> None:
    """The records a poll returns and the generation read after it belong together (Kafka's groupMetadata): a
    join answer the membership thread holds counts only once poll applied it, and a loss resets it at once."""
    from odradek.client.consumer import _PartitionState

    c = consumer(enable_auto_commit=False)
    c._set_states({TP("t", 0): _PartitionState(None)})
    c._membership.core.member_id, c._membership.core.generation = "m", 3
    c.on_join(result([("t", 0)]))  # generation 3, keeping t-0: nothing to fetch, so no network
    assert c.generation == -1  # not applied yet: what poll hands out still belongs to the old assignment
    c._coordinate()
    assert c.generation == 3 and c.assignment() == {TP("t", 0)}
    c.on_lost("session timed out")
    assert c.generation == -1 and c.assignment() == set()
    c._membership.core.member_id = None  # nothing to leave: no request at close
    c.close()
