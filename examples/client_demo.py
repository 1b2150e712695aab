"""Produce and consume with the Python client: the README's first taste of Odradek.

    python examples/client_demo.py --bootstrap http://127.0.0.1:8082 --topic demo
"""

from __future__ import annotations

import argparse
import json

from odradek import AdminClient, Consumer, Producer, TopicPartition
from odradek.client.security import security_from_env
from odradek.protocol.errors import TopicAlreadyExistsError

# On a TLS cluster (`odradek cluster up --tls`): ODRADEK_SSL_CAFILE and a certificate or SASL user (docs/security.md).
SECURITY = security_from_env()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="http://127.0.0.1:8082")
    ap.add_argument("--topic", default="demo")
    ap.add_argument("--records", type=int, default=1000)
    args = ap.parse_args()

    with AdminClient(args.bootstrap, **SECURITY) as admin:
        try:
            admin.create_topic(args.topic, partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
            print(f"created topic {args.topic}: 3 partitions, replication factor 3, min.insync.replicas 2")
        except TopicAlreadyExistsError:
            print(f"topic {args.topic} exists")
        description = admin.describe_topic(args.topic)
        print(f"partitions: {description}")

    with Producer(args.bootstrap, acks="all", **SECURITY) as producer:
        futures = [
            producer.send(args.topic, json.dumps({"n": i}).encode(), key=f"user-{i % 10}".encode(),
                          headers=[("source", b"client_demo")])
            for i in range(args.records)
        ]
        producer.flush()
        offsets = [f.result() for f in futures]
    per_partition: dict[int, int] = {}
    for meta in offsets:
        per_partition[meta.partition] = per_partition.get(meta.partition, 0) + 1
    print(f"produced {len(offsets)} records with acks=all: {dict(sorted(per_partition.items()))} per partition")

    consumer = Consumer(args.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000, **SECURITY)
    consumer.assign([TopicPartition(args.topic, p) for p in range(3)])
    seen = 0
    for record in consumer:
        seen += 1
        if seen <= 3:
            print(f"  {record.topic}-{record.partition}@{record.offset} key={record.key!r} value={record.value!r}")
    consumer.close()
    print(f"consumed {seen} records")


if __name__ == "__main__":
    main()
