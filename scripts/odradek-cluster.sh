#!/usr/bin/env bash
# odradek-cluster.sh up|status|down|broker|zookeeper ...  (a thin shell over `odradek cluster`)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools cluster "$@"
