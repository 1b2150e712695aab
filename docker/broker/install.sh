#!/bin/sh
# Runs once inside `docker build` (docker/broker/Dockerfile): Python if the base lacks it, a virtualenv with the
# project, and the unprivileged user the broker runs as.
set -eu
if ! command -v python3 >/dev/null 2>&1; then
    # The locally made Debian base: Debian's Python 3.11 (the same minor version as python:3.11-slim).
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
fi
python3 -m venv /opt/odradek
if ls /tmp/odradek/wheels/*.whl >/dev/null 2>&1; then
    /opt/odradek/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/odradek/wheels odradek
else
    /opt/odradek/bin/pip install -q --no-cache-dir /tmp/odradek/src
fi
# pip and setuptools are not needed at run time.
/opt/odradek/bin/pip uninstall -q -y pip setuptools >/dev/null 2>&1 || true
groupadd --system --gid 10001 odradek
useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/odradek --no-create-home --shell /usr/sbin/nologin odradek
mkdir -p /var/lib/odradek/data
chown -R 10001:10001 /var/lib/odradek
