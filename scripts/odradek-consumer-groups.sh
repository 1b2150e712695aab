#!/usr/bin/env bash
# odradek-consumer-groups.sh: Kafka's kafka-consumer-groups.sh for Odradek (a thin shell over `odradek consumer-groups`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools consumer-groups "$@"
