#!/usr/bin/env bats
# --wait-replicas N / --wait-timeout D on run and acquire: after taking the lock, WAIT until N
# replicas have it; with fewer acknowledgements in time the lock is given back and rlock exits 69.
#
# Each test has a master and one replica (helpers/servers: repl_start).

load helpers/common
load helpers/servers

setup() {
  common_setup
  repl_start
  # rcli and lock_held/lock_free look at the master.
  export REDIS_PORT=$MASTER_PORT
  export RLOCK_URL="redis://127.0.0.1:$MASTER_PORT"
}

teardown() {
  # The replica may have been stopped with SIGSTOP; SIGKILL ends it either way.
  common_teardown
}

on_replica() {
  [[ $(srv_cli "$REPLICA_PORT" exists "$(lock_key "$1")" 2>/dev/null | tr -d '\r') == 1 ]]
}

@test "--wait-replicas 1 with one replica: run and acquire succeed, the replica has the lock at once" {
  run --separate-stderr rlock run k --wait-replicas 1 -- sh -c 'echo "$RLOCK_KEY"'
  assert_success
  assert_output k
  run --separate-stderr rlock acquire k --wait-replicas 1 --token-file "$T/token"
  assert_success
  # WAIT returned: the replica acknowledged the write, so it has the key now (no polling).
  on_replica k
  run --separate-stderr rlock release k --token-file "$T/token"
  assert_success
  run --separate-stderr rlock run k --wait-replicas 1 --wait-timeout 5s -- true
  assert_success
}

@test "--wait-replicas 0 is the same as without it" {
  run --separate-stderr rlock run k --wait-replicas 0 -- echo ran
  assert_success
  assert_output ran
}

# Two runs wait for more replicas than there are, at once (locks k and d): one with
# --wait-timeout 500ms, one with the default timeout, 1s.
@test "more replicas than there are: 69 after --wait-timeout (500ms; by default 1s), the lock given back, the child not run" {
  local t0 took t1
  t1=$(now_ms)
  bg default rlock run d --wait-replicas 2 -- touch "$T/ran-d"
  t0=$(now_ms)
  run --separate-stderr rlock run k --wait-replicas 2 --wait-timeout 500ms -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  grep -qi 'replica' <<<"$stderr" || fail "the error does not mention replicas: '$stderr'"
  assert_file_not_exist "$T/ran"
  lock_free k
  ((took >= 450 && took < 2000)) || fail "took ${took}ms, expected about 500ms"
  # The default --wait-timeout: 1s.
  bg_wait default 10
  took=$(elapsed_ms "$t1")
  [[ $BG_STATUS == 69 ]] || fail "the default timeout: expected 69, got $BG_STATUS: $(bg_err default)"
  [[ $(count_rlock_errors "$(bg_err default)") == 1 ]] || fail "expected one error line: $(bg_err default)"
  assert_equal "$(bg_out default)" ""
  assert_file_not_exist "$T/ran-d"
  lock_free d
  ((took >= 950 && took < 2500)) || fail "took ${took}ms, expected about 1s"
}

# count_rlock_errors TEXT: how many lines of TEXT start with "rlock: error: ".
count_rlock_errors() {
  grep -c '^rlock: error: ' <<<"$1" || true
}

# Two acquisitions at once (locks k and j): one that would print its token, one that would write it.
@test "acquire with too few replicas: 69 saying how many acknowledged, no token printed or written, the lock given back" {
  bg tofile rlock acquire j --wait-replicas 2 --wait-timeout 300ms --token-file "$T/token"
  local t0 took
  t0=$(now_ms)
  run --separate-stderr rlock acquire k --wait-replicas 2 --wait-timeout 300ms
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  # (The one replica may not acknowledge within 300ms on a loaded machine: 0 or 1.)
  [[ $stderr =~ "only "[01]" of 2 replicas acknowledged rlock:{k} within 300ms" ]] || fail "$stderr"
  ((took >= 250 && took < 2000)) || fail "took ${took}ms, expected about 300ms"
  lock_free k
  bg_wait tofile 10
  assert_equal "$BG_STATUS" 69
  assert_equal "$(bg_out tofile)" ""
  [[ $(count_rlock_errors "$(bg_err tofile)") == 1 ]] || fail "expected one error line: $(bg_err tofile)"
  assert_file_not_exist "$T/token"
  lock_free j
}

@test "a replica that does not answer (SIGSTOP): 69 within the wait timeout, the lock given back" {
  kill -STOP "$REPLICA_PID"
  local t0 took
  t0=$(now_ms)
  run --separate-stderr rlock run k --wait-replicas 1 --wait-timeout 300ms -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  kill -CONT "$REPLICA_PID"
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
  lock_free k
  ((took >= 250 && took < 1500)) || fail "took ${took}ms, expected about 300ms"
  # The replica is back: the same works again.
  wait_until -t 10 replica_in_sync "$REPLICA_PORT"
  run --separate-stderr rlock run k --wait-replicas 1 --wait-timeout 5s -- true
  assert_success
}

@test "a busy lock is still busy (75) with --wait-replicas, and the holder keeps it" {
  run --separate-stderr rlock acquire k --token-file "$T/token"
  assert_success
  run --separate-stderr rlock run k -n --wait-replicas 2 --wait-timeout 200ms -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exist "$T/ran"
  lock_held k
  run --separate-stderr rlock release k --token-file "$T/token"
  assert_success
}

# The variables and the config file at once (locks j and k).
@test "RLOCK_WAIT_REPLICAS and the config file set it too" {
  RLOCK_WAIT_REPLICAS=2 RLOCK_WAIT_TIMEOUT=200ms bg env rlock run j -- touch "$T/ran-j"
  printf 'wait-replicas = 2\nwait-timeout = "200ms"\n' >"$T/rlock.toml"
  run --separate-stderr rlock run k --config "$T/rlock.toml" -- touch "$T/ran"
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
  bg_wait env 10
  assert_equal "$BG_STATUS" 69
  assert_equal "$(bg_out env)" ""
  [[ $(count_rlock_errors "$(bg_err env)") == 1 ]] || fail "expected one error line: $(bg_err env)"
  assert_file_not_exist "$T/ran-j"
  # The command line wins (a loaded machine may take longer than 200ms to acknowledge).
  run --separate-stderr rlock run k --config "$T/rlock.toml" --wait-replicas 1 --wait-timeout 10s -- true
  assert_success
}

@test "bad --wait-replicas and --wait-timeout values are usage errors (64)" {
  local bad
  for bad in -1 x 1.5 ""; do
    run --separate-stderr rlock run k --wait-replicas "$bad" -- touch "$T/ran"
    assert_usage_error
  done
  for bad in x -1s 1parsec; do
    run --separate-stderr rlock run k --wait-replicas 1 --wait-timeout "$bad" -- touch "$T/ran"
    assert_usage_error
  done
  assert_file_not_exist "$T/ran"
}
