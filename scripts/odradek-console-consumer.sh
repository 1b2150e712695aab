#!/usr/bin/env bash
# odradek-console-consumer.sh: Kafka's kafka-console-consumer.sh for Odradek (a thin shell over `odradek console-consumer`; --help lists the options)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools console-consumer "$@"
