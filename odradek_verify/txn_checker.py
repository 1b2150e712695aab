"""The transactional checks, named as Jepsen names them, over the history and a read_committed final read.

Each check answers ``{"ran": true, "count": n, "examples": [...], "fails": bool}`` (``fails``: whether a non-zero
count fails the run), so a report says which checks ran, not only which found something:

* ``G1a`` (aborted read): a record of an aborted transaction seen by a read_committed reader: a reader's poll, a
  consume-transform-produce input, or the final read. Only transactions whose commit was never asked count as
  aborted (on purpose, or after a failed send); a commit that errored is unknown, never aborted.
* ``torn-transaction``: a committed or unknown transaction of which the final read saw some records but not all.
* ``lost-write``: a committed transaction not seen whole by the final read (some or all of it missing).
* ``duplicate``: a record read more than once by the final read.
* ``unexpected``: a record read that no transaction wrote.
* ``poll-skip`` / ``nonmonotonic-poll``: within one reader's assignment, per topic-partition, a poll that jumped
  over offsets the final read holds / that went back to (or repeated) an offset.
* ``G0`` / ``G1c``: cycles in the dependency graph of the queue model Elle uses for Kafka: committed transactions
  (and unknown ones the final read saw) are nodes; ``ww`` T1 -> T2 when T2's record follows T1's in a partition of
  the final read, ``wr`` T1 -> T2 when a consume-transform-produce T2 read a record T1 wrote. G0: a cycle of ww
  edges; G1c: a cycle of ww and wr edges with at least one wr. ``G2`` adds Elle's read-write (anti-dependency)
  edges: ``rw`` T1 -> T2 when a consume-transform-produce T1 read a partition up to offset o and T2 wrote the
  next record after o there; G2 is a cycle with at least one rw edge. Each found cycle is printed. Kafka's
  transaction protocol takes no locks, so two transactions open at once on two shared partitions may be ordered
  one way in one and the other way in the other (Jepsen found G0 in Kafka itself): these three are reported, not
  failing.

A small iterative Tarjan finds the strongly connected components (networkx is not a dependency).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict, deque
from typing import Any

from odradek_verify.workload import History, TxnOp

Reads = dict[tuple[str, int], list[tuple[int, str]]]  # (topic, partition) -> [(offset, value)] of the final read

FAILING = ("G1a", "torn-transaction", "lost-write", "duplicate", "unexpected", "poll-skip", "nonmonotonic-poll")
REPORTED = ("G0", "G1c", "G2")
KAFKA_ALLOWS = ("reported, not failing: Kafka's transaction protocol takes no locks, so concurrent transactions on "
                "shared partitions may be ordered differently in each (Jepsen found G0 in Kafka itself)")


def txn_of(value: str) -> str:
    return value.rpartition(":")[0]


def _check(count: int, examples: list[Any], fails: bool = True, limit: int = 20, **extra: Any) -> dict[str, Any]:
    return {"ran": True, "count": count, "examples": examples[:limit], "fails": fails, **extra}


def outcomes(history: History) -> dict[str, str]:
    """txn -> committed | aborted | unknown (a transaction that never ended is unknown)."""
    return {t.txn: t.outcome or "unknown" for t in history.txns}


def check_txn(history: History, final: Reads, limit: int = 20) -> dict[str, Any]:
    txns = {t.txn: t for t in history.txns}
    outcome = outcomes(history)
    written = {v: t.txn for t in history.txns for _, _, v in t.writes}
    seen: Counter[str] = Counter(v for recs in final.values() for _, v in recs)
    where: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for (topic, p), recs in final.items():
        for off, v in recs:
            where[v].append((topic, p, off))

    # G1a: records of aborted transactions read by any read_committed reader
    aborted_reads: list[dict[str, Any]] = []
    sources: list[tuple[str, str, int, int, str]] = [(op.reader, op.topic, op.partition, op.offset, op.value)
                                                      for op in history.txn_polls]
    sources += [("final read", topic, p, off, v) for (topic, p), recs in final.items() for off, v in recs]
    for reader, topic, p, off, v in sources:
        t = written.get(v)
        if t is not None and outcome.get(t) == "aborted":
            aborted_reads.append({"value": v, "txn": t, "reader": reader, "topic": topic, "partition": p,
                                  "offset": off, "txn_error": txns[t].error})
    aborted_values = {e["value"] for e in aborted_reads}

    torn: list[dict[str, Any]] = []
    lost: list[dict[str, Any]] = []
    for t in history.txns:
        values = [v for _, _, v in t.writes]
        if not values:
            continue
        present = [v for v in values if seen[v]]
        missing = [v for v in values if not seen[v]]
        state = outcome[t.txn]
        if state in ("committed", "unknown") and present and missing:
            torn.append({"txn": t.txn, "outcome": state, "seen": present, "missing": missing,
                         "partitions": sorted({(tp, p) for tp, p, _ in t.writes})})
        if state == "committed" and missing:
            lost.append({"txn": t.txn, "missing": missing, "seen": present,
                         "missing_at": sorted({(tp, p) for tp, p, v in t.writes if v in missing})})

    dup = {v: where[v] for v, n in seen.items() if n > 1}
    unexpected = sorted(v for v in seen if v not in written)
    skips, nonmono = _poll_checks(history, final)
    g0, g1c, g2, graph = cycles(history.txns, final, outcome, seen)
    by_outcome = Counter(outcome.values())
    return {
        "transactions": len(history.txns), "committed": by_outcome["committed"], "aborted": by_outcome["aborted"],
        "unknown": by_outcome["unknown"],
        "consume_transform_produce": sum(1 for t in history.txns if t.ctp),
        "aborted_on_purpose": sum(1 for t in history.txns if t.intent == "abort"),
        "records_written": len(written), "final_read": sum(seen.values()),
        "polled": len(history.txn_polls), "readers": sorted({op.reader for op in history.txn_polls}),
        "graph": graph,
        "checks": {
            "G1a": _check(len(aborted_values), aborted_reads, limit=limit,
                          transactions=len({e["txn"] for e in aborted_reads}), reads=len(aborted_reads)),
            "torn-transaction": _check(len(torn), torn, limit=limit),
            "lost-write": _check(len(lost), lost, limit=limit,
                                 records=sum(len(e["missing"]) for e in lost)),
            "duplicate": _check(len(dup), [{"value": v, "at": dup[v]} for v in sorted(dup)], limit=limit),
            "unexpected": _check(len(unexpected), unexpected, limit=limit),
            "poll-skip": _check(len(skips), skips, limit=limit),
            "nonmonotonic-poll": _check(len(nonmono), nonmono, limit=limit),
            "G0": _check(len(g0), g0, fails=False, limit=limit, note=KAFKA_ALLOWS),
            "G1c": _check(len(g1c), g1c, fails=False, limit=limit, note=KAFKA_ALLOWS),
            "G2": _check(len(g2), g2, fails=False, limit=limit, note=KAFKA_ALLOWS),
        },
    }


def failed_checks(txn: dict[str, Any] | None) -> list[str]:
    if not txn:
        return []
    return [name for name, c in txn["checks"].items() if c.get("fails") and c.get("count")]


def _poll_checks(history: History, final: Reads) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per reader, assignment and topic-partition, in poll order: a jump over offsets the final read holds is a
    skip (read_committed legitimately passes markers and aborted records, which the final read does not hold);
    an offset at or below the previous one is non-monotonic (one rewind counts once)."""
    existing = {tp: sorted(off for off, _ in recs) for tp, recs in final.items()}
    existing_sets = {tp: set(offs) for tp, offs in existing.items()}
    last: dict[tuple[str, int, str, int], int] = {}
    skips: list[dict[str, Any]] = []
    nonmono: list[dict[str, Any]] = []
    for op in history.txn_polls:
        key = (op.reader, op.assignment, op.topic, op.partition)
        prev = last.get(key)
        if prev is not None:
            if op.offset <= prev:
                nonmono.append({"reader": op.reader, "topic": op.topic, "partition": op.partition,
                                "offset": op.offset, "after": prev, "t": round(op.t, 3)})
            else:
                have = existing_sets.get((op.topic, op.partition), set())
                gap = [o for o in range(prev + 1, op.offset) if o in have]
                if gap:
                    skips.append({"reader": op.reader, "topic": op.topic, "partition": op.partition, "from": prev,
                                  "to": op.offset, "skipped": len(gap), "t": round(op.t, 3)})
        last[key] = op.offset
    return skips, nonmono


# ----------------------------------------------------------------------------------------- dependency cycles


def cycles(txns: list[TxnOp], final: Reads, outcome: dict[str, str], seen: Counter[str]
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """G0, G1c and G2 cycles (one example cycle per strongly connected component), and the graph's size."""
    nodes = {t.txn for t in txns if outcome.get(t.txn) == "committed"
             or (outcome.get(t.txn) == "unknown" and any(seen[v] for _, _, v in t.writes))}
    ww: dict[tuple[str, str], str] = {}
    for (topic, p), recs in sorted(final.items()):
        prev: str | None = None
        for off, v in recs:
            t = txn_of(v)
            if t not in nodes:
                continue
            if prev is not None and prev != t:
                ww.setdefault((prev, t), f"ww {topic}/{p}@{off}")
            prev = t
    written = {v: t.txn for t in txns for _, _, v in t.writes}
    wr: dict[tuple[str, str], str] = {}
    for t in txns:
        if t.txn not in nodes:
            continue
        for topic, p, off, v in t.reads:
            src = written.get(v)
            if src is not None and src in nodes and src != t.txn:
                wr.setdefault((src, t.txn), f"wr {topic}/{p}@{off}")
    # rw: the record right after the last one a reader transaction read in a partition was written by T2
    following: dict[tuple[str, int], list[tuple[int, str]]] = {tp: sorted(recs) for tp, recs in final.items()}
    rw: dict[tuple[str, str], str] = {}
    for t in txns:
        if t.txn not in nodes or not t.reads:
            continue
        upto: dict[tuple[str, int], int] = {}
        for topic, p, off, _ in t.reads:
            upto[(topic, p)] = max(upto.get((topic, p), -1), off)
        for tp, off in upto.items():
            nxt = next(((o, v) for o, v in following.get(tp, []) if o > off), None)
            if nxt is not None and (dst := txn_of(nxt[1])) in nodes and dst != t.txn:
                rw.setdefault((t.txn, dst), f"rw {tp[0]}/{tp[1]}@{nxt[0]}")
    g0 = [_describe(c, ww) for c in _cycles(nodes, ww, required=None)]
    both = {**ww, **wr}
    g1c = [_describe(c, both) for c in _cycles(nodes, both, required=set(wr) - set(ww))]
    every = {**ww, **wr, **rw}
    g2 = [_describe(c, every) for c in _cycles(nodes, every, required=set(rw) - set(ww) - set(wr))]
    return g0, g1c, g2, {"nodes": len(nodes), "ww_edges": len(ww), "wr_edges": len(wr), "rw_edges": len(rw)}


def _describe(cycle: list[str], labels: dict[tuple[str, str], str]) -> dict[str, Any]:
    steps = [f"{a} -[{labels[(a, b)]}]-> " for a, b in itertools.pairwise(cycle)]
    return {"cycle": cycle, "text": "".join(steps) + cycle[-1]}


def strongly_connected(nodes: set[str], adj: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (histories have thousands of transactions: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            succ = adj.get(v, [])
            recurse = False
            while i < len(succ):
                w = succ[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def _cycles(nodes: set[str], edges: dict[tuple[str, str], str], required: set[tuple[str, str]] | None
            ) -> list[list[str]]:
    """One cycle per strongly connected component with more than one node (through a ``required`` edge when
    given: a component without one has no such cycle), as [a, b, ..., a]."""
    adj: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if a in nodes and b in nodes:
            adj[a].append(b)
    found: list[list[str]] = []
    for comp in strongly_connected(nodes, adj):
        if len(comp) < 2:
            continue
        members = set(comp)
        inside = [(a, b) for a, b in sorted(edges) if a in members and b in members]
        starts = [e for e in inside if required is None or e in required]
        if not starts:
            continue
        a, b = starts[0]
        path = _path(b, a, members, adj)
        if path is not None:
            found.append([a, *path])
    return found


def _path(src: str, dst: str, members: set[str], adj: dict[str, list[str]]) -> list[str] | None:
    """A shortest path src .. dst inside one component (breadth first)."""
    prev: dict[str, str | None] = {src: None}
    queue = deque([src])
    while queue:
        v = queue.popleft()
        if v == dst:
            path = [v]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for w in adj.get(v, []):
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return None
