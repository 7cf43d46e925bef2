#!/bin/sh
# A sentinel of the sentinel profile, watching `redis` as master dtqmaster (quorum 2 of 3),
# authenticating to the data nodes as dtq-topology. Its configuration is written on its first
# start only, into its volume: a sentinel rewrites it with what it learns (after a failover, the
# promoted master), and must find that again when it restarts.
set -eu
umask 077
conf=/data/sentinel.conf
if [ ! -e "$conf" ]; then
  cat > "$conf" <<CONF
port 26379
dir /data
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel monitor dtqmaster redis 6379 2
sentinel auth-user dtqmaster dtq-topology
sentinel auth-pass dtqmaster $(cat /run/secrets/redis_pw_topology)
sentinel down-after-milliseconds dtqmaster 1000
sentinel failover-timeout dtqmaster 10000
sentinel parallel-syncs dtqmaster 1
CONF
fi
exec redis-server "$conf" --sentinel
