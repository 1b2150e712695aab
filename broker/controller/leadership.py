"""Leader and ISR rules as pure functions, so they are table-tested without ZooKeeper.

These are Kafka's algorithms (``PartitionLeaderElectionAlgorithms`` in 2.8), with its non-negotiable safety
rule: a replica outside the ISR never becomes leader unless unclean leader election is enabled for the topic.

Every new state is built with ``LeaderAndIsr``'s transitions (``new_leader``, ``new_leader_and_isr``), which bump
the leader epoch, so no rule can forget the bump that fences the previous leader. The ``*_decision`` functions
bind a rule's inputs into the ``state -> new state`` function the controller applies to a fresh read of each
partition (it re-decides from a new read when a conditional write loses to a concurrent one).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from odradek.protocol.model import LeaderAndIsr

NO_LEADER = LeaderAndIsr.NO_LEADER

Decide = Callable[[LeaderAndIsr], "LeaderAndIsr | None"]


def initial_state(replicas: Sequence[int], live: Collection[int], controller_epoch: int) -> LeaderAndIsr:
    """New partition: leader is the first live replica in assignment order; the ISR is every live replica.

    With no live replica the partition starts offline with the full replica list as its ISR (never empty).
    """
    live_replicas = [r for r in replicas if r in live]
    if not live_replicas:
        return LeaderAndIsr.initial(NO_LEADER, replicas, controller_epoch)
    return LeaderAndIsr.initial(live_replicas[0], live_replicas, controller_epoch)


def offline_election(
    replicas: Sequence[int],
    current: LeaderAndIsr,
    live: Collection[int],
    controller_epoch: int,
    unclean_allowed: bool,
) -> LeaderAndIsr | None:
    """Elect a leader for a partition whose leader died; None when nobody may lead (it stays offline).

    Clean: the first live replica (in assignment order) that is in the ISR. Unclean, only when allowed and no
    ISR member is alive: the first live replica; the ISR becomes just that replica.
    """
    isr_live = [r for r in replicas if r in live and r in current.isr]
    if isr_live:
        leader = isr_live[0]
        return current.new_leader_and_isr(leader, [r for r in current.isr if r in live], controller_epoch)
    if unclean_allowed:
        any_live = [r for r in replicas if r in live]
        if any_live:
            return current.new_leader_and_isr(any_live[0], [any_live[0]], controller_epoch)
    return None


def without_dead_replicas(current: LeaderAndIsr, live: Collection[int], controller_epoch: int) -> LeaderAndIsr:
    """Shrink the ISR of a partition whose leader lives; keep the last member so the ISR is never empty."""
    new_isr = [r for r in current.isr if r in live]
    if new_isr == current.isr:
        return current
    if not new_isr:
        return current.new_leader_and_isr(NO_LEADER, current.isr[:1], controller_epoch)
    return current.new_leader_and_isr(current.leader, new_isr, controller_epoch)


def offline_no_leader(current: LeaderAndIsr, controller_epoch: int) -> LeaderAndIsr:
    """The leader died and nobody may take over: leader -1, ISR kept as the last known member."""
    last = [current.leader] if current.leader in current.isr else current.isr[:1]
    return current.new_leader_and_isr(NO_LEADER, last, controller_epoch)


def controlled_shutdown_election(
    replicas: Sequence[int], current: LeaderAndIsr, live: Collection[int], shutting_down: Collection[int],
    controller_epoch: int,
) -> LeaderAndIsr | None:
    """Move leadership off a broker that is shutting down, to a live ISR member that is not; None if none is."""
    candidates = [r for r in replicas if r in live and r in current.isr and r not in shutting_down]
    if not candidates:
        return None
    return current.new_leader_and_isr(candidates[0], [r for r in current.isr if r not in shutting_down],
                                      controller_epoch)


def remove_from_isr(current: LeaderAndIsr, broker: int, controller_epoch: int) -> LeaderAndIsr:
    """A follower going away leaves the ISR (never emptying it), so it does not hold back the high watermark."""
    if broker not in current.isr or len(current.isr) == 1:
        return current
    return current.new_leader_and_isr(current.leader, [r for r in current.isr if r != broker], controller_epoch)


def preferred_election(
    replicas: Sequence[int], current: LeaderAndIsr, live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """Give leadership back to the preferred (first) replica when it is live and in the ISR."""
    preferred = replicas[0] if replicas else NO_LEADER
    if preferred == current.leader or preferred not in live or preferred not in current.isr:
        return None
    return current.new_leader(preferred, controller_epoch)


def offline_decision(replicas: Sequence[int], live: Collection[int], controller_epoch: int,
                     unclean_allowed: bool) -> Decide:
    """After brokers left: elect a new leader if the leader is gone (or mark the partition offline, once), and
    take dead replicas out of the ISR of a partition whose leader lives."""

    def decide(s: LeaderAndIsr) -> LeaderAndIsr | None:
        if s.leader in live:
            return without_dead_replicas(s, live, controller_epoch)
        elected = offline_election(replicas, s, live, controller_epoch, unclean_allowed)
        if elected is None and s.leader == NO_LEADER:
            return None  # already offline: do not bump the epoch again
        return elected or offline_no_leader(s, controller_epoch)

    return decide


def unclean_decision(replicas: Sequence[int], live: Collection[int], controller_epoch: int) -> Decide:
    """An operator's unclean election (Kafka's ElectLeaders with UNCLEAN, KIP-460): only a partition with no live
    leader changes, to a clean leader if one is alive, else the first live replica (accepting data loss)."""

    def decide(s: LeaderAndIsr) -> LeaderAndIsr | None:
        if s.leader in live:
            return None
        return offline_election(replicas, s, live, controller_epoch, unclean_allowed=True)

    return decide


def controlled_shutdown_decision(replicas: Sequence[int], broker: int, live: Collection[int],
                                 shutting_down: Collection[int], controller_epoch: int) -> Decide:
    """For a partition hosted by ``broker``, which is shutting down: move its leadership, or drop it from the ISR."""

    def decide(s: LeaderAndIsr) -> LeaderAndIsr | None:
        if len(replicas) < 2:
            return None
        if s.leader == broker:
            return controlled_shutdown_election(replicas, s, live, shutting_down, controller_epoch)
        return remove_from_isr(s, broker, controller_epoch)

    return decide


def preferred_decision(replicas: Sequence[int], live: Collection[int], controller_epoch: int) -> Decide:
    return lambda s: preferred_election(replicas, s, live, controller_epoch)


def imbalanced_partitions(
    assignments: dict[tuple[str, int], Sequence[int]], leaders: dict[tuple[str, int], int], percentage: int
) -> list[tuple[str, int]]:
    """Kafka's auto-rebalance check: for each preferred broker whose share of partitions led by someone else
    exceeds ``percentage``, the partitions it should lead but does not."""
    by_preferred: dict[int, list[tuple[str, int]]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(tp)
    out: list[tuple[str, int]] = []
    for broker, tps in sorted(by_preferred.items()):
        not_led = [tp for tp in tps if leaders.get(tp) != broker]
        if tps and len(not_led) / len(tps) > percentage / 100:
            out.extend(not_led)
    return out
