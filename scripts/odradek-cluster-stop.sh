#!/usr/bin/env bash
# odradek-cluster-stop.sh [--data-dir D]: stop every process `odradek-cluster-start.sh` started, by pid
# (a thin shell over `odradek cluster down`).
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools cluster down "$@"
