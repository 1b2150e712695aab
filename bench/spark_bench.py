"""Spark connector figures: records/s of a batch read through the ``odradek`` data source into
``count(*)`` and ``sum(length(value))`` on ``local[2]``, and of the same count with the plain Python
``Consumer`` in one process, in the same run against the same data.

    .venv/bin/python bench/spark_bench.py [--records 2000000] [--value-bytes 100] [--partitions 4]

It starts its own cluster (one ZooKeeper, one broker, RF 1) in a temporary directory and removes it at the end.
Records are produced on the binary path in big batches: a few pre-encoded batches of ``--batch-records`` records
are POSTed over and over (the leader assigns offsets, so every copy becomes new records), several batches per
request, one thread per partition. Spark reads run in one session after a tiny warm-up query (which starts the
JVM and the Python workers, so neither is timed; planning each query is): the first full read runs with a cold
JIT, the next ``--runs`` warm; both figures are printed. Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek.client import AdminClient, Consumer, TopicPartition
from odradek.client.transport import BATCHES_MEDIA_TYPE, Transport, quote_path
from odradek.protocol.records import encode_batch
from odradek_local.cluster import LocalCluster
from tests.harness.ports import free_port_block

TOPIC = "spark-bench"


def produce(url: str, partitions: int, records: int, value_bytes: int, batch_records: int) -> float:
    """Write ``records`` records spread evenly over the partitions; returns the seconds it took."""
    now = int(time.time() * 1000)
    templates = []
    for k in range(4):  # a few different payloads, so not every value is the same
        payload = bytes((k * 37 + i) % 251 for i in range(value_bytes))
        templates.append(encode_batch([(None, payload, now + i // 100, ()) for i in range(batch_records)]))
    per_request = max(1, (4 << 20) // len(templates[0]))
    errors: list[BaseException] = []

    def run(partition: int, count: int) -> None:
        transport = Transport(request_timeout_ms=120_000)
        path = quote_path("topics", TOPIC, "partitions", partition, "batches")
        try:
            sent = 0
            while sent < count:
                batches: list[bytes] = []
                n = 0
                while len(batches) < per_request and sent + n < count:
                    take = min(batch_records, count - sent - n)
                    tpl = templates[(sent + n) // batch_records % len(templates)]
                    batches.append(tpl if take == batch_records else encode_batch(
                        [(None, bytes(value_bytes), now, ())] * take))
                    n += take
                transport.request(url, "POST", path, query={"acks": "1"}, body=b"".join(batches),
                                  content_type=BATCHES_MEDIA_TYPE)
                sent += n
        except BaseException as exc:
            errors.append(exc)
        finally:
            transport.close()

    share = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(p, share[p])) for p in range(partitions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.monotonic() - started


def spark_read(url: str, partitions: int, runs: int) -> list[tuple[float, int, int]]:
    """Time ``1 + runs`` full reads in one session: the first with a cold JIT, then warm ones."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import odradek_spark

    spark = (SparkSession.builder.master("local[2]").appName("odradek-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        odradek_spark.register(spark)

        def reader() -> Any:  # DataFrameReader.option mutates the reader: a fresh one per query
            return spark.read.format("odradek").option("bootstrap.servers", url).option("subscribe", TOPIC)

        # Warm-up: start the Python workers (they import pyarrow and numpy once), nothing more.
        reader().option("endingOffsets", json.dumps({TOPIC: {str(p): 1 for p in range(partitions)}})) \
            .load().selectExpr("count(*)").collect()
        for _ in range(1 + runs):
            started = time.monotonic()
            row = reader().load().selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
            results.append((time.monotonic() - started, int(row["n"]), int(row["bytes"] or 0)))
    finally:
        spark.stop()
    return results


def consumer_read(url: str, partitions: int, records: int) -> tuple[float, int, int]:
    consumer = Consumer(url, fetch_max_bytes=4 << 20)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        count = size = 0
        started = time.monotonic()
        deadline = started + 600
        while count < records and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=1000).values():
                count += len(recs)
                size += sum(len(r.value) for r in recs if r.value is not None)
        return time.monotonic() - started, count, size
    finally:
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-records", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=3, help="warm Spark runs after the first one")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="odradek-spark-bench-") as d:
        cluster = LocalCluster(Path(d), brokers=1, base_port=free_port_block(1), zookeepers=1,
                               zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=6000)
        try:
            cluster.up(timeout=60)
            url = cluster.broker_url(1)
            with AdminClient(url) as admin:
                admin.create_topic(TOPIC, partitions=args.partitions, replication_factor=1)
            secs = produce(url, args.partitions, args.records, args.value_bytes, args.batch_records)
            print(f"produced {args.records:,} records of {args.value_bytes} bytes into {args.partitions} partitions "
                  f"in {secs:.1f} s ({args.records / secs:,.0f} records/s, binary path, acks=1)")

            runs = spark_read(url, args.partitions, args.runs)
            for i, (elapsed, n, size) in enumerate(runs):
                assert n == args.records, f"Spark counted {n}, expected {args.records}"
                assert size == args.records * args.value_bytes, size
                what = "first read, JVM not yet warm" if i == 0 else f"warm run {i}"
                print(f"  Spark batch read ({what}): {n:,} records in {elapsed:.2f} s = {n / elapsed:,.0f} records/s")
            warm = sorted(e for e, _, _ in runs[1:]) or [runs[0][0]]
            median = warm[len(warm) // 2]
            print(f"Spark batch read (local[2], count(*) + sum(length(value))): median of {len(warm)} warm runs "
                  f"{median:.2f} s = {args.records / median:,.0f} records/s; first run "
                  f"{args.records / runs[0][0]:,.0f} records/s")

            elapsed, n, size = consumer_read(url, args.partitions, args.records)
            assert n == args.records, f"the consumer counted {n}, expected {args.records}"
            print(f"plain Python Consumer (one process, count + sum of value lengths): {n:,} records in "
                  f"{elapsed:.2f} s = {n / elapsed:,.0f} records/s")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
