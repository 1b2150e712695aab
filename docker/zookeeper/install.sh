#!/bin/sh
# Runs once inside `docker build` (docker/zookeeper/Dockerfile). On the official image ZooKeeper, Java and the
# `zookeeper` user are there; on a bare Debian base, install Debian's ZooKeeper library with a headless JRE (the
# `zookeeper` package itself would pull a full desktop JRE) and create the user.
set -eu
if [ ! -f /usr/share/java/zookeeper.jar ] && ! command -v zkServer.sh >/dev/null 2>&1; then
    # openjdk's postinst links its man pages: the directory must exist even where docs are left out.
    mkdir -p /usr/share/man/man1
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libzookeeper-java default-jre-headless >/dev/null
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
fi
if ! id zookeeper >/dev/null 2>&1; then
    groupadd --system --gid 10002 zookeeper
    useradd --system --uid 10002 --gid 10002 --home-dir /data --no-create-home --shell /usr/sbin/nologin zookeeper
fi
mkdir -p /conf /data /datalog /logs
chown -R zookeeper:zookeeper /conf /data /datalog /logs
chmod 0755 /usr/local/lib/odradek-zk/*.sh
