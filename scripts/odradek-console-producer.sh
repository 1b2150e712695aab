#!/usr/bin/env bash
# odradek-console-producer.sh: Kafka's kafka-console-producer.sh for Odradek (a thin shell over `odradek console-producer`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools console-producer "$@"
