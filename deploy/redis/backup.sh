#!/bin/sh
# Back up a running Redis 7 of dtq: its append-only directory as a tar stream on stdout.
#
#   docker-compose exec -T redis sh -s < deploy/redis/backup.sh > dtq-redis-$(date +%F).tar
#   sh deploy/redis/backup.sh .data/redis > backup.tar          # `just up`'s local Redis
#
# Redis 7 keeps the AOF as a manifest plus a base file and incremental files; the base file
# never changes and the incremental file is only appended to (a command cut off at the end of
# the copy is dropped when Redis loads it: aof-load-truncated yes). Only a rewrite replaces
# the set, and it swaps the manifest when it does: when the manifest is the same before and
# after the copy, the copy is consistent. Otherwise this exits with 75: run it again.
# docs/deployment.md has the restore steps.
set -eu
cd "${1:-/data}"
manifest=$(ls appendonlydir/*.manifest)
before=$(cat "$manifest")
# GNU tar exits 1 when a file grew while it was read: expected for the incremental file.
tar --warning=no-file-changed -cf - appendonlydir || [ $? -eq 1 ]
after=$(cat "$manifest" 2>/dev/null || true)
if [ "$before" != "$after" ]; then
    echo "backup.sh: an AOF rewrite ran during the copy; discard this backup and run again" >&2
    exit 75
fi
