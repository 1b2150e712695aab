"""Foundation figures: time from `cluster up` to every broker registered, and controller failover time after a
SIGKILL of the controller (median of N), with the configured ZooKeeper session timeout.

    .venv/bin/python bench/cluster_bench.py [--rounds 5] [--session-timeout-ms 1500] [--tick-ms 500]

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek_local.cluster import LocalCluster
from tests.harness.ports import free_port_block


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: end what we started
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--session-timeout-ms", type=int, default=1500)
    ap.add_argument("--tick-ms", type=int, default=500)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="odradek-bench-", dir=Path(__file__).resolve().parent.parent) as d:
        cluster = LocalCluster(
            Path(d), brokers=args.brokers, base_port=free_port_block(args.brokers),
            zookeepers=3, zk_base_port=free_port_block(3, span=106), tick_ms=args.tick_ms,
            session_timeout_ms=args.session_timeout_ms,
        )  # fmt: skip
        try:
            t0 = time.monotonic()
            cluster.ensemble.start(timeout=60)
            t_zk = time.monotonic()
            for b in cluster.slots:
                cluster.start_broker(b, wait=False)
            cluster.wait_registered(list(cluster.slots), timeout=60)
            t_up = time.monotonic()
            print(f"cluster up (3 ZooKeeper + {args.brokers} brokers) to all brokers registered: "
                  f"{t_up - t0:.2f} s (ZooKeeper quorum {t_zk - t0:.2f} s, brokers {t_up - t_zk:.2f} s)")

            zk = cluster.zk_client()
            failovers = []
            for _ in range(args.rounds):
                while (controller := zk.get_controller()) is None:
                    time.sleep(0.01)
                killed = time.monotonic()
                cluster.kill_broker(controller)
                while zk.get_controller() in (None, controller):
                    time.sleep(0.005)
                failovers.append(time.monotonic() - killed)
                cluster.start_broker(controller)
            zk.close()
            print(f"controller failover after SIGKILL, session timeout {args.session_timeout_ms} ms, "
                  f"tickTime {args.tick_ms} ms: median {statistics.median(failovers):.2f} s, "
                  f"min {min(failovers):.2f} s, max {max(failovers):.2f} s over {len(failovers)} rounds")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
