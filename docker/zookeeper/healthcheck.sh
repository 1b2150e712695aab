#!/bin/bash
# Healthy when the node serves: `srvr` reports a mode. (`ruok` answers imok even without a quorum, so it is no
# readiness test.) bash's /dev/tcp, because neither base is sure to have nc.
host="${ZOO_CLIENT_ADDRESS:-127.0.0.1}"
[[ "$host" == "0.0.0.0" ]] && host=127.0.0.1
exec 3<>"/dev/tcp/$host/${ZOO_CLIENT_PORT:-2181}" || exit 1
printf srvr >&3
grep -qE '^Mode: (leader|follower|standalone|observer)' <&3
