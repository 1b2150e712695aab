"""A streaming query that copies one topic to another with the exactly-once writer, in a process of its own so
that a test can SIGKILL it (its process group: the driver and Spark's JVM) and restart it from the checkpoint.

``python -m tests.spark_eo_job BOOTSTRAP SOURCE SINK CHECKPOINT [--per-trigger N] [--available-now]``: reads
SOURCE from the earliest offset, ``maxOffsetsPerTrigger`` N (many small micro-batches, so a kill lands inside
one), and writes key and value to SINK with ``exactlyOnce=true``. Prints ``started`` once the query runs; with
``--available-now`` it stops when SOURCE is copied and exits 0, otherwise it runs until killed.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "checkpoint"):
        p.add_argument(name)
    p.add_argument("--per-trigger", type=int, default=20)
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("odradek-eo-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "512m").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    writer = (spark.readStream.format("odradek").option("bootstrap.servers", args.bootstrap)
              .option("subscribe", args.source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.per_trigger)).load()
              .selectExpr("key", "value").writeStream.format("odradek")
              .option("bootstrap.servers", args.bootstrap).option("topic", args.sink)
              .option("exactlyOnce", "true").option("checkpointLocation", args.checkpoint)
              # A transaction a killed attempt left open holds read_committed readers back until it times out:
              # two minutes, not the default ten (a micro-batch here takes seconds).
              .option("kafka.transaction.timeout.ms", "120000"))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    if error is not None:
        print(f"query failed: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
