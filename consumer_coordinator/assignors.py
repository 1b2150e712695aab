"""Partition assignors as pure functions: (subscriptions, partition counts[, current owners]) -> assignment.

Why pure: the coordinator runs them on its event task, and tests check them without a cluster. Kafka runs the
assignor on the group leader (a client); Odradek runs it on the coordinator so every member gets its share from
one decision (no split brain, kafka-classic.md 6.1), and clients stay simple.

* ``range``: per topic, partitions in order over the subscribed members sorted by id; the first
  ``partitions % members`` members get one more (Kafka's RangeAssignor).
* ``roundrobin``: every partition sorted by (topic, partition) dealt over the sorted members, each going to the
  next member subscribed to its topic (Kafka's RoundRobinAssignor).
* ``cooperative-sticky``: a balanced assignment that keeps every partition where it is unless balance requires a
  move (KIP-429's goal). The two-phase handover (revoke first, assign once released) is not the assignor's
  business: ``handover`` computes it for any assignor from the target and the current owners.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

TP = tuple[str, int]
Subscriptions = Mapping[str, frozenset[str]]  # member id -> topics it consumes (patterns already resolved)
Counts = Mapping[str, int]  # topic -> partition count
Assignment = dict[str, list[TP]]

RANGE = "range"
ROUND_ROBIN = "roundrobin"
COOPERATIVE_STICKY = "cooperative-sticky"
ASSIGNORS = (RANGE, ROUND_ROBIN, COOPERATIVE_STICKY)


def range_assign(subscriptions: Subscriptions, counts: Counts, owners: Mapping[TP, str] | None = None) -> Assignment:
    out: Assignment = {m: [] for m in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        n = counts.get(topic, 0)
        if not members or n <= 0:
            continue
        per, extra = divmod(n, len(members))
        for i, member in enumerate(members):
            start = per * i + min(i, extra)
            out[member].extend((topic, p) for p in range(start, start + per + (1 if i < extra else 0)))
    return out


def roundrobin_assign(subscriptions: Subscriptions, counts: Counts,
                      owners: Mapping[TP, str] | None = None) -> Assignment:
    out: Assignment = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    cursor = 0
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        for p in range(counts.get(topic, 0)):
            for step in range(len(members)):
                member = members[(cursor + step) % len(members)]
                if topic in subscriptions[member]:
                    out[member].append((topic, p))
                    cursor = (cursor + step + 1) % len(members)
                    break
    return out


def sticky_assign(subscriptions: Subscriptions, counts: Counts, owners: Mapping[TP, str] | None = None) -> Assignment:
    """Balanced (counts differ by at most one among members able to take each other's partitions) while moving
    as few partitions away from their current owner as balance allows."""
    out: Assignment = {m: [] for m in subscriptions}
    valid = {(t, p) for t, n in counts.items() for p in range(n)}
    held: set[TP] = set()
    for tp, member in sorted((owners or {}).items()):
        if member in out and tp in valid and tp[0] in subscriptions[member] and tp not in held:
            out[member].append(tp)
            held.add(tp)
    wanted = sorted(tp for tp in valid if tp not in held and any(tp[0] in s for s in subscriptions.values()))
    for tp in wanted:  # free partitions go to the least-loaded member that can take them
        takers = [m for m in out if tp[0] in subscriptions[m]]
        out[min(takers, key=lambda m: (len(out[m]), m))].append(tp)
    # Then move single partitions from the most to the least loaded member while that narrows the gap by 2:
    # each move lowers the sum of squared loads, so this ends; with one subscription for all it ends balanced.
    while True:
        moved = False
        for heavy in sorted(out, key=lambda m: (-len(out[m]), m)):
            for light in sorted(out, key=lambda m: (len(out[m]), m)):
                if len(out[heavy]) - len(out[light]) < 2:
                    break
                movable = [tp for tp in out[heavy] if tp[0] in subscriptions[light]]
                if movable:
                    tp = max(movable)  # the newest partition moves first: deterministic
                    out[heavy].remove(tp)
                    out[light].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    for member in out:
        out[member].sort()
    return out


Assignor = Callable[[Subscriptions, Counts, Mapping[TP, str] | None], Assignment]

BY_NAME: dict[str, Assignor] = {
    RANGE: range_assign,
    ROUND_ROBIN: roundrobin_assign,
    COOPERATIVE_STICKY: sticky_assign,
}


def handover(target: Mapping[str, list[TP]], owners: Mapping[TP, str]) -> tuple[Assignment, Assignment]:
    """(grant, revoke) for one generation, so that no partition ever has two owners.

    A member is granted the partitions of its target that nobody else still owns; a partition that moves from A
    to B is withheld from B and put in A's ``revoke``. Once A has released it (by joining again with a smaller
    ``owned``, leaving, or timing out), the next generation gives it to B."""
    grant: Assignment = {m: sorted(tp for tp in tps if owners.get(tp) in (None, m)) for m, tps in target.items()}
    revoke: Assignment = {m: [] for m in target}
    for tp, owner in sorted(owners.items()):
        if owner in target and tp not in target[owner]:
            revoke[owner].append(tp)
    return grant, revoke
