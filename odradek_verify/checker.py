"""The checks, named as Jepsen's queue checkers name them, over the history and a final read of everything.

* lost: acknowledged, never read in the final read.
* duplicated: a value read more than once (a failure with the idempotent client producer, reported only through
  REST v2 produce, which has no idempotence: report.verdict decides).
* misplaced: acknowledged at (partition, offset), but no copy of it sits there (acknowledged without an offset,
  as librdkafka's implicit acks are: no copy in its partition).
* reordered: within a partition, one producer's acknowledged values read in an order other than its sends.
* unexpected: read, but never sent.
* divergent: one offset below the high watermark holding different values on two replicas, or missing on a
  replica of the final ISR, from the segment files themselves (not through any broker).
* consumer group: poll skips (a member jumped over offsets that exist), non-monotonic polls (a member read an
  offset at or below the one it read just before, in one generation; one rewind counts once), and offsets
  committed beyond what was processed (per commit, and the group's final committed offsets from ZooKeeper).

Availability is the share of (partition, second) cells in which at least one write was acknowledged; a fault's
recovery time runs from its injection until every partition has acknowledged, within a second, a write sent
after the injection (the cluster serves normally again), so a kill of a follower recovers at once and a frozen
leader after its session expires.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from odradek.client import Consumer, TopicPartition
from odradek.protocol.records.batch import iter_batch_headers
from odradek.protocol.records.decode import decode_batch
from odradek_verify.workload import History, WriteOp, value_of

# ------------------------------------------------------------------------------------------------- reading


def end_offsets(urls: list[str], topic: str, partitions: int, timeout: float = 60.0) -> dict[int, int]:
    """Each partition's end offset (its high watermark), from any broker that answers."""
    out: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while len(out) < partitions and time.monotonic() < deadline:
        for p in range(partitions):
            if p in out:
                continue
            for url in urls:
                try:
                    with urllib.request.urlopen(f"{url}/topics/{topic}/partitions/{p}/offsets", timeout=5) as r:
                        out[p] = int(json.loads(r.read())["end_offset"])
                        break
                except (OSError, ValueError, KeyError):
                    continue
        if len(out) < partitions:
            time.sleep(0.5)
    return out


def read_all(bootstrap: str, topic: str, ends: dict[int, int],
             timeout: float = 120.0) -> dict[int, list[tuple[int, str]]]:
    """Every record of every partition up to its end offset, through the client, as (offset, value)."""
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200, request_timeout_ms=5000)
    try:
        tps = [TopicPartition(topic, p) for p in ends]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((out[p][-1][0] + 1 if out[p] else 0) >= ends[p] for p in ends):
                break
            for tp, records in consumer.poll(500).items():
                end = ends[tp.partition]
                out[tp.partition].extend((r.offset, value_of(r.value)) for r in records if r.offset < end)
    finally:
        consumer.close()
    return out


def final_read(urls: list[str], bootstrap: str, topic: str, partitions: int, rounds: int = 3
               ) -> tuple[dict[int, int], dict[int, list[tuple[int, str]]], dict[str, Any]]:
    """The final read: end offsets, every record below them, then the end offsets again. Writers have stopped,
    so the ends must hold still; an end that grew means a high watermark was still catching up when first asked
    (a new leader's lags until its followers fetch): read again, at most ``rounds`` times, and say so in the
    report. An end that went back is recorded too (a high watermark must never move backwards once the cluster
    has healed). Lost is then what no round could read."""
    ends = end_offsets(urls, topic, partitions)
    reads = read_all(bootstrap, topic, ends)
    notes: dict[str, Any] = {"rounds": 1, "grew": {}, "went_back": {}}
    for _ in range(rounds - 1):
        again = end_offsets(urls, topic, partitions)
        grew = {p: [ends.get(p, 0), e] for p, e in again.items() if e > ends.get(p, 0)}
        went_back = {p: [ends[p], e] for p, e in again.items() if p in ends and e < ends[p]}
        notes["went_back"].update(went_back)
        if not grew:
            break
        notes["grew"].update(grew)
        notes["rounds"] += 1
        ends = {p: max(ends.get(p, 0), again.get(p, 0)) for p in set(ends) | set(again)}
        reads = read_all(bootstrap, topic, ends)
    return ends, reads, notes


def read_replica(directory: Path) -> dict[int, str]:
    """offset -> value from one replica's segment files, read directly (the broker is stopped)."""
    out: dict[int, str] = {}
    for seg in sorted(directory.glob("*.log")):
        data = seg.read_bytes()
        for pos, header in iter_batch_headers(data):
            if header.is_control or not header.record_count:
                continue
            try:
                for r in decode_batch(data, pos):
                    out[r.offset] = value_of(r.value)
            except Exception:  # a corrupt batch on disk is itself a finding: mark the offsets unreadable
                for o in range(header.base_offset, header.base_offset + header.last_offset_delta + 1):
                    out[o] = "<corrupt>"
    return out


def producer_epochs(directory: Path, offsets: set[int]) -> dict[int, tuple[int, int]]:
    """offset -> (producer id, producer epoch) of the batches holding ``offsets``, from one replica's segment files
    (the broker is stopped)."""
    out: dict[int, tuple[int, int]] = {}
    for seg in sorted(directory.glob("*.log")):
        for _pos, h in iter_batch_headers(seg.read_bytes()):
            for o in range(h.base_offset, h.base_offset + h.last_offset_delta + 1):
                if o in offsets:
                    out[o] = (h.producer_id, h.producer_epoch)
    return out


def split_duplicates(queue: dict[str, Any], data_dirs: dict[int, Path], topic: str) -> None:
    """Move, in ``queue`` (check_queue's result), the duplicates whose copies were written by one producer id under
    different producer epochs out of ``duplicated`` into ``duplicated_across_epochs``.

    Why: a producer's sequence numbers restart with each epoch (KIP-360), so a broker can refuse a repeated batch
    only within one epoch; a copy under a newer epoch is the client re-sending a write it had sent before its
    epoch bump, which librdkafka's idempotent producer does for a write it believed unwritten (confluentinc/
    librdkafka#4953: its exactly-once guarantee is partial). Such copies are reported, with their epochs, not
    failed; a duplicate within one epoch (the broker's deduplication failing) stays in ``duplicated``. Only for
    librdkafka's producers: Odradek's own client never re-sends across an epoch bump, so for it every duplicate
    fails."""
    examples: dict[str, list[tuple[int, int]]] = queue.get("duplicated_all", {}) or {}
    if not examples:
        return
    across: dict[str, list[list[int]]] = {}
    for value, copies in examples.items():
        epochs: list[tuple[int, int]] = []
        for p, off in copies:
            found: dict[int, tuple[int, int]] = {}
            for d in data_dirs.values():
                rdir = d / f"{topic}-{p}"
                if rdir.is_dir():
                    found = producer_epochs(rdir, {off})
                    if off in found:
                        break
            epochs.append(found.get(off, (-1, -1)))
        pids = {pid for pid, _ in epochs}
        if len(pids) == 1 and -1 not in pids and len({e for _, e in epochs}) == len(epochs):
            across[value] = [[p, off, pid, epoch] for (p, off), (pid, epoch) in zip(copies, epochs, strict=True)]
    if across:
        queue["duplicated"] -= len(across)
        queue["duplicated_examples"] = {v: c for v, c in queue["duplicated_examples"].items() if v not in across}
    queue["duplicated_across_epochs"] = len(across)
    queue["duplicated_across_epochs_examples"] = dict(sorted(across.items())[:20])


def read_replicas(data_dirs: dict[int, Path], topic: str, partitions: int) -> dict[int, dict[int, dict[int, str]]]:
    """partition -> broker -> offset -> value, for every replica directory found."""
    out: dict[int, dict[int, dict[int, str]]] = {p: {} for p in range(partitions)}
    for broker, d in data_dirs.items():
        for p in range(partitions):
            rdir = d / f"{topic}-{p}"
            if rdir.is_dir():
                out[p][broker] = read_replica(rdir)
    return out


# ------------------------------------------------------------------------------------------------ checking


def _parse(value: str) -> tuple[str, int] | None:
    name, _, seq = value.rpartition("-")
    return (name, int(seq)) if name and seq.isdigit() else None


def check_queue(history: History, reads: dict[int, list[tuple[int, str]]], limit: int = 20) -> dict[str, Any]:
    sent = {w.value: w for w in history.writes}
    acked = {w.value: w for w in history.writes if w.ok}
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, recs in reads.items():
        for off, v in recs:
            where[v].append((p, off))
    lost = sorted(v for v in acked if v not in where)
    dup = {v: locs for v, locs in where.items() if len(locs) > 1}
    # An acknowledgement without an offset (librdkafka's implicit ack) still names its partition.
    misplaced = sorted(v for v, w in acked.items() if v in where and (
        (w.partition, w.offset) not in where[v] if w.offset is not None
        else all(p != w.partition for p, _ in where[v])))
    unexpected = sorted(v for v in where if v not in sent)
    reordered: list[dict[str, Any]] = []
    for p, recs in reads.items():
        last: dict[str, tuple[int, int]] = {}
        seen: set[str] = set()
        for off, v in recs:
            if v in seen or v not in acked:
                continue
            seen.add(v)
            parsed = _parse(v)
            if parsed is None:
                continue
            name, seq = parsed
            prev = last.get(name)
            if prev is not None and seq < prev[0]:
                reordered.append({"partition": p, "producer": name, "seq": seq, "offset": off,
                                  "after_seq": prev[0], "after_offset": prev[1]})
            if prev is None or seq > prev[0]:
                last[name] = (seq, off)
    lost_after = _lost_kind(lost, acked, reads)
    by_partition: dict[int, list[int]] = defaultdict(list)
    for v in lost:
        by_partition[acked[v].partition].append(acked[v].offset if acked[v].offset is not None else -1)
    lost_partitions = {p: {"count": len(offs), "offsets": [min(offs), max(offs)],
                           "read_up_to": (reads[p][-1][0] + 1) if reads.get(p) else 0}
                       for p, offs in sorted(by_partition.items())}
    return {
        "sent": len(sent), "acknowledged": len(acked),
        "acknowledged_without_offset": sum(1 for w in acked.values() if w.offset is None),
        "failed": sum(1 for w in history.writes if w.ok is False),
        "pending": sum(1 for w in history.writes if w.ok is None),
        "read": sum(len(r) for r in reads.values()),
        "lost": len(lost), "lost_examples": [_describe(acked[v]) for v in lost[:limit]], "lost_detail": lost_after,
        "lost_by_partition": lost_partitions,
        "duplicated": len(dup), "duplicated_examples": {v: dup[v] for v in sorted(dup)[:limit]},
        "duplicated_all": dup,  # every copy's place, for split_duplicates (dropped from the report after it)
        "misplaced": len(misplaced),
        "misplaced_examples": [{**_describe(acked[v]), "found": where[v]} for v in misplaced[:limit]],
        "reordered": len(reordered), "reordered_examples": reordered[:limit],
        "unexpected": len(unexpected), "unexpected_examples": unexpected[:limit],
    }


def _lost_kind(lost: list[str], acked: dict[str, WriteOp], reads: dict[int, list[tuple[int, str]]]) -> dict[str, int]:
    """Jepsen distinguishes a lost write (a later offset of its partition was read) from an unseen one."""
    ends = {p: (recs[-1][0] if recs else -1) for p, recs in reads.items()}
    later = sum(1 for v in lost if acked[v].offset is not None and acked[v].offset < ends.get(acked[v].partition, -1))
    return {"lost-write (later offsets read)": later, "unseen (at the tail)": len(lost) - later}


def _describe(w: WriteOp) -> dict[str, Any]:
    return {"value": w.value, "partition": w.partition, "offset": w.offset, "acked_at_s": round(w.t_done or 0, 3)}


def check_divergence(replicas: dict[int, dict[int, dict[int, str]]], hws: dict[int, int],
                     isr: dict[int, list[int]], limit: int = 20) -> dict[str, Any]:
    """Below each partition's high watermark, every replica that has an offset must agree on it, and every
    final ISR member must have it."""
    found: list[dict[str, Any]] = []
    compared = 0
    for p, by_broker in replicas.items():
        hw = hws.get(p, 0)
        for off in range(hw):
            values = {b: log.get(off) for b, log in by_broker.items()}
            present = {b: v for b, v in values.items() if v is not None}
            missing_in_isr = [b for b in isr.get(p, []) if b in by_broker and values.get(b) is None]
            compared += 1
            if len(set(present.values())) > 1 or missing_in_isr:
                found.append({"partition": p, "offset": off, "values": present, "missing_on": missing_in_isr})
    return {"divergent": len(found), "divergent_examples": found[:limit], "offsets_compared": compared,
            "replicas_read": {p: sorted(b) for p, b in replicas.items()},
            "replica_log_ends": {p: {b: (max(log) + 1 if log else 0) for b, log in by_broker.items()}
                                 for p, by_broker in replicas.items()}}


def check_group(history: History, reads: dict[int, list[tuple[int, str]]], committed: dict[int, int],
                limit: int = 20) -> dict[str, Any]:
    existing = {p: {off for off, _ in recs} for p, recs in reads.items()}
    skips: list[dict[str, Any]] = []
    nonmono: list[dict[str, Any]] = []
    last: dict[tuple[str, int, int], int] = {}
    processed: dict[int, int] = {}
    for op in history.polls:
        key = (op.member, op.generation, op.partition)
        prev = last.get(key)
        if prev is not None:
            if op.offset <= prev:
                nonmono.append({"member": op.member, "partition": op.partition, "offset": op.offset, "after": prev})
            else:
                gap = [o for o in range(prev + 1, op.offset) if o in existing.get(op.partition, ())]
                if gap:
                    skips.append({"member": op.member, "partition": op.partition, "from": prev, "to": op.offset,
                                  "skipped": len(gap)})
        last[key] = op.offset  # one rewind counts once: the re-reads after it are in order again
        processed[op.partition] = max(processed.get(op.partition, -1), op.offset)
    beyond = [{"member": c.member, "partition": p, "committed": o, "processed": c.processed.get(p, -1)}
              for c in history.commits if c.ok for p, o in c.offsets.items() if o > c.processed.get(p, -1) + 1]
    final_beyond = [{"partition": p, "committed": o, "processed": processed.get(p, -1)}
                    for p, o in committed.items() if o > processed.get(p, -1) + 1]
    return {
        "polled": len(history.polls), "commits": sum(1 for c in history.commits if c.ok),
        "commit_failures": sum(1 for c in history.commits if not c.ok),
        "poll_skips": len(skips), "poll_skip_examples": skips[:limit],
        "nonmonotonic_polls": len(nonmono), "nonmonotonic_examples": nonmono[:limit],
        "committed_beyond_processed": len(beyond) + len(final_beyond),
        "committed_beyond_examples": (beyond + final_beyond)[:limit],
        "final_committed": committed, "members": sorted({op.member for op in history.polls}),
        "last_poll_s": round(max((op.t for op in history.polls), default=0.0), 3),  # liveness, not a check
    }


# ----------------------------------------------------------------------------------------- availability


def availability(history: History, partitions: int, t_end: float) -> dict[str, Any]:
    cells: dict[int, set[int]] = defaultdict(set)
    for w in history.writes:
        if w.ok and w.t_done is not None:
            cells[w.partition].add(int(w.t_done))
    seconds = max(1, int(t_end))
    ok = sum(len([s for s in cells[p] if s < seconds]) for p in range(partitions))
    attempts = [w for w in history.writes if w.ok is not None]
    return {"share_of_time_writable": round(ok / (seconds * partitions), 4),
            "share_of_writes_acknowledged": round(sum(1 for w in attempts if w.ok) / max(1, len(attempts)), 4),
            "seconds": seconds}


def recovery_times(history: History, events: list[dict[str, Any]], partitions: int) -> dict[str, Any]:
    """Per fault: seconds from injection until every partition acknowledged, within 1 s, a write sent after it."""
    by_partition: dict[int, list[WriteOp]] = defaultdict(list)
    for w in history.writes:
        if w.ok and w.t_done is not None:
            by_partition[w.partition].append(w)
    for ws in by_partition.values():
        ws.sort(key=lambda w: w.t_send)
    per_kind: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("error"):
            continue
        t0 = e["t_start"]
        worst: float | None = 0.0
        for p in range(partitions):
            first = next((w.t_done for w in by_partition[p]
                          if w.t_send >= t0 and w.t_done is not None and w.t_done - w.t_send <= 1.0), None)
            if first is None:
                worst = None
                break
            worst = max(worst or 0.0, first - t0)
        e["recovery_s"] = None if worst is None else round(worst, 3)
        if worst is not None:
            per_kind[e["kind"]].append(worst)
    return {k: {"faults": len(v), "median_recovery_s": round(statistics.median(v), 3),
                "max_recovery_s": round(max(v), 3)} for k, v in sorted(per_kind.items())}


def faults_by_kind(events: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(e["kind"] for e in events if not e.get("error")).items()))
