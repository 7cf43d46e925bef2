#!/bin/sh
# The healthcheck of a Redis node of docker-compose.yml, as user dtq-health: it answers PING;
# a cluster node (REDIS_CLUSTER_ENABLED=yes) also says the cluster is ok; with DTQ_SENTINELS
# (host:port ...) every sentinel also names the master. The services wait for `redis` to be
# healthy, so on the cluster and sentinel profiles they start once the topology is usable.
set -eu
export REDISCLI_AUTH="$(cat /run/secrets/redis_pw_health)"
redis-cli --user dtq-health ping | grep -q PONG
if [ "${REDIS_CLUSTER_ENABLED:-no}" = yes ]; then
  redis-cli --user dtq-health cluster info | grep -q '^cluster_state:ok'
fi
for sentinel in ${DTQ_SENTINELS:-}; do
  redis-cli --no-auth-warning -h "${sentinel%:*}" -p "${sentinel#*:}" \
    sentinel get-master-addr-by-name dtqmaster | grep -q .
done
