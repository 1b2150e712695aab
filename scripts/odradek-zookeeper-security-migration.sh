#!/usr/bin/env bash
# odradek-zookeeper-security-migration.sh: Kafka's zookeeper-security-migration.sh (a thin shell over
# `odradek zookeeper-security-migration`; the identity comes from $ODRADEK_ZK_DIGEST)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools zookeeper-security-migration "$@"
