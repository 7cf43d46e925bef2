#!/bin/sh
# The cluster profile's one-shot job: make the 6 nodes one Redis Cluster (3 masters, each with
# a replica) unless they already are one; redis-cli as user dtq-topology.
set -eu
export REDISCLI_AUTH="$(cat /run/secrets/redis_pw_topology)"
nodes="redis redis-node-2 redis-node-3 redis-node-4 redis-node-5 redis-node-6"
for node in $nodes; do
  until redis-cli --user dtq-topology -h "$node" ping 2>/dev/null | grep -q PONG; do sleep 0.5; done
done
if redis-cli --user dtq-topology -h redis cluster info | grep -q '^cluster_known_nodes:[2-9]'; then
  echo "the nodes already form a cluster"
  exit 0
fi
addresses=""
for node in $nodes; do
  addresses="$addresses $(getent hosts "$node" | cut -d' ' -f1):6379"
done
# shellcheck disable=SC2086 # one address per word
exec redis-cli --user dtq-topology --cluster create $addresses --cluster-replicas 1 --cluster-yes
