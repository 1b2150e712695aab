#!/usr/bin/env bash
# odradek-configs.sh: Kafka's kafka-configs.sh for Odradek (a thin shell over `odradek configs`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools configs "$@"
