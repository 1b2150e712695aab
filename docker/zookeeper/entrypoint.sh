#!/bin/bash
# Write zoo.cfg and myid from the environment (the official image's variables), then exec ZooKeeper in the
# foreground so that it is PID 1 and gets the container's signals.
#
# Why our own entry point rather than the official one: the same variables must work on a bare Debian base
# (CI, no registry), and we need the client port's address (ZOO_CLIENT_ADDRESS) so that a node on the host
# network listens on 127.0.0.1 only. The config is rewritten at every start: the environment is the truth.
set -euo pipefail
: "${ZOO_CONF_DIR:=/conf}" "${ZOO_DATA_DIR:=/data}" "${ZOO_DATA_LOG_DIR:=/datalog}" "${ZOO_LOG_DIR:=/logs}"
: "${ZOO_MY_ID:=1}" "${ZOO_CLIENT_PORT:=2181}" "${ZOO_CLIENT_ADDRESS:=127.0.0.1}" "${ZOO_HEAP_MB:=128}"
cfg="$ZOO_CONF_DIR/zoo.cfg"
mkdir -p "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR"
{
    echo "dataDir=$ZOO_DATA_DIR"
    echo "dataLogDir=$ZOO_DATA_LOG_DIR"
    echo "tickTime=${ZOO_TICK_TIME:-2000}"
    echo "initLimit=${ZOO_INIT_LIMIT:-10}"
    echo "syncLimit=${ZOO_SYNC_LIMIT:-5}"
    echo "clientPort=$ZOO_CLIENT_PORT"
    echo "clientPortAddress=$ZOO_CLIENT_ADDRESS"
    echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-0}"
    echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
    echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr,ruok,mntr,stat,conf,isro}"
    echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
    echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-24}"
    echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
    for server in ${ZOO_SERVERS:-}; do echo "$server"; done
    for extra in ${ZOO_CFG_EXTRA:-}; do echo "$extra"; done
} >"$cfg.tmp"
mv "$cfg.tmp" "$cfg"
echo "$ZOO_MY_ID" >"$ZOO_DATA_DIR/myid"

# forceSnapshotSync: ZooKeeper before 3.9.2 can lose committed writes after a DIFF sync (ZOOKEEPER-4643/4646);
# a snapshot sync is on disk before the follower takes the new epoch (odradek_local/zookeeper.py says more).
heap=(-Xmx"${ZOO_HEAP_MB}"m -Xms32m -XX:+UseSerialGC -Dzookeeper.forceSnapshotSync="${ZOO_FORCE_SNAPSHOT_SYNC:-true}")
if [[ -f /usr/share/java/zookeeper.jar ]]; then
    # Debian's ZooKeeper: its jar's manifest lists its dependencies; add a log4j binding for console logs.
    cp=/usr/local/lib/odradek-zk:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar
    exec java "${heap[@]}" ${JVMFLAGS:-} -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
fi
# The official image: its zkServer.sh knows the classpath and logging set-up.
export ZOOCFGDIR="$ZOO_CONF_DIR" JVMFLAGS="${heap[*]} ${JVMFLAGS:-}"
exec zkServer.sh start-foreground "$cfg"
