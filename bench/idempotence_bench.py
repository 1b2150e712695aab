"""Idempotent vs plain producer throughput, acks=all, RF 3, in one run on one cluster (3 ZooKeeper + 3 brokers);
then transactional throughput at 1, 10 and 100 records per transaction.

Each mode sends the same records (fixed size) to its own 3-partition topic with the Python client and waits
for every acknowledgement; the figure is records/s and MB/s from the first send to the last ack. Alternates
the modes over ``--rounds`` so that machine load hits both alike. A transactional mode sends
``--txn-records`` records (to all 3 partitions) in transactions of N records, each begun, sent, committed
(flush, EndTxn: one marker per partition, acks=all, and the coordinator's ZooKeeper writes) before the next:
the cost of a transaction shows as the gap to the idempotent figure.

    .venv/bin/python bench/idempotence_bench.py --records 100000 --size 100 --rounds 2 --txn-records 3000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from odradek import AdminClient, Producer
from odradek_local.cluster import LocalCluster
from tests.harness.ports import free_port_block


def run(url: str, topic: str, records: int, size: int, idempotent: bool) -> float:
    value = b"x" * size
    with Producer(url, acks="all", linger_ms=5, enable_idempotence=idempotent) as p:
        p.send(topic, value).result()  # metadata and (idempotent) the producer id, outside the timing
        start = time.perf_counter()
        for _ in range(records):
            p.send(topic, value)
        p.flush()
        return records / (time.perf_counter() - start)


def run_transactional(url: str, topic: str, records: int, size: int, per_txn: int) -> float:
    value = b"x" * size
    with Producer(url, acks="all", linger_ms=5, transactional_id=f"bench-{topic}") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value).result()  # metadata and AddPartitionsToTxn's first round trip, outside the timing
        p.commit_transaction()
        start = time.perf_counter()
        sent = 0
        while sent < records:
            p.begin_transaction()
            for i in range(min(per_txn, records - sent)):
                p.send(topic, value, partition=(sent + i) % 3)
            sent += min(per_txn, records - sent)
            p.commit_transaction()
        return records / (time.perf_counter() - start)


TXN_SIZES = (1, 10, 100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--txn-records", type=int, default=3000, help="records per transactional run (0: skip)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="odradek-bench-", dir=Path(__file__).resolve().parent.parent) as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=3,
                               zk_base_port=free_port_block(3, span=106), tick_ms=500, session_timeout_ms=6000)
        try:
            cluster.ensemble.start(timeout=60)
            for b in cluster.slots:
                cluster.start_broker(b, wait=False)
            cluster.wait_registered(list(cluster.slots), timeout=60)
            url = cluster.slots[1].url
            admin = AdminClient(url)
            results: dict[str, list[float]] = {"plain": [], "idempotent": []}
            txn_modes = [f"txn-{n}" for n in TXN_SIZES] if args.txn_records else []
            for mode in [*results, *txn_modes]:
                admin.create_topic(f"bench-{mode}", partitions=3, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})
            time.sleep(2)  # leaders elected and known (a bench, not a test)
            for _ in range(args.rounds):
                for mode in results:
                    results[mode].append(run(url, f"bench-{mode}", args.records, args.size, mode == "idempotent"))
            txn_results: dict[int, list[float]] = {n: [] for n in TXN_SIZES} if args.txn_records else {}
            for _ in range(args.rounds):
                for n in txn_results:
                    # fewer records for 1 per transaction: each costs a full commit round
                    count = max(n, args.txn_records // (10 if n == 1 else 1))
                    txn_results[n].append(run_transactional(url, f"bench-txn-{n}", count, args.size, n))
            for mode, rates in results.items():
                best = statistics.median(rates)
                print(f"{mode:>10}: {best:,.0f} records/s ({best * args.size / 1e6:.1f} MB/s of values), "
                      f"acks=all, RF 3, {args.records} x {args.size} B, median of {len(rates)} "
                      f"({', '.join(f'{r:,.0f}' for r in rates)})")
            for n, rates in txn_results.items():
                best = statistics.median(rates)
                print(f"txn x{n:<4}: {best:,.0f} records/s ({best / n:,.1f} transactions/s), {n} record(s) per "
                      f"transaction, acks=all, RF 3, {args.size} B, median of {len(rates)} "
                      f"({', '.join(f'{r:,.0f}' for r in rates)})")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
