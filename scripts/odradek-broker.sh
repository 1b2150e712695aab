#!/usr/bin/env bash
# odradek-broker.sh --id N --zk CONNECT --listen HOST:PORT --data-dir DIR  (a thin shell over `odradek broker`)
source "$(dirname "$0")/_python.sh"
exec "$PY" -m odradek_tools broker "$@"
