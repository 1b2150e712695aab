#!/usr/bin/env bash
# odradek-topics.sh: Kafka's kafka-topics.sh for Odradek (a thin shell over `odradek topics`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools topics "$@"
