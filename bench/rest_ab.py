"""A tight A/B of the REST and binary produce paths between two checkouts: one broker of each up at once, wrk phases
alternating between them, so that both see the same minute of a machine whose speed drifts.

    .venv/bin/python bench/rest_ab.py --baseline /path/to/other/checkout [--alternations 8] [--seconds 3]
                                      [--broker-args "--authorizer acl --allow-everyone-if-no-acl-found true"]

The baseline is a checkout of another revision (``git worktree add /tmp/base <rev>``, with its compiled codec
built or copied); its broker runs from there with this virtualenv's Python. Each alternation runs, for each side in
turn (the order swaps every alternation): REST v2 produce of 1,000-record bodies in the binary (base64) and JSON
formats (``POST /topics/{t}``, 4 connections, as bench/rest_wrk.py), the binary path (1,000-record batches to
``POST .../partitions/{p}/batches``, 12 connections) and REST v2 binary reads. Prints each alternation, then per
phase each side's median records/s and CPU-s/M with their ranges and in how many alternations the checkout here
used less CPU. ``--broker-args`` are given to both brokers (the example above: every request authenticated and
authorized, as on a secured cluster). Needs wrk (scripts/bench-setup.sh). Not a test.
"""

from __future__ import annotations

import argparse
import base64
import gc
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rest_bench import BATCHES, keyed_batches, leaders_of  # noqa: E402
from bench.rest_wrk import (  # noqa: E402
    BINARY_V2,
    JSON_V2,
    KEYS,
    PARTITIONS,
    Load,
    make_json_values,
    make_values,
    produce_loads,
    read_loads,
    run_wrk,
)
from odradek_local.cluster import LocalCluster  # noqa: E402
from tests.harness.http import create_topic  # noqa: E402
from tests.harness.ports import free_port_block  # noqa: E402

PHASES = ("binary", "json", "batches", "read")


def python_for(checkout: Path, workdir: Path) -> str:
    """A python that runs the broker from ``checkout`` (LocalCluster puts its own checkout first on PYTHONPATH)."""
    wrapper = workdir / "python-baseline"
    wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={checkout}\ncd {checkout}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    ap.add_argument("--alternations", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--broker-args", default="", help="extra arguments for both brokers (one string)")
    args = ap.parse_args()
    values = make_values(args.records)
    formats = {"binary": ("rb", BINARY_V2, [base64.b64encode(k).decode() for k in KEYS],
                          [base64.b64encode(v).decode() for v in values]),
               "json": ("rj", JSON_V2, [k.decode() for k in KEYS], make_json_values(args.records))}
    broker_args = shlex.split(args.broker_args)
    gc.collect()
    gc.freeze()
    res: dict[tuple[str, str], list[tuple[float, float]]] = {(k, f): [] for k in ("base", "here") for f in PHASES}
    with tempfile.TemporaryDirectory(prefix="odradek-ab-", dir=ROOT) as d:
        wd = Path(d)
        clusters = {
            "base": LocalCluster(wd / "base", brokers=1, base_port=free_port_block(1), zookeepers=1,
                                 zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                                 python=python_for(args.baseline.resolve(), wd), broker_args=broker_args),
            "here": LocalCluster(wd / "here", brokers=1, base_port=free_port_block(1), zookeepers=1,
                                 zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                                 broker_args=broker_args),
        }
        loads: dict[tuple[str, str], list[Load]] = {}
        try:
            for c in clusters.values():
                c.up()
            batches = keyed_batches(values, int(time.time() * 1000))
            for k, c in clusters.items():
                url = c.broker_url(1)
                (wd / k).mkdir(exist_ok=True)
                for f, (topic, _ctype, keys, vals) in formats.items():
                    create_topic(url, topic, PARTITIONS, 1, seen_by=[url])
                    loads[(k, f)] = produce_loads(wd / k, topic, keys, vals, leaders_of(url, topic))
                create_topic(url, "bb", PARTITIONS, 1, seen_by=[url])
                lines = []
                for i, (p, b) in enumerate(batches):
                    body = wd / k / f"bb-{i}.bin"
                    body.write_bytes(b)
                    lines.append(f"POST /topics/bb/partitions/{p}/batches?acks=1 {body}")
                loads[(k, "batches")] = [Load(url, lines, args.records / len(batches))]
            pids = {k: [c.broker_pid(1) or 0] for k, c in clusters.items()}
            for i in range(args.alternations):
                order = ("base", "here") if i % 2 == 0 else ("here", "base")
                for k in order:
                    for f, (_topic, ctype, _, _) in formats.items():
                        r = run_wrk(loads[(k, f)], args.seconds, 4, "Content-Type", ctype, wd, pids[k], f"{k} {f}")
                        res[(k, f)].append((r.records_per_s, r.cpu_per_million))
                for k in order:
                    r = run_wrk(loads[(k, "batches")], args.seconds, 12, "Content-Type", BATCHES, wd, pids[k],
                                f"{k} batches")
                    res[(k, "batches")].append((r.records_per_s, r.cpu_per_million))
                for k in order:
                    if (k, "read") not in loads:
                        loads[(k, "read")] = read_loads(leaders_of(clusters[k].broker_url(1), "rb"), "rb")[0]
                    r = run_wrk(loads[(k, "read")], args.seconds, 4, "Accept", BINARY_V2, wd, pids[k], f"{k} read")
                    res[(k, "read")].append((r.records_per_s, r.cpu_per_million))
                print(f"{i + 1}: " + "  ".join(f"{k} {f} {v[-1][0] / 1e3:,.0f}k/s {v[-1][1]:.2f}"
                                               for (k, f), v in res.items()), flush=True)
        finally:
            for c in clusters.values():
                c.down()
    print(f"\n{args.alternations} alternations of {args.seconds} s phases; baseline {args.baseline}; "
          f"{os.getloadavg()[0]:.2f} load at the end")
    for f in PHASES:
        a, b = res[("base", f)], res[("here", f)]
        ra, rb, ca, cb = ([x[j] for x in side] for side, j in ((a, 0), (b, 0), (a, 1), (b, 1)))
        less = sum(1 for x, y in zip(ca, cb, strict=True) if y < x)
        print(f"{f:8} baseline {statistics.median(ra) / 1e3:,.0f}k/s ({min(ra) / 1e3:,.0f}-{max(ra) / 1e3:,.0f}k) "
              f"{statistics.median(ca):.2f} CPU-s/M ({min(ca):.2f}-{max(ca):.2f}) | here "
              f"{statistics.median(rb) / 1e3:,.0f}k/s ({min(rb) / 1e3:,.0f}-{max(rb) / 1e3:,.0f}k) "
              f"{statistics.median(cb):.2f} CPU-s/M ({min(cb):.2f}-{max(cb):.2f}); less CPU here in {less}/{len(cb)}")


if __name__ == "__main__":
    main()
