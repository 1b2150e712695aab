"""The REST produce body pass alone: 1,000-record v2 bodies to batches by the compiled codec, microseconds each.

    .venv/bin/python bench/rest_body_bench.py [--calls 100] [--repeats 30]
    (cd /other/checkout && PYTHONPATH=. /path/to/.venv/bin/python bench/rest_body_bench.py)   # the A/B side

``speedups.produce_body`` on two bodies shaped as bench/rest_wrk.py's: the binary (base64) format with
distinct random 100-byte values and keys ``k<i mod 1000>``, and the JSON format with the benches' 98-character
string values; six partitions, keys hashed. Prints the best of ``--repeats`` rounds of ``--calls`` calls per body
(the least disturbed round: the machine is shared) in microseconds per 1,000-record body and GB/s of body. This is
the largest single item of a REST produce on the broker's event loop (docs/performance.md). Not a test.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import os
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path.cwd()))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench.rest_bench import KEYS, make_json_values
from odradek.protocol import speedups

RECORDS = 1000
PARTITIONS = 6


def bodies() -> dict[str, tuple[bytes, bool]]:
    values = [os.urandom(100) for _ in range(RECORDS)]
    keys = [KEYS[i % len(KEYS)] for i in range(RECORDS)]
    binary = orjson.dumps({"records": [{"key": base64.b64encode(k).decode(), "value": base64.b64encode(v).decode()}
                                       for k, v in zip(keys, values, strict=True)]})
    text = orjson.dumps({"records": [{"key": k.decode(), "value": v}
                                     for k, v in zip(keys, make_json_values(RECORDS), strict=True)]})
    return {"binary": (binary, True), "json": (text, False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    if not speedups.COMPILED:
        sys.exit("the compiled codec is not built here (setup.py build_ext --inplace)")
    out = []
    for name, (body, binary) in bodies().items():
        counter = itertools.count()
        if speedups.produce_body(body, binary, PARTITIONS, -1, counter, 0, 10_000, 10**9) is None:
            sys.exit(f"the {name} body was left to the parsed path")
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(args.calls):
                speedups.produce_body(body, binary, PARTITIONS, -1, counter, 0, 10_000, 10**9)
            best = min(best, (time.perf_counter() - start) / args.calls)
        out.append(f"{name} {best * 1e6:.0f} µs ({len(body) / best / 1e9:.2f} GB/s)")
    print(f"{Path(speedups.__file__).resolve().parent.parent.parent}: " + ", ".join(out))


if __name__ == "__main__":
    main()
