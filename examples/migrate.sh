#!/usr/bin/env bash
# Database migrations, one run at a time, whichever host, deploy or pipeline starts them.
#
# The lock spans several steps of this script, so it is taken with `rlock acquire` and given
# back with `rlock release`. The token that proves the hold travels between them in a file
# (mode 0600), never on a command line, where `ps` would show it. A trap gives the lock back
# however the script ends; if the script is killed outright, the lock expires after its TTL.
#
#   migrate.sh          exits 0 when migrated; 75 when another run kept the lock for longer
#                       than MIGRATE_LOCK_WAIT (default 15m); else the status of the step that
#                       failed, or 1 if the lock expired during the migration.
#
# rlock finds the lock in RLOCK_URL (or /etc/rlock/config.toml), and the password in
# RLOCK_PASSWORD or a password-file. Replace the steps (pg_dump, psql) with your own.
set -euo pipefail

wait_for=${MIGRATE_LOCK_WAIT:-15m}
database=${MIGRATE_DATABASE:-app}

token=$(mktemp "${TMPDIR:-/tmp}/db-migrate.XXXXXX")
trap 'rm -f "$token"' EXIT

# Wait our turn behind a migration in progress, then hold the lock for 10 minutes.
rlock acquire db-migrate --ttl 10m --wait "$wait_for" --token-file "$token"   # exit 0 (75 if still busy after the wait)

finish() {
  local status=$?
  # 1 means the token no longer owns the lock: it expired, and another run may have migrated
  # at the same time. Say so, and fail even if every step succeeded.
  if ! rlock release db-migrate --token-file "$token"; then   # exit 0 (1 if the lock expired meanwhile)
    echo "migrate.sh: the db-migrate lock expired during the migration; check the database" >&2
    ((status)) || status=1
  fi
  rm -f "$token"
  exit "$status"
}
trap finish EXIT

pg_dump --format=custom --file="before-migration.dump" "$database"

# Each step may take a while: another 10 minutes from now before the next one.
rlock extend db-migrate --token-file "$token"   # exit 0 (1 if the lock expired meanwhile)
psql --single-transaction --set=ON_ERROR_STOP=1 --file=migrations/schema.sql "$database"

rlock extend db-migrate --token-file "$token"   # exit 0 (1 if the lock expired meanwhile)
psql --single-transaction --set=ON_ERROR_STOP=1 --file=migrations/data.sql "$database"
