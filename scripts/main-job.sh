#!/usr/bin/env bash
# The main job: set up, start a local cluster (3 ZooKeeper nodes, 3 brokers), show its status, take it down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DATA_DIR="${ODRADEK_DATA_DIR:-.odradek/main-job}"
trap '.venv/bin/odradek cluster down --data-dir "$DATA_DIR" >/dev/null 2>&1 || true' EXIT
.venv/bin/odradek cluster up --data-dir "$DATA_DIR" "$@"
.venv/bin/odradek cluster status --data-dir "$DATA_DIR" --json
curl -s http://127.0.0.1:9092/health || true; echo
