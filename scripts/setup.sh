#!/usr/bin/env bash
# Installs everything Odradek needs on a fresh Debian machine: ZooKeeper (and Java) from Debian, and a
# virtualenv in .venv with the project, its test extras and its Spark extras (pyspark, pyarrow).
# Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq zookeeper >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[test,spark]"
