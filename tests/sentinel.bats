#!/usr/bin/env bats
# Redis Sentinel: redis+sentinel:// URLs find the master through the sentinels; errors when the
# master is unknown or no sentinel answers; and a forced failover during `run` never leaves two
# holders at once.
#
# The tests that change nothing of the set-up share one master, replica and sentinels; those that
# stop servers or fail over start their own (a failover changes who is master), and the failover
# test has holders of three locks pay the same failover.

load helpers/common
load helpers/servers

# One master, replica and 3 sentinels for the tests that change nothing of them (their ports in
# SHARED_*); the tests that stop servers or fail over start their own (topology_start).
setup_file() {
  repl_start
  sentinels_start 3
  export SHARED_MASTER_PORT=$MASTER_PORT SHARED_REPLICA_PORT=$REPLICA_PORT SHARED_SENTINEL_URL=$SENTINEL_URL
  export SHARED_SENTINEL_PORTS=$SENTINEL_PORTS
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
}

teardown() {
  common_teardown
}

# topology_start: master, replica and 3 sentinels of the test's own; RLOCK_URL is the sentinel URL.
topology_start() {
  repl_start
  sentinels_start 3
  export RLOCK_URL=$SENTINEL_URL
}

# shared_topology: the file's master, replica and sentinels, the master emptied; RLOCK_URL is the
# sentinel URL.
shared_topology() {
  export MASTER_PORT=$SHARED_MASTER_PORT REPLICA_PORT=$SHARED_REPLICA_PORT SENTINEL_URL=$SHARED_SENTINEL_URL
  export SENTINEL_PORTS=$SHARED_SENTINEL_PORTS
  srv_cli "$MASTER_PORT" flushall >/dev/null || fail "could not empty the master"
  export RLOCK_URL=$SENTINEL_URL
}

# Whether lock $1's key is (lock_on) or is not (lock_off) on the server on port $2 (db $3,
# default 0).
lock_on() {
  [[ $(srv_cli "$2" -n "${3:-0}" exists "$(lock_key "$1")" 2>/dev/null | tr -d '\r') == 1 ]]
}
lock_off() {
  [[ $(srv_cli "$2" -n "${3:-0}" exists "$(lock_key "$1")" 2>/dev/null | tr -d '\r') == 0 ]]
}

@test "run, acquire, status, list and release through the sentinels; the lock is on the master" {
  shared_topology
  run --separate-stderr rlock run k -- sh -c 'echo "held $RLOCK_KEY"'
  assert_success
  assert_output "held k"
  assert_equal "$stderr" ""

  run --separate-stderr rlock acquire k --token-file "$T/token"
  assert_success
  lock_on k "$MASTER_PORT"
  # Written on the master, replicated to the replica.
  wait_until lock_on k "$REPLICA_PORT"
  run --separate-stderr rlock status k
  assert_success
  [[ $output == *k* ]]
  run --separate-stderr rlock list
  assert_success
  [[ $output == *k* ]]
  run --separate-stderr rlock run k -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exist "$T/ran"
  run --separate-stderr rlock extend k --token-file "$T/token"
  assert_success
  run --separate-stderr rlock release k --token-file "$T/token"
  assert_success
  lock_off k "$MASTER_PORT"
  run --separate-stderr rlock status k
  assert_failure 1
}

@test "the database in the URL (redis+sentinel://.../mymaster/3) is used" {
  shared_topology
  run --separate-stderr rlock acquire k -u "$SENTINEL_URL/3" --token-file "$T/token"
  assert_success
  lock_on k "$MASTER_PORT" 3
  lock_off k "$MASTER_PORT" 0
  run --separate-stderr rlock release k -u "$SENTINEL_URL/3" --token-file "$T/token"
  assert_success
}

@test "a sentinel that is down is outvoted by the others; without a majority the master is not trusted" {
  shared_topology
  local down1 down2 live1 live2
  down1=$(free_port)
  down2=$(free_port)
  read -r live1 live2 _ <<<"$SENTINEL_PORTS"
  run --separate-stderr rlock run k -u "redis+sentinel://127.0.0.1:$down1,127.0.0.1:$live1,127.0.0.1:$live2/mymaster" \
    -- echo ran
  assert_success
  assert_output ran
  # One of three answering is no majority: a client cut off with a minority of the sentinels
  # (and perhaps an old master) must not take or keep locks there.
  run --separate-stderr rlock run k -u "redis+sentinel://127.0.0.1:$down1,127.0.0.1:$down2,127.0.0.1:$live1/mymaster" \
    -- echo ran
  assert_failure 69
  assert_output ""
  [[ $stderr == *"only 1 of the 3 sentinels agree"* ]] || fail "no word of the missing majority: $stderr"
}

@test "a master name the sentinels do not know is 69, naming the master" {
  shared_topology
  local hosts=${SENTINEL_URL#redis+sentinel://}
  hosts=${hosts%/mymaster}
  run --separate-stderr rlock run k -u "redis+sentinel://$hosts/nosuchmaster" -- touch "$T/ran"
  assert_error_exit 69
  [[ $stderr == *nosuchmaster* ]] || fail "the error does not name the master: '$stderr'"
  assert_file_not_exist "$T/ran"
  run --separate-stderr rlock status k -u "redis+sentinel://$hosts/nosuchmaster"
  assert_error_exit 69
}

@test "no sentinel answering is 69 within the timeouts, never 75" {
  local p1 p2 t0 took
  p1=$(free_port)
  p2=$(free_port)
  t0=$(now_ms)
  run --separate-stderr rlock run k -n --connect-timeout 500ms \
    -u "redis+sentinel://127.0.0.1:$p1,127.0.0.1:$p2/mymaster" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  grep -qi 'sentinel' <<<"$stderr" || fail "the error does not say the sentinels failed: '$stderr'"
  assert_file_not_exist "$T/ran"
  ((took < 3000)) || fail "took ${took}ms"
  local cmd
  for cmd in "acquire k" "status k" "list"; do
    run --separate-stderr rlock $cmd -u "redis+sentinel://127.0.0.1:$p1/mymaster"
    assert_error_exit 69
  done
}

@test "all sentinels of a running set-up stopped: 69" {
  topology_start
  local p
  for p in $SENTINEL_PIDS; do
    srv_kill "$p"
  done
  run --separate-stderr rlock run k -- touch "$T/ran"
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
  lock_off k "$MASTER_PORT"
}

@test "a redis+sentinel:// URL naming a plain Redis (not a sentinel) is 69" {
  redis_start
  run --separate-stderr rlock run k -u "redis+sentinel://127.0.0.1:$REDIS_PORT/mymaster" -- touch "$T/ran"
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
  lock_free k
}

@test "a master with a password: from the URL or REDISCLI_AUTH; sentinels are asked without it" {
  SRV_PASS=sent-s3cret
  repl_start
  sentinels_start 3
  local hosts=${SENTINEL_URL#redis+sentinel://}
  REDISCLI_AUTH=sent-s3cret run --separate-stderr rlock run k -u "$SENTINEL_URL" -- echo ran
  assert_success
  assert_output ran
  RLOCK_URL="redis+sentinel://:sent-s3cret@$hosts" run --separate-stderr rlock run k -- echo ran
  assert_success
  assert_equal "$stderr" ""
  run --separate-stderr rlock run k -u "$SENTINEL_URL" -- touch "$T/ran"
  assert_error_exit 77
  REDISCLI_AUTH=wrong-pass run --separate-stderr rlock run k -v -u "$SENTINEL_URL" -- touch "$T/ran"
  assert_error_exit 77
  [[ $stderr != *wrong-pass* ]] || fail "the password shows on stderr: '$stderr'"
  assert_file_not_exist "$T/ran"
}

# The child of the first run: records its token, start and stop in $1 (the stop marked
# "signalled" when rlock stopped it), and runs until the file $2 exists (30s at most).
write_holder_a() {
  cat >"$T/holder-a.sh" <<'EOF'
f=$1 go=$2
echo "$RLOCK_TOKEN" >"$f.token"
echo "start A $(date +%s%3N)" >>"$f"
trap 'echo "stop A $(date +%s%3N) signalled" >>"$f"; exit 143' TERM INT HUP
n=0
while [ ! -e "$go" ] && [ "$n" -lt 300 ]; do
  sleep 0.1 &
  wait
  n=$((n + 1))
done
echo "stop A $(date +%s%3N)" >>"$f"
EOF
}

# A loop that tries `rlock run k -n` until $T/stop-b exists, recording each critical section.
write_contender_b() {
  cat >"$T/contender-b.sh" <<'EOF'
f=$1 stop=$2
while [ ! -e "$stop" ]; do
  rlock run k -n --connect-timeout 500ms --io-timeout 1s -- \
    sh -c 'echo "start B $(date +%s%3N)" >>"$1"; sleep 0.1; echo "stop B $(date +%s%3N)" >>"$1"' b "$f"
  echo "$?" >>"$f.rcs"
  sleep 0.1
done
EOF
}

# How many renewals the first run (bg a, -v) has made.
a_renewals() { grep -c 'renewed k ' "$T/a.err" || true; }

# One SENTINEL FAILOVER, three holders:
#   j: a lock taken by acquire before the failover; status and release find it on the new master.
#   k: a run (A) across the failover, with a contender (B) trying k all along: A keeps or loses
#      its lock, and there are never two holders.
#   m: a run (M) whose lock is missing on the new master after the failover (asynchronous
#      replication can lose the write; here deleted there): M stops its child and exits 76.
@test "across SENTINEL FAILOVER: acquire's lock is found on the new master; a run keeps or loses its lock, never two holders; a lock missing there is lost, 76" {
  topology_start
  wait_until -t 10 sentinels_know_each_other || fail "the sentinels did not find each other"
  run --separate-stderr rlock acquire j -t 20s --token-file "$T/token"
  assert_success
  wait_until lock_on j "$REPLICA_PORT"
  write_holder_a
  write_contender_b
  local ev=$T/events evm=$T/events-m
  : >"$ev"
  : >"$evm"
  bg a rlock run k -t 3s -v -- sh "$T/holder-a.sh" "$ev" "$T/a-go"
  bg m rlock run m -t 3s -v -- sh "$T/holder-a.sh" "$evm" "$T/m-go"
  wait_until grep -q '^start A' "$ev" || fail "A did not start: $(bg_err a)"
  wait_until grep -q '^start A' "$evm" || fail "M did not start: $(bg_err m)"
  local token
  token=$(cat "$ev.token")
  bg b sh "$T/contender-b.sh" "$ev" "$T/stop-b"
  wait_until test -s "$ev.rcs" || fail "the contender did not try"

  assert_equal "$(scli "${SENTINEL_PORTS%% *}" sentinel failover mymaster | tr -d '\r')" OK
  # While A runs: does the new master hold A's token (A kept its lock there)? Once the new
  # master is one, M's lock is deleted there. A's child ends once A renewed twice since all the
  # sentinels named the new master (so at least one renewal was sent after they did, and went
  # there) and M ended; or when A's lock is lost.
  local seen_on_new=0 switched=0 a_end="" m_t0="" renewed_at_switch=0
  while ! bg_done a; do
    if ((!switched)) && sentinels_agree_on "$REPLICA_PORT"; then
      switched=1
      renewed_at_switch=$(a_renewals)
    fi
    if ((switched)) && [[ -z $m_t0 ]] && role_is "$REPLICA_PORT" master; then
      srv_cli "$REPLICA_PORT" del "$(lock_key m)" "$(lock_key m):info" >/dev/null
      m_t0=$(now_ms)
    fi
    if ((switched)) && ! grep -q '^stop A' "$ev" &&
      [[ $(srv_cli "$REPLICA_PORT" get "$(lock_key k)" 2>/dev/null | tr -d '\r') == "$token" ]]; then
      seen_on_new=1
    fi
    if ((seen_on_new)) && [[ -n $m_t0 ]] && bg_done m &&
      (($(a_renewals) >= renewed_at_switch + 2)); then
      touch "$T/a-go"
    fi
    sleep 0.05
  done
  a_end=$(now_ms)
  bg_wait a 1
  local a_status=$BG_STATUS
  touch "$T/stop-b"
  bg_wait b 10
  ((switched)) || sentinels_agree_on "$REPLICA_PORT" || fail "the failover did not happen"

  # Never two holders: every B section started after A's child had stopped.
  local start_a stop_a
  start_a=$(sed -n 's/^start A //p' "$ev")
  stop_a=$(sed -n 's/^stop A \([0-9]*\).*/\1/p' "$ev" | head -n 1)
  [[ -n $stop_a ]] || stop_a=$a_end
  local s
  for s in $(sed -n 's/^start B //p' "$ev"); do
    ((s > stop_a)) || fail "B entered at $s while A held the lock ($start_a-$stop_a): $(cat "$ev"); A: $(bg_err a)"
  done

  echo "# the first run exited $a_status (0: kept the lock, 76: lost it)" >&3
  case $a_status in
    0)
      # Kept: the child ran until it was told to end, renewing on the new master.
      grep -q '^stop A' "$ev"
      ! grep -q '^stop A .*signalled' "$ev" || fail "A exited 0 but its child was stopped: $(cat "$ev")"
      [[ -e $T/a-go ]] || fail "A's child ended before it was told to: $(cat "$ev")"
      ((seen_on_new)) || fail "A kept its lock but it was never on the new master: $(bg_err a)"
      ;;
    76)
      # Lost: the child was stopped, and rlock said so.
      grep -qi 'lost' <<<"$(bg_err a)" || fail "exit 76 without saying the lock was lost: $(bg_err a)"
      ;;
    *)
      fail "A exited $a_status (expected 0 or 76): $(bg_err a)"
      ;;
  esac
  # A released (or lost) the lock: it can be taken again through the sentinels.
  wait_until -t 5 rlock run k -n -- true || fail "the lock is still held after A ended"

  # M, its lock missing on the new master: its child stopped early, 76, and said so.
  [[ -n $m_t0 ]] || fail "the replica was not promoted while A ran"
  bg_wait m 10
  [[ $BG_STATUS == 76 ]] || fail "M: expected 76, got $BG_STATUS: $(bg_err m)"
  grep -q '^stop A .*signalled' "$evm" || fail "M's child was not stopped: $(cat "$evm")"
  stop_a=$(sed -n 's/^stop A \([0-9]*\).*/\1/p' "$evm")
  echo "# M's child stopped $((stop_a - m_t0))ms after its lock was deleted" >&3
  grep -qi 'lost' <<<"$(bg_err m)" || fail "rlock did not say M's lock was lost: $(bg_err m)"

  # j, taken before the failover: status and release find it on the new master.
  run --separate-stderr rlock status j
  assert_success
  run --separate-stderr rlock release j --token-file "$T/token"
  assert_success
  lock_off j "$REPLICA_PORT"
}
