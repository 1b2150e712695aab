#!/usr/bin/env bash
# What bench/ needs beyond scripts/setup.sh: the peers bench/rest_bench.py and http_bench.py run side by side
# (Redis Streams, NATS JetStream, from Debian) and their Python clients plus py-spy (the project's bench extra), and
# librdkafka's C benchmark tool for bench/kafka_bench.py.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null || ! command -v nats-server >/dev/null || ! command -v wrk >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server nats-server wrk >/dev/null
fi
.venv/bin/pip install -q -e ".[bench]" --config-settings editable_mode=compat
bash scripts/build-rdkafka-performance.sh
echo "bench set-up done: redis-server $(redis-server --version | awk '{print $3}'), $(nats-server --version)"
