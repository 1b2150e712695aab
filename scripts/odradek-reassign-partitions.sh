#!/usr/bin/env bash
# odradek-reassign-partitions.sh: Kafka's kafka-reassign-partitions.sh for Odradek (a thin shell over `odradek reassign-partitions`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools reassign-partitions "$@"
