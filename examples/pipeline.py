"""The README's demo job: events into Odradek, Spark aggregates them through the ``odradek`` connector, the
aggregate goes back into Odradek, and a short streaming run computes the same thing incrementally.

    odradek cluster up --brokers 3
    .venv/bin/python examples/pipeline.py --bootstrap http://127.0.0.1:8082,http://127.0.0.1:8083

Steps:

1. create the topics (``--topic``, ``--output-topic``) if they do not exist, with the AdminClient;
2. produce ``--events`` JSON events ``{"user", "action", "amount"}`` keyed by user, with the Producer;
3. batch query: count and total amount per action, read through the connector (only this run's events:
   ``startingOffsets`` is the JSON of the offsets the topic had before step 2, ``endingOffsets`` the ones after);
4. write the aggregate to the output topic through the connector's writer, read it back and print it;
5. streaming: the same aggregation with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger`` into a memory sink,
   over the same offsets, printed and checked against the batch result.

Each run only looks at the records it wrote, so running it twice prints the same figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from typing import Any

from odradek.client import AdminClient, Consumer, Producer, TopicPartition
from odradek.client.security import security_from_env
from odradek.protocol.errors import TopicAlreadyExistsError

# On a TLS cluster (`odradek cluster up --tls`): ODRADEK_SSL_CAFILE and a certificate or SASL user, for the client
# and, with Kafka's option names, for the connector (docs/security.md).
SECURITY = security_from_env()
SPARK_SECURITY = {f"kafka.{k.replace('_', '.')}": v for k, v in SECURITY.items()}

ACTIONS = ("view", "click", "add_to_cart", "purchase")
EVENT_SCHEMA = "user STRING, action STRING, amount DOUBLE"


def ensure_topic(admin: AdminClient, name: str, partitions: int) -> int:
    """Create the topic (replicated as far as the cluster allows); return its partition count."""
    with contextlib.suppress(TopicAlreadyExistsError):  # a second run reuses it
        admin.create_topic(name, partitions=partitions, replication_factor=min(3, len(admin.brokers())))
    return admin.describe_topic(name).partition_count


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[str, dict[str, int]]:
    """The high watermark of every partition, as a startingOffsets/endingOffsets JSON map."""
    with Consumer(bootstrap, **SECURITY) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        return {topic: {str(tp.partition): consumer.position(tp) for tp in tps}}


def produce_events(bootstrap: str, topic: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with Producer(bootstrap, linger_ms=5, **SECURITY) as producer:
        futures = []
        for i in range(count):
            action = rng.choices(ACTIONS, weights=(60, 25, 10, 5))[0]
            amount = round(rng.uniform(5, 200), 2) if action == "purchase" else 0.0
            user = f"user-{rng.randrange(40)}"
            event = {"user": user, "action": action, "amount": amount}
            futures.append(producer.send(topic, json.dumps(event).encode(), key=user,
                                         headers=[("source", b"pipeline-demo"), ("seq", str(i).encode())]))
        producer.flush()
        for fut in futures:
            fut.result()


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("odradek-pipeline")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark  # format("odradek") resolves by itself: pip install brings pyspark_odradek (SPARK-45917)


def aggregate(events: Any) -> Any:
    from pyspark.sql import functions as f

    parsed = events.select(f.from_json(f.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    return parsed.groupBy("action").agg(f.count("*").alias("events"), f.round(f.sum("amount"), 2).alias("amount"))


def show(title: str, rows: list[tuple[str, int, float]]) -> None:
    print(f"\n{title}")
    print(f"  {'action':<12} {'events':>7} {'amount':>10}")
    for action, events, amount in rows:
        print(f"  {action:<12} {events:>7} {amount:>10.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True, help="broker URLs, comma-separated")
    ap.add_argument("--topic", default="pipeline-events")
    ap.add_argument("--output-topic", default="pipeline-actions")
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    started = time.monotonic()

    with AdminClient(args.bootstrap, **SECURITY) as admin:
        partitions = ensure_topic(admin, args.topic, 3)
        out_partitions = ensure_topic(admin, args.output_topic, 1)
    before = end_offsets(args.bootstrap, args.topic, partitions)
    produce_events(args.bootstrap, args.topic, args.events, args.seed)
    after = end_offsets(args.bootstrap, args.topic, partitions)
    print(f"produced {args.events} events to '{args.topic}' ({partitions} partitions): offsets {before} -> {after}")

    connector = {"bootstrap.servers": args.bootstrap, **SPARK_SECURITY}  # the options every read and write take
    spark = spark_session()
    try:
        from pyspark.sql import functions as f

        def source(**options: str) -> Any:
            reader = spark.read.format("odradek").options(**connector)
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load()

        # 3. batch aggregation of exactly this run's events
        events = source(subscribe=args.topic, startingOffsets=json.dumps(before), endingOffsets=json.dumps(after),
                        includeHeaders="true")
        tagged = events.where(f.expr("exists(headers, h -> h.key = 'source')")).count()
        batch = aggregate(events)
        batch_rows = sorted((r["action"], r["events"], r["amount"]) for r in batch.collect())
        show(f"batch aggregate ({tagged} events read back with their headers)", batch_rows)

        # 4. aggregate -> output topic through the connector's writer, then read back
        out_before = end_offsets(args.bootstrap, args.output_topic, out_partitions)
        (batch.select(f.col("action").alias("key"),
                      f.to_json(f.struct("action", "events", "amount")).alias("value"))
         .write.format("odradek").options(**connector).option("topic", args.output_topic)
         .mode("append").save())
        written = source(subscribe=args.output_topic, startingOffsets=json.dumps(out_before))
        readback = written.select(f.from_json(f.col("value").cast("string"),
                                              "action STRING, events LONG, amount DOUBLE").alias("a")).select("a.*")
        readback_rows = sorted((r["action"], r["events"], r["amount"]) for r in readback.collect())
        show(f"read back from '{args.output_topic}'", readback_rows)
        assert readback_rows == batch_rows, "the aggregate read back differs from the one written"

        # 5. the same aggregation as a stream: Trigger.AvailableNow, a few micro-batches, memory sink
        with tempfile.TemporaryDirectory(prefix="odradek-pipeline-") as checkpoint:
            stream = (spark.readStream.format("odradek").options(**connector)
                      .option("subscribe", args.topic).option("startingOffsets", json.dumps(before))
                      .option("maxOffsetsPerTrigger", str(max(1, args.events // 4))).load())
            # AvailableNow stops at the offsets present when it starts; the filter keeps other writers' later
            # records out, so the result is comparable with the batch one.
            bounded = stream.where(" OR ".join(
                f"(partition = {p} AND offset < {off})" for p, off in after[args.topic].items()))
            query = (aggregate(bounded).writeStream.outputMode("complete").format("memory")
                     .queryName("pipeline_actions").option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            query.awaitTermination(90)
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
            stream_rows = sorted((r["action"], r["events"], r["amount"])
                                 for r in spark.sql("SELECT * FROM pipeline_actions").collect())
        show(f"streaming aggregate (Trigger.AvailableNow, {len(batches)} micro-batches of {batches} records)",
             stream_rows)
        print(f"\nstreaming result {'matches' if stream_rows == batch_rows else 'DIFFERS FROM'} the batch result; "
              f"done in {time.monotonic() - started:.1f} s")
        return 0 if stream_rows == batch_rows else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
