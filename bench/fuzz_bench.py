"""A long schemathesis run against a live broker's /openapi.json: prints the request count and the 5xx count.

    .venv/bin/python bench/fuzz_bench.py [--requests 10000] [--brokers 1]

The CI run (tests/integration/test_openapi_conformance.py) is short and bounded; this one keeps generating until
``--requests`` requests were sent, over every documented operation (topic creation and the broker-internal
routes included, with small counts so the cluster stays usable), and reports each 5xx with the request that
caused it. It starts its own ZooKeeper and brokers and ends them by pid. Not a test.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek_local.cluster import LocalCluster
from tests.harness.http import create_topic, request
from tests.harness.ports import free_port_block

# Requests that would stop or reshape the cluster being fuzzed (they are covered by their own tests).
SKIPPED = ("/controller/controlled_shutdown", "/admin/reassign_partitions")


def prepare(spec: dict[str, Any], cid: str) -> dict[str, Any]:
    """Aim path parameters at things that exist about half of the time, and keep created topics small."""
    for item in spec["paths"].values():
        for op in item.values():
            for param in op.get("parameters", []):
                if param["in"] != "path":
                    continue
                if param["name"] == "cluster_id":
                    param["schema"] = {"type": "string", "enum": [cid, "not-a-cluster"]}
                elif param["name"] == "topic":
                    param["schema"] = {"anyOf": [{"type": "string", "enum": ["fuzzed", "other"]}, {"type": "string"}]}
                elif param["name"] == "partition":
                    param["schema"] = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 3}, {"type": "string"}]}
    create = spec["paths"].get("/v3/clusters/{cluster_id}/topics", {}).get("post")
    if create is not None:
        schema = create["requestBody"]["content"]["application/json"]["schema"]
        spec.setdefault("components", {}).setdefault("schemas", {})["FuzzCreateTopic"] = {
            "type": "object", "required": ["topic_name"], "properties": {
                "topic_name": {"type": "string", "maxLength": 20},
                "partitions_count": {"type": "integer", "minimum": -2, "maximum": 30},
                "replication_factor": {"type": "integer", "minimum": -1, "maximum": 4},
                "configs": {"type": "array", "maxItems": 3, "items": {"type": "object"}}}}
        create["requestBody"]["content"]["application/json"]["schema"] = {
            "anyOf": [schema, {"$ref": "#/components/schemas/FuzzCreateTopic"}]}
    spec["paths"] = {p: item for p, item in spec["paths"].items() if not any(s in p for s in SKIPPED)}
    return spec


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import hypothesis
    import schemathesis

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="odradek-fuzz-", dir=root) as d:
        cluster = LocalCluster(Path(d) / "cluster", brokers=args.brokers, base_port=free_port_block(args.brokers),
                               zookeepers=1, zk_base_port=free_port_block(1, span=106), tick_ms=500,
                               session_timeout_ms=4000)
        sent = 0
        statuses: Counter[int] = Counter()
        errors: list[str] = []
        started = time.monotonic()
        try:
            cluster.up()
            url = cluster.broker_url(1)
            create_topic(url, "fuzzed", 2, 1, seen_by=[url])
            cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
            spec = prepare(request("GET", f"{url}/openapi.json")[1], cid)
            schema = schemathesis.from_dict(spec, base_url=url)
            operations = [r.ok() for r in schema.get_all_operations()]
            per_op = max(20, args.requests // max(1, len(operations)) + 1)
            rounds = 0

            def fuzz(operation: Any, rounds: int) -> None:
                @hypothesis.settings(max_examples=per_op, deadline=None, database=None,
                                     suppress_health_check=list(hypothesis.HealthCheck),
                                     phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate])
                @hypothesis.seed(args.seed * 1000 + rounds)
                @hypothesis.given(case=operation.as_strategy())
                def run(case: Any) -> None:
                    nonlocal sent
                    if sent >= args.requests:
                        return
                    sent += 1
                    try:
                        response = case.call(timeout=30)
                    except Exception as e:  # a dropped connection counts as a server failure
                        statuses[599] += 1
                        errors.append(f"{operation.verbose_name}: no answer: {e!r}"[:300])
                        return
                    statuses[response.status_code] += 1
                    if response.status_code >= 500:  # schemathesis' not_a_server_error, counted
                        errors.append(f"{operation.verbose_name} {response.status_code}: "
                                      f"{case.as_curl_command()[:300]} -> {response.text[:200]}")

                run()

            while sent < args.requests:
                rounds += 1
                for operation in operations:
                    if sent >= args.requests:
                        break
                    fuzz(operation, rounds)
                print(f"round {rounds}: {sent} requests, {sum(n for s, n in statuses.items() if s >= 500)} 5xx",
                      flush=True)
        finally:
            cluster.down()
    elapsed = time.monotonic() - started
    server_errors = sum(n for s, n in statuses.items() if s >= 500)
    print(f"schemathesis long run: {sent} requests in {elapsed:.0f} s, {server_errors} 5xx")
    print("statuses: " + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())))
    for line in sorted(set(errors))[:30]:
        print("  5xx:", line)
    return 1 if server_errors else 0


if __name__ == "__main__":
    sys.exit(main())
