#!/usr/bin/env bash
# Installs everything Odradek needs on a fresh Debian machine: ZooKeeper (and Java), kcat, chromium and its driver
# from Debian, and a virtualenv in .venv with the project, its test extras, its Spark extras (pyspark, pyarrow) and
# matplotlib (verify).
# Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
# CI (.ci/run) runs this once and then the test command with ODRADEK_SETUP_DONE=1, so that the image build it starts
# beside the tests never meets a second `pip install -e .` rebuilding in the same tree.
[[ "${ODRADEK_SETUP_DONE:-}" == 1 ]] && exit 0
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# iptables: `odradek verify` cuts links inside the network namespaces it makes (its tests need it).
# kcat: a Kafka client (librdkafka) for the Kafka listener, used by the main job and the tests.
# chromium, chromium-driver: the web console's browser tests (tests/browser/, selenium drives them headless).
missing=()
{ [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null; } || missing+=(zookeeper)
command -v iptables >/dev/null || missing+=(iptables)
command -v ss >/dev/null || missing+=(iproute2)  # ss: tests/spark/test_failover.py finds the Spark read's connection
command -v kcat >/dev/null || missing+=(kcat)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if ((${#missing[@]})); then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The virtualenv's interpreter: ODRADEK_PYTHON if set; else Debian's python3.11, a PGO and LTO build with libpython
# linked in, on which the brokers spend 5-10 % less CPU than on a plain source build (pyenv's default, --enable-shared
# without --enable-optimizations: docs/performance.md, 2026-12-04); else python3. An existing .venv is kept.
if [ ! -x .venv/bin/python ]; then
  py="${ODRADEK_PYTHON:-}"
  if [ -z "$py" ] && [ -x /usr/bin/python3.11 ]; then
    py=/usr/bin/python3.11
    { /usr/bin/python3.11 -c 'import ensurepip' 2>/dev/null && [ -f /usr/include/python3.11/Python.h ]; } || {
      $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3.11-venv python3.11-dev >/dev/null; } \
      || py=python3
  fi
  "${py:-python3}" -m venv .venv
fi
# compat mode puts the project root on sys.path (a .pth line), which Spark's Python workers need both to import
# the project and to discover pyspark_odradek (pkgutil.iter_modules does not see setuptools' editable finder).
.venv/bin/pip install -q --disable-pip-version-check -e ".[test,spark,verify]" --config-settings editable_mode=compat
# Node clients pinned in tests/clients/node/package.json (npm kafka-rest for tests/integration/test_rest_v1.py, kafkajs
# for tests/integration/test_kafka_kafkajs.py): installed when any pinned package is missing or at another version.
if command -v node >/dev/null && command -v npm >/dev/null && ! node -e 'const fs = require("fs"), d = "tests/clients/node/"; const want = require("./" + d + "package.json").dependencies; process.exit(Object.entries(want).every(([n, v]) => fs.existsSync(d + "node_modules/" + n + "/package.json") && JSON.parse(fs.readFileSync(d + "node_modules/" + n + "/package.json")).version === v) ? 0 : 1)'; then npm install --prefix tests/clients/node --no-audit --no-fund --loglevel=error || echo "setup: npm install of tests/clients/node failed: the Node client tests (kafka-rest, kafkajs) will skip"; fi
