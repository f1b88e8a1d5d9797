#!/usr/bin/env bats
# Redis Cluster: a redis:// URL of any one node; rlock follows MOVED (and ASK during a slot
# migration); all keys of one lock share a hash slot; list shows the locks of every master.
#
# One cluster of 3 masters for the whole file (creating one takes seconds); every test starts
# from empty masters.

load helpers/common
load helpers/servers

# 8 lock names; with 3 masters their slots fall on all of them, at least 2 on each (the first
# test checks that they fall on all 3).
KEYS=(alpha bravo charlie delta echo foxtrot golf hotel)

setup_file() {
  cluster_start 3
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
  cluster_ready || fail "the cluster is not ok at the start of the test"
  cluster_flush || fail "could not empty the masters"
  read -r P1 P2 P3 <<<"$CLUSTER_PORTS"
  export RLOCK_URL="redis://127.0.0.1:$P1"
}

teardown() {
  common_teardown
}

# Whether Redis key $1 exists in the cluster (on the node owning its slot).
ckey_exists() { [[ $(ccli exists "$1" 2>/dev/null | tr -d '\r') == 1 ]]; }
clock_held() { ckey_exists "$(lock_key "$1")"; }
clock_free() { ! ckey_exists "$(lock_key "$1")"; }

@test "run takes 8 locks on all 3 masters through one node's URL" {
  local k nodes=()
  for k in "${KEYS[@]}"; do
    run --separate-stderr rlock run "$k" -- sh -c 'echo "$RLOCK_KEY $RLOCK_FENCE"'
    assert_success
    # The fence counter stays (it never expires), on the master that owns the lock's slot.
    nodes+=("$(cluster_port_of "$(lock_key "$k")")")
    assert_output "$k $(srv_cli "${nodes[-1]}" get "$(lock_key "$k"):fence" | tr -d '\r')"
    [[ $(srv_cli "${nodes[-1]}" exists "$(lock_key "$k"):fence" | tr -d '\r') == 1 ]] ||
      fail "the fence of $k is not on the node of its slot (${nodes[-1]})"
    clock_free "$k"
  done
  # The test means something only if the locks were spread over the masters.
  local distinct
  distinct=$(printf '%s\n' "${nodes[@]}" | sort -u | wc -l)
  assert_equal "$distinct" 3
  # The same through another node's URL: the fences go on counting.
  local before
  for k in "${KEYS[@]}"; do
    before=$(ccli get "$(lock_key "$k"):fence" | tr -d '\r')
    run --separate-stderr rlock run "$k" -u "redis://127.0.0.1:$P3" -- sh -c 'echo "$RLOCK_FENCE"'
    assert_success
    assert_output $((before + 1))
  done
}

@test "acquire 8 locks, list shows them all (every master), status finds each, release frees them" {
  require_jq
  local k
  for k in "${KEYS[@]}"; do
    run --separate-stderr rlock acquire "$k" -t 30s --token-file "$T/$k.token"
    assert_success
    clock_held "$k"
  done
  run --separate-stderr rlock list
  assert_success
  for k in "${KEYS[@]}"; do
    grep -qw -- "$k" <<<"$output" || fail "list does not show $k: $output"
  done
  run --separate-stderr rlock list --json
  assert_success
  assert_equal "$(jq length <<<"$output")" "${#KEYS[@]}"
  assert_equal "$(jq -r '.[].key' <<<"$output" | sort | tr '\n' ' ')" "$(printf '%s\n' "${KEYS[@]}" | sort | tr '\n' ' ')"
  # Through each node's URL, the same locks.
  local p
  for p in $CLUSTER_PORTS; do
    run --separate-stderr rlock list --json -u "redis://127.0.0.1:$p"
    assert_success
    assert_equal "$(jq length <<<"$output")" "${#KEYS[@]}"
  done
  # A pattern filters across masters.
  run --separate-stderr rlock list --json 'a*'
  assert_success
  assert_equal "$(jq -r '.[].key' <<<"$output" | sort | tr '\n' ' ')" "alpha "
  for k in "${KEYS[@]}"; do
    run --separate-stderr rlock status "$k" -u "redis://127.0.0.1:$P2"
    assert_success
  done
  run --separate-stderr rlock status --json "${KEYS[@]}"
  assert_success
  assert_equal "$(jq length <<<"$output")" "${#KEYS[@]}"
  for k in "${KEYS[@]}"; do
    run --separate-stderr rlock release "$k" --token-file "$T/$k.token"
    assert_success
    clock_free "$k"
  done
  run --separate-stderr rlock list --json
  assert_success
  assert_equal "$(jq length <<<"$output")" 0
  run --separate-stderr rlock status "${KEYS[0]}"
  assert_failure 1
}

@test "a lock's keys (lock, fence, info) are in one slot, on one node" {
  local k slot p
  for k in "${KEYS[@]:0:6}"; do
    run --separate-stderr rlock acquire "$k" --token-file "$T/$k.token"
    assert_success
    slot=$(ccli cluster keyslot "rlock:{$k}" | tr -d '\r')
    assert_equal "$(ccli cluster keyslot "rlock:{$k}:fence" | tr -d '\r')" "$slot"
    assert_equal "$(ccli cluster keyslot "rlock:{$k}:info" | tr -d '\r')" "$slot"
    p=$(cluster_port_of "rlock:{$k}")
    # All three on that node, looked up without following redirections.
    assert_equal "$(srv_cli "$p" exists "rlock:{$k}" "rlock:{$k}:fence" "rlock:{$k}:info" | tr -d '\r')" 3
  done
}

@test "one lock, many nodes: a lock taken through one node is busy through the others" {
  run --separate-stderr rlock acquire bravo --token-file "$T/token"
  assert_success
  local p
  for p in $CLUSTER_PORTS; do
    run --separate-stderr rlock run bravo -n -u "redis://127.0.0.1:$p" -- touch "$T/ran"
    assert_failure 75
    run --separate-stderr rlock status bravo -u "redis://127.0.0.1:$p"
    assert_success
  done
  assert_file_not_exist "$T/ran"
  run --separate-stderr rlock release bravo -u "redis://127.0.0.1:$P3" --token-file "$T/token"
  assert_success
  clock_free bravo
}

@test "run renews on the owning node for longer than the TTL" {
  local k
  # (Without renewals each lease would end 300ms before its child: the run would exit 76.)
  for k in alpha charlie golf; do
    bg "run_$k" rlock run "$k" -t 900ms -- sleep 1.2
  done
  for k in alpha charlie golf; do
    wait_until clock_held "$k"
  done
  for k in alpha charlie golf; do
    bg_wait "run_$k" 10
    assert_equal "$BG_STATUS" 0
    [[ $(bg_err "run_$k") != *lost* ]] || fail "$k was lost: $(bg_err "run_$k")"
    clock_free "$k"
  done
}

@test "lock names with braces keep all their keys in one slot (or are refused clearly)" {
  local k
  for k in '}' '{' '{}' 'a}b' '}x{' 'a{b}c' '{tag}name' 'x{}'; do
    run --separate-stderr rlock run "$k" -- sh -c 'echo "$RLOCK_KEY"'
    if [[ $status == 64 ]]; then
      assert_error_exit 64
      continue
    fi
    [[ $stderr != *CROSSSLOT* ]] || fail "key '$k': $stderr"
    assert_success
    assert_output "$k"
    run --separate-stderr rlock acquire "$k" --token-file "$T/token"
    assert_success
    run --separate-stderr rlock status "$k"
    assert_success
    run --separate-stderr rlock release "$k" --token-file "$T/token"
    assert_success
  done
}

@test "a URL of a node that is not there is 69, never 75" {
  run --separate-stderr rlock run alpha -u "redis://127.0.0.1:$(free_port)" -- touch "$T/ran"
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
}

# migration_begin KEY: marks the slot of lock KEY as migrating from its node (SRC) to another
# (DST); sets SLOT, SRC, DST, SRC_ID, DST_ID.
migration_begin() {
  SLOT=$(ccli cluster keyslot "rlock:{$1}" | tr -d '\r')
  SRC=$(cluster_port_of "rlock:{$1}")
  for DST in $CLUSTER_PORTS; do
    [[ $DST != "$SRC" ]] && break
  done
  SRC_ID=$(srv_cli "$SRC" cluster myid | tr -d '\r')
  DST_ID=$(srv_cli "$DST" cluster myid | tr -d '\r')
  [[ $(srv_cli "$DST" cluster setslot "$SLOT" importing "$SRC_ID" | tr -d '\r') == OK ]] || return 1
  [[ $(srv_cli "$SRC" cluster setslot "$SLOT" migrating "$DST_ID" | tr -d '\r') == OK ]] || return 1
}

# migration_end: the slot of migration_begin now belongs to DST, on every node.
migration_end() {
  local p
  srv_cli "$DST" cluster setslot "$SLOT" node "$DST_ID" >/dev/null
  srv_cli "$SRC" cluster setslot "$SLOT" node "$DST_ID" >/dev/null
  for p in $CLUSTER_PORTS; do
    srv_cli "$p" cluster setslot "$SLOT" node "$DST_ID" >/dev/null 2>&1 || true
  done
  wait_until -t 10 cluster_ready
}

# How many TRYAGAIN errors the node on port $1 has answered.
tryagain_count() {
  local n
  n=$(srv_cli "$1" info errorstats 2>/dev/null | tr -d '\r' | sed -n 's/^errorstat_TRYAGAIN:count=//p')
  echo "${n:-0}"
}

@test "ASK during a slot migration: status follows the lock's keys; extend and release wait it out" {
  local k=moving-lock before
  run --separate-stderr rlock acquire "$k" -t 30s --token-file "$T/token"
  assert_success
  migration_begin "$k" || fail "could not start migrating the slot"
  # The lock's keys move; the slot is still the source's, which now answers ASK for them.
  run srv_cli "$SRC" migrate 127.0.0.1 "$DST" "" 0 5000 keys "rlock:{$k}" "rlock:{$k}:fence" "rlock:{$k}:info"
  [[ $output == OK* ]] || {
    migration_end
    fail "MIGRATE failed: $output"
  }
  # status reads one key per command: each follows its ASK.
  run --separate-stderr rlock status "$k"
  local status_status=$status status_err=$stderr
  # A script declares every key of the lock; with some on each side (or never created), Redis
  # answers TRYAGAIN until the slot has moved. extend and release retry within --io-timeout.
  before=$(($(tryagain_count "$SRC") + $(tryagain_count "$DST")))
  bg ext rlock extend "$k" --token-file "$T/token" --io-timeout 10s
  if ! wait_until -t 5 eval '(($(tryagain_count "$SRC") + $(tryagain_count "$DST") > before))'; then
    migration_end
    fail "extend never met TRYAGAIN: $(bg_err ext)"
  fi
  migration_end || fail "the cluster did not settle after the migration"
  bg_wait ext 15
  [[ $status_status == 0 ]] || fail "status during the migration: $status_status $status_err"
  [[ $BG_STATUS == 0 ]] || fail "extend across the migration: $BG_STATUS $(bg_err ext)"
  run --separate-stderr rlock release "$k" --token-file "$T/token"
  [[ $status == 0 ]] || fail "release after the migration: $status $stderr"
  clock_free "$k"
}

@test "TRYAGAIN (a new lock in a slot being migrated) is retried until the migration ends" {
  local k=new-lock-in-moving-slot before
  migration_begin "$k" || fail "could not start migrating the slot"
  before=$(($(tryagain_count "$SRC") + $(tryagain_count "$DST")))
  bg acq rlock acquire "$k" -w 10s --token-file "$T/token"
  # Redis answers TRYAGAIN to a script on several keys of which some are missing while the slot
  # moves; once rlock was told so, the migration ends.
  if ! wait_until -t 5 eval '(($(tryagain_count "$SRC") + $(tryagain_count "$DST") > before))'; then
    migration_end
    fail "rlock never met TRYAGAIN: $(bg_err acq)"
  fi
  migration_end || fail "the cluster did not settle after the migration"
  bg_wait acq 15
  [[ $BG_STATUS == 0 ]] || fail "acquire exited $BG_STATUS: $(bg_err acq)"
  clock_held "$k"
  assert_equal "$(cluster_port_of "rlock:{$k}")" "$DST"
  run --separate-stderr rlock release "$k" --token-file "$T/token"
  assert_success
}
