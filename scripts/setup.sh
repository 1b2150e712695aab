#!/usr/bin/env bash
# Installs everything Odradek needs on a fresh Debian machine: ZooKeeper (and Java) and kcat from Debian, and a
# virtualenv in .venv with the project, its test extras, its Spark extras (pyspark, pyarrow) and matplotlib (verify).
# Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# iptables: `odradek verify` cuts links inside the network namespaces it makes (its tests need it).
# kcat: a Kafka client (librdkafka) for the Kafka listener, used by the main job and the tests.
missing=()
{ [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null; } || missing+=(zookeeper)
command -v iptables >/dev/null || missing+=(iptables)
command -v kcat >/dev/null || missing+=(kcat)
if ((${#missing[@]})); then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# compat mode puts the project root on sys.path (a .pth line), which Spark's Python workers need both to import
# the project and to discover pyspark_odradek (pkgutil.iter_modules does not see setuptools' editable finder).
.venv/bin/pip install -q --disable-pip-version-check -e ".[test,spark,verify]" --config-settings editable_mode=compat
# Confluent's Node REST Proxy client (npm kafka-rest, pinned in tests/clients/node/package.json) for tests/integration/test_rest_v1.py.
if command -v node >/dev/null && command -v npm >/dev/null && [ ! -d tests/clients/node/node_modules ]; then npm install --prefix tests/clients/node --no-audit --no-fund --loglevel=error || echo "setup: npm install of tests/clients/node failed: the Node client test will skip"; fi
