"""What a run leaves behind: a one-screen summary, ``report.json``, ``history.json`` and ``timeline.png``.

The verdict is computed here, once: a run fails when anything acknowledged was lost, misplaced or reordered,
when replicas diverge, or when the consumer group skipped, went backwards or committed beyond what it had
processed. Duplicates fail a run whose producers were idempotent (the client's ``Producer``, the default
``--via client``, or librdkafka's with ``--via kafka``); through REST v2 produce (no idempotence, as in
Confluent's REST Proxy) they are reported only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from odradek_verify.txn_checker import failed_checks
from odradek_verify.workload import History

FAILING = ("lost", "misplaced", "reordered", "unexpected", "divergent", "poll_skips", "nonmonotonic_polls",
           "committed_beyond_processed")
FAILING_IDEMPOTENT = (FAILING[0], "duplicated", *FAILING[1:])
REST_DUPLICATES = ("not failing: REST v2 produce has no idempotence (as in Confluent's REST Proxy), so an "
                   "ambiguous request may be written twice")


def duplicates_fail(report: dict[str, Any]) -> bool:
    """Duplicates are a failure when every producer was idempotent (a report without the flag: ``via client``)."""
    return bool(report.get("idempotent_producer", report.get("via") == "client"))


def verdict(report: dict[str, Any]) -> list[str]:
    """The names of the checks that failed (empty: the run passed)."""
    flat = {**report["queue"], **report["replicas"], **(report.get("group") or {})}
    txn = report.get("txn")
    incomplete = ["txn_final_read_incomplete"] if txn and (txn.get("final_read_notes") or {}).get("incomplete") else []
    return ([k for k in (FAILING_IDEMPOTENT if duplicates_fail(report) else FAILING) if flat.get(k)]
            + failed_checks(txn) + incomplete)


def txn_lines(t: dict[str, Any]) -> list[str]:
    """The transactional workload's lines: outcomes, then every check with its count (and the cycles found)."""
    checks = t["checks"]
    lines = [f"transactions: {t['transactions']} ({t['consume_transform_produce']} consume-transform-produce), "
             f"committed {t['committed']}, aborted {t['aborted']} ({t['aborted_on_purpose']} on purpose), "
             f"unknown {t['unknown']}; read_committed polls {t['polled']}, final read {t['final_read']}",
             "txn checks: " + "  ".join(f"{k} {c['count']}" + ("" if c["fails"] else " (reported)")
                                        for k, c in checks.items())]
    for name in ("G0", "G1c", "G2"):
        for c in checks[name]["examples"][:2]:
            lines.append(f"  {name} cycle: {c['text'][:300]}")
    for name in ("G1a", "torn-transaction", "lost-write"):
        for e in checks[name]["examples"][:2]:
            lines.append(f"  {name}: {json.dumps(e, default=str)[:240]}")
    stuck = (t.get("final_read_notes") or {}).get("stuck")
    if stuck:
        lines.append(f"  last stable offset below the high watermark after the run (transactions left open): {stuck}")
    incomplete = (t.get("final_read_notes") or {}).get("incomplete")
    if incomplete:
        lines.append("  the final read did not reach the last stable offset of (partition: [position, end]; what "
                     f"it did not read is unread, not shown lost): {incomplete}")
    return lines


def write_json(out_dir: Path, report: dict[str, Any], history: History) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out_dir / "history.json").write_text(json.dumps(history.to_json()) + "\n")


def summary_lines(report: dict[str, Any]) -> list[str]:
    q, r, a = report["queue"], report["replicas"], report["availability"]
    g = report.get("group")
    failed = verdict(report)
    lines = [
        f"odradek verify: {report['duration_s']:.0f} s, seed {report['seed']}, via {report['via']}, "
        f"network lab: {'yes' if report['netns'] else 'no'}, faults: {len(report['faults'])}",
        "faults by kind: " + (", ".join(f"{k} {n}" for k, n in report["faults_by_kind"].items()) or "none"),
        f"writes: sent {q['sent']}, acknowledged {q['acknowledged']}, failed {q['failed']}, pending {q['pending']}; "
        f"read back {q['read']}" + (f" ({n} acknowledged without an offset)"
                                   if (n := q.get("acknowledged_without_offset")) else ""),
        f"lost {q['lost']}  duplicated {q['duplicated']}  misplaced {q['misplaced']}  reordered {q['reordered']}  "
        f"unexpected {q['unexpected']}  divergent {r['divergent']} (of {r['offsets_compared']} offsets)",
    ]
    if q["lost"] or q["misplaced"]:
        lines.extend(_loss_lines(report))
    if n := q.get("duplicated_across_epochs"):
        lines.append(f"duplicated across producer epochs {n} (not failing: the client re-sent a write after bumping "
                     "its epoch, which no broker can refuse; librdkafka#4953): "
                     + ", ".join(f"{v} at {c}" for v, c in list(q["duplicated_across_epochs_examples"].items())[:3]))
    if g:
        lines.append(f"group: polled {g['polled']} (last at {g.get('last_poll_s', 0):.0f} s), "
                     f"commits {g['commits']} (failed {g['commit_failures']}); "
                     f"poll skips {g['poll_skips']}, non-monotonic {g['nonmonotonic_polls']}, "
                     f"committed beyond processed {g['committed_beyond_processed']}")
    else:
        lines.append(f"group: skipped ({report.get('group_skipped', 'off')})")
    lines.append(f"availability: {a['share_of_time_writable']:.1%} of partition-seconds writable, "
                 f"{a['share_of_writes_acknowledged']:.1%} of writes acknowledged")
    rec = report["recovery"]
    if rec:
        lines.append("median recovery: " + ", ".join(f"{k} {v['median_recovery_s']:.1f} s" for k, v in rec.items()))
    if fatal := report.get("kafka_fatal_errors"):
        lines.append(f"librdkafka fatal errors (producer replaced): {len(fatal)}, first: {fatal[0][:150]}")
    if report.get("txn"):
        lines.extend(txn_lines(report["txn"]))
    for kind, why in report.get("skipped_faults", {}).items():
        lines.append(f"skipped {kind}: {why}")
    strict = duplicates_fail(report)
    if not strict:
        why = REST_DUPLICATES if report.get("via") == "rest" else "not failing: no idempotent producer wrote"
        lines.append(f"duplicated {q['duplicated']}: {why}")
    passed = "PASS (0 lost, 0 duplicated, " if strict else "PASS (0 lost, "
    txn = "".join(f", 0 {k}" for k, c in (report.get("txn") or {}).get("checks", {}).items() if c["fails"])
    lines.append("VERDICT: " + (passed + f"0 misplaced, 0 reordered, 0 divergent{txn})" if not failed
                                else "FAIL: " + ", ".join(failed)))
    return lines


def _loss_lines(report: dict[str, Any]) -> list[str]:
    """Where the lost and misplaced records were, against what was read and what the replicas hold on disk: enough
    to tell a write lost from the logs (every replica ends before it) from one the final read did not reach."""
    q, r = report["queue"], report["replicas"]
    lines = ["lost: " + ", ".join(f"{k} {n}" for k, n in q.get("lost_detail", {}).items())]
    disk = r.get("replica_log_ends", {})
    for p, d in q.get("lost_by_partition", {}).items():
        lines.append(f"  partition {p}: {d['count']} lost at offsets {d['offsets'][0]}..{d['offsets'][1]}, "
                     f"read up to {d['read_up_to']}, end offset {report.get('end_offsets', {}).get(p)}, "
                     f"replicas' log ends {disk.get(p, disk.get(str(p)))}")
    for m in q.get("misplaced_examples", [])[:5]:
        lines.append(f"  misplaced: {m['value']} acknowledged at {m['partition']}/{m['offset']}, found at {m['found']}")
    fr = report.get("final_read") or {}
    if fr.get("grew") or fr.get("went_back"):
        lines.append(f"final read: {fr['rounds']} rounds; ends grew {fr['grew']}, went back {fr['went_back']}")
    return lines


def print_summary(report: dict[str, Any]) -> None:
    lines = summary_lines(report)
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.panel import Panel

        style = "green" if not verdict(report) else "red"
        # escaped: lines carry lists and the cycles' edge labels in brackets, which rich would take for markup
        Console().print(Panel(escape("\n".join(lines[:-1])) + f"\n[bold {style}]{escape(lines[-1])}[/]",
                              title="odradek verify"))
    except Exception:  # rich is a dependency, but a summary must print even on a bare terminal
        print("\n".join(lines))


def plot_timeline(path: Path, history: History, events: list[dict[str, Any]], t_end: float) -> str | None:
    """Acknowledged writes/s, failed writes/s and faults as bands over time. None, or why there is no PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"matplotlib is not installed ({e}); pip install matplotlib"
    seconds = max(1, int(t_end) + 1)
    ok = [0] * seconds
    bad = [0] * seconds
    for w in history.writes:
        if w.t_done is None or int(w.t_done) >= seconds:
            continue
        (ok if w.ok else bad)[int(w.t_done)] += 1
    kinds = sorted({e["kind"] for e in events})
    colors = plt.get_cmap("tab20")
    fig, (ax, axf) = plt.subplots(2, 1, figsize=(12, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    xs = list(range(seconds))
    ax.plot(xs, ok, color="tab:blue", lw=1, label="acknowledged writes/s")
    ax.plot(xs, bad, color="tab:red", lw=1, label="failed writes/s")
    ax.set_ylabel("writes per second")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("odradek verify: throughput, errors and faults")
    for e in events:
        i = kinds.index(e["kind"])
        end = e.get("t_heal") or e.get("t_end") or e["t_start"]
        ax.axvspan(e["t_start"], end, color=colors(i % 20), alpha=0.15)
        axf.barh(i, max(0.2, end - e["t_start"]), left=e["t_start"], color=colors(i % 20))
    axf.set_yticks(range(len(kinds)), kinds, fontsize=7)
    axf.set_xlabel("seconds since start")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
