"""Live progress of partition moves: bytes the new replicas have caught up, rate and ETA, per partition.

Progress is measured where it happens, on the receiving side: each new replica's log size (its broker's
``/admin/log_dirs``) against the leader's. On a terminal it is drawn with rich's progress bars (rich computes
the rate and ETA from the updates); elsewhere it prints plain lines, at most one per partition every few
seconds, so a log file stays readable.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek_tools.common import ToolError

if TYPE_CHECKING:
    from odradek_tools.reassign_cluster import Cluster

TP = tuple[str, int]
POLL_S = 0.5
PLAIN_EVERY_S = 2.0


@dataclass
class Progress:
    tp: TP
    done_bytes: int
    total_bytes: int
    complete: bool


def snapshot(cluster: Cluster, moves: dict[TP, list[int]], adding: dict[TP, list[int]] | None = None
             ) -> list[Progress]:
    """One look at every partition. ``adding`` remembers which replicas are new (the target replicas that were
    not in the ISR when first seen), so a replica that joins the ISR still counts as caught up."""
    adding = {} if adding is None else adding
    topics = sorted({t for t, _ in moves})
    ongoing = cluster.ongoing()
    current = cluster.assignment(topics)
    states = cluster.states(topics)
    sizes: dict[int, dict[TP, int] | None] = {}

    def size(broker: int, tp: TP) -> int:
        if broker not in sizes:
            sizes[broker] = cluster.log_sizes(broker)
        return (sizes[broker] or {}).get(tp, 0)

    out = []
    for tp, target in sorted(moves.items()):
        complete = tp not in ongoing and current.get(tp) == target
        leader, isr = states.get(tp, (-1, []))
        new = adding.setdefault(tp, [r for r in target if r not in isr])
        total = size(leader, tp) * len(new) if leader >= 0 else 0
        done = sum(min(size(r, tp), total // max(1, len(new))) for r in new) if total else 0
        if complete:
            done = total
        out.append(Progress(tp, done, total, complete))
    return out


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def progress_lines(progress: list[Progress], rates: dict[TP, float] | None) -> list[str]:
    """Plain lines: ``Progress of t-0: 12.0 MB of 20.0 MB caught up (60%), 2.0 MB/s, ETA 4 s``."""
    out = []
    for p in progress:
        if p.complete:
            continue
        pct = 100 * p.done_bytes / p.total_bytes if p.total_bytes else 0.0
        line = f"Progress of {p.tp[0]}-{p.tp[1]}: {_mb(p.done_bytes)} of {_mb(p.total_bytes)} caught up ({pct:.0f}%)"
        rate = (rates or {}).get(p.tp)
        if rate is not None:
            eta = f"{(p.total_bytes - p.done_bytes) / rate:.0f} s" if rate > 0 else "unknown"
            line += f", {rate / 1e6:.1f} MB/s, ETA {eta}"
        out.append(line)
    return out


def follow(cluster: Cluster, moves: dict[TP, list[int]], *, interactive: bool, timeout_ms: int = 0) -> list[str]:
    """Watch until every partition's move is complete; return the closing lines. Ctrl-C stops watching only:
    the moves go on in the cluster."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000 if timeout_ms else None
    adding: dict[TP, list[int]] = {}
    if interactive:
        _follow_rich(cluster, moves, adding, deadline)
    else:
        _follow_plain(cluster, moves, adding, deadline)
    lines = [f"Reassignment of partition {t}-{p} is complete." for t, p in sorted(moves)]
    return [*lines, f"All {len(moves)} partition(s) moved in {time.monotonic() - started:.1f} s."]


def _check_deadline(deadline: float | None, progress: list[Progress]) -> None:
    if deadline is not None and time.monotonic() > deadline:
        pending = ",".join(f"{t}-{p}" for (t, p) in (x.tp for x in progress if not x.complete))
        raise ToolError(f"gave up waiting: the reassignment of {pending} is still in progress (it goes on; "
                        "run --verify later)")


def _follow_plain(cluster: Cluster, moves: dict[TP, list[int]], adding: dict[TP, list[int]],
                  deadline: float | None) -> None:
    last: dict[TP, tuple[float, int]] = {}
    printed = 0.0
    while True:
        progress = snapshot(cluster, moves, adding)
        if all(p.complete for p in progress):
            return
        now = time.monotonic()
        if now - printed >= PLAIN_EVERY_S:
            rates = {p.tp: (p.done_bytes - last[p.tp][1]) / max(1e-3, now - last[p.tp][0])
                     for p in progress if p.tp in last}
            for line in progress_lines(progress, rates or None):
                print(line, flush=True)
            last = {p.tp: (now, p.done_bytes) for p in progress}
            printed = now
        _check_deadline(deadline, progress)
        time.sleep(POLL_S)


def _follow_rich(cluster: Cluster, moves: dict[TP, list[int]], adding: dict[TP, list[int]],
                 deadline: float | None) -> None:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import (
        Progress as Bars,
    )

    console = Console(file=sys.stdout)
    with Bars(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
              TimeRemainingColumn(), console=console, transient=False) as bars:
        tasks: dict[TP, TaskID] = {}
        while True:
            progress = snapshot(cluster, moves, adding)
            for p in progress:
                if p.tp not in tasks:
                    tasks[p.tp] = bars.add_task(f"{p.tp[0]}-{p.tp[1]}", total=max(1, p.total_bytes))
                bars.update(tasks[p.tp], total=max(1, p.total_bytes, p.done_bytes), completed=p.done_bytes)
            if all(p.complete for p in progress):
                return
            _check_deadline(deadline, progress)
            time.sleep(POLL_S)
