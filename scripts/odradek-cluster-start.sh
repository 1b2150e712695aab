#!/usr/bin/env bash
# odradek-cluster-start.sh [--data-dir D] [--zookeepers 1|3|5] [--brokers N] [--base-port P] ...
# Start a local ZooKeeper ensemble and brokers in the background (a thin shell over `odradek cluster up`).
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools cluster up "$@"
