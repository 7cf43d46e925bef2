#!/bin/sh
# A Redis node of docker-compose.yml: compose's redis.conf, the ACL users, and, for a replica,
# the user it replicates as (dtq-topology; the password goes through a file on the tmpfs, never
# on the command line). Extra arguments are passed on (--cluster-enabled yes, --replicaof ...).
set -eu
umask 077
printf 'masteruser dtq-topology\nmasterauth "%s"\n' "$(cat /run/secrets/redis_pw_topology)" \
  > /tmp/replication.conf
exec redis-server /usr/local/etc/redis/redis.conf --dir /data \
  --aclfile /run/secrets/redis_users_acl --include /tmp/replication.conf "$@"
