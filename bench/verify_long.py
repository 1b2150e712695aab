"""The long durability run: ``odradek verify`` for 30 minutes with overlapping faults of every kind (>= 200,
clock-jump and clock-strobe included: the schedule deals every kind once, then draws at random), then the figures
the issue asks for: faults by kind, acknowledged, lost, duplicated, divergent, availability and the median
recovery time per fault kind. Every kind of the ``all`` scenario gets a row, so one that never ran shows as 0.

    sudo .venv/bin/python bench/verify_long.py [--minutes 30] [--out verify-long] [--figure docs/verify-timeline.png]
                                               [--via client|rest] [--seed N] [--workload queue,txn]
                                               [--replica-fetch-transport http|kafka]

Needs root (network namespaces, iptables inside them, a loop-mounted disk) and Debian's ZooKeeper. Prints
figures and exits 1 if any check failed; it is not a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from odradek_verify.nemesis import SCENARIOS  # noqa: E402  (the repository on the path first)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=Path("verify-long"))
    ap.add_argument("--figure", type=Path, default=None, help="copy the timeline PNG here (e.g. docs/...)")
    ap.add_argument("--via", choices=("client", "rest"), default="client")
    ap.add_argument("--seed", type=int, default=1729)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--replica-fetch-transport", choices=("auto", "http", "kafka"), default=None)
    ap.add_argument("--workload", default=None,
                    help="verify's --workload (default queue,txn; queue with --via rest, which has no transactions)")
    args = ap.parse_args()
    if args.workload is None:
        args.workload = "queue" if args.via == "rest" else "queue,txn"
    cmd = [sys.executable, "-m", "odradek_tools", "verify", "--out", str(args.out),
           "--duration", str(args.minutes * 60),
           "--concurrency", str(args.concurrency), "--quiet", "0.5,1.5", "--scenario", "all", "--seed",
           str(args.seed), "--via", args.via, "--workload", args.workload]
    if args.replica_fetch_transport is not None:
        cmd += ["--replica-fetch-transport", args.replica_fetch_transport]
    print("running:", " ".join(cmd), flush=True)
    code = subprocess.run(cmd, cwd=REPO).returncode
    report_path = args.out / "report.json"
    if not report_path.exists():
        print(f"no report (exit {code})")
        return 2
    r = json.loads(report_path.read_text())
    q, rep, a = r["queue"], r["replicas"], r["availability"]
    print()
    print(f"duration {r['duration_s'] / 60:.1f} min, faults {sum(r['faults_by_kind'].values())}, seed {r['seed']}, "
          f"via {r['via']}")
    print(f"{'fault kind':<24}{'count':>7}{'median recovery s':>20}{'max recovery s':>16}")
    kinds = sorted(set(r["faults_by_kind"]) | set(SCENARIOS["all"]))
    for kind in kinds:
        n = r["faults_by_kind"].get(kind, 0)
        rec = r["recovery"].get(kind, {})
        print(f"{kind:<24}{n:>7}{rec.get('median_recovery_s', float('nan')):>20.2f}"
              f"{rec.get('max_recovery_s', float('nan')):>16.2f}")
    print(f"acknowledged {q['acknowledged']}  lost {q['lost']}  duplicated {q['duplicated']}  "
          f"misplaced {q['misplaced']}  reordered {q['reordered']}  divergent {rep['divergent']}")
    print("duplicates " + ("fail the run (idempotent producer)" if r.get("idempotent_producer")
                           else "are reported only (REST v2 produce has no idempotence)"))
    g = r.get("group")
    if g:
        print(f"group: polled {g['polled']}, poll skips {g['poll_skips']}, non-monotonic {g['nonmonotonic_polls']}, "
              f"committed beyond processed {g['committed_beyond_processed']}")
    t = r.get("txn")
    if t:
        print(f"transactions: {t['transactions']} ({t['consume_transform_produce']} consume-transform-produce), "
              f"committed {t['committed']}, aborted {t['aborted']} ({t['aborted_on_purpose']} on purpose), "
              f"unknown {t['unknown']}; read_committed polls {t['polled']}, final read {t['final_read']}")
        print("txn checks: " + "  ".join(f"{k} {c['count']}" + ("" if c["fails"] else " (reported)")
                                         for k, c in t["checks"].items()))
    print(f"availability: {a['share_of_time_writable']:.1%} of partition-seconds writable, "
          f"{a['share_of_writes_acknowledged']:.1%} of writes acknowledged")
    for kind, why in r.get("skipped_faults", {}).items():
        print(f"skipped {kind}: {why}")
    print(f"verdict: {r['verdict']}")
    if args.figure is not None and (args.out / "timeline.png").exists():
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.out / "timeline.png", args.figure)
        print(f"timeline: {args.figure}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
