#!/usr/bin/env bash
# odradek-acls.sh: Kafka's kafka-acls.sh for Odradek (a thin shell over `odradek acls`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools acls "$@"
