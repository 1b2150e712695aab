#!/usr/bin/env bash
# odradek-cluster-status.sh [--data-dir D] [--json]: ZooKeeper nodes, brokers and the controller
# (a thin shell over `odradek cluster status`).
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools cluster status "$@"
