#!/usr/bin/env bash
# odradek-leader-election.sh: Kafka's kafka-leader-election.sh for Odradek (a thin shell over `odradek leader-election`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools leader-election "$@"
