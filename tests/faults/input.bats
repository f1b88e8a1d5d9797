#!/usr/bin/env bats
# Input that must not get through: closed standard descriptors (a socket must never become
# stdout or stderr), keys that are not UTF-8, options after the command word, numbers too large
# for any duration, and a re-entrancy hold copied out of the process tree that owns it.

load ../helpers/common
load helpers/faults

setup() {
  faults_setup
  redis_start
}

teardown() {
  common_teardown
}

# A user name that is also a Redis inline command, should rlock's output reach a Redis socket.
INJECT=$'x\r\nSET pwned yes\r\n'

assert_not_pwned() {
  local v
  v=$(rcli get pwned)
  [[ -z $v ]] || fail "Redis ran a command from rlock's output ($1): pwned=$v"
}

# --- closed standard descriptors ---------------------------------------------------------------

@test "acquire with stdout closed: exit 64, one error, and the lock is not held" {
  run --separate-stderr bash -c 'rlock acquire k -t 60s >&-'
  [[ $status == 64 ]] || fail "expected 64, got $status; stderr: '$stderr'"
  (($(count_error_lines "$stderr") == 1)) || fail "expected one 'rlock: error:' line: '$stderr'"
  assert lock_free k
  assert_not_pwned "acquire >&-"
}

@test "list with stdout closed does not write into the Redis connection" {
  USER=$INJECT LOGNAME=$INJECT rlock acquire k -t 60s >/dev/null
  USER=$INJECT LOGNAME=$INJECT run --separate-stderr bash -c 'rlock list >&-'
  assert_not_pwned "list >&-"
}

@test "status KEY with stdout closed does not write into the Redis connection" {
  USER=$INJECT LOGNAME=$INJECT rlock acquire k -t 60s >/dev/null
  USER=$INJECT LOGNAME=$INJECT run --separate-stderr bash -c 'rlock status k >&-'
  assert_not_pwned "status k >&-"
}

@test "status without a key, with stdout closed, does not write into the Redis connection" {
  USER=$INJECT LOGNAME=$INJECT rlock acquire k -t 60s >/dev/null
  USER=$INJECT LOGNAME=$INJECT run --separate-stderr bash -c 'rlock status >&-'
  assert_not_pwned "status >&-"
}

@test "run -v with stderr closed, waiting on a holder whose command is an inline command" {
  bg holder rlock run k -t 3s -- sh -c 'touch "$0"; while [ ! -e "$0.go" ]; do sleep 0.02; done' "$T/started" "$INJECT"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  USER=$INJECT LOGNAME=$INJECT bg waiter bash -c 'rlock run -v k -w 20 -- true 2>&-'
  # The holder ends once the waiter waits (queued).
  wait_until eval '[[ $(rcli zcard "$(lock_key k):q") == 1 ]]' || fail "the waiter did not queue: $(bg_err waiter)"
  touch "$T/started.go"
  bg_wait waiter 20
  assert_equal "$BG_STATUS" 0
  assert_not_pwned "run -v 2>&-"
}

@test "run with stderr or stdin closed still works" {
  run bash -c 'rlock run k -- true 2>&-'
  assert_success
  run bash -c 'rlock run k -- sh -c "echo ran" <&-'
  assert_success
  assert_output ran
  run bash -c 'rlock run k -- sh -c "exit 3" 2>&- <&-'
  assert_failure 3
  assert lock_free k
}

# --- keys that are not UTF-8 ---------------------------------------------------------------------

@test "a KEY that is not valid UTF-8 is a usage error (64) for run, acquire and status" {
  run --separate-stderr rlock run $'k\xff' -- touch "$T/ran"
  assert_usage_error
  assert_file_not_exists "$T/ran"
  run --separate-stderr rlock acquire $'\xff\xfe'
  assert_usage_error
  run --separate-stderr rlock status $'k\xc3('
  assert_usage_error
  assert_equal "$(rcli dbsize)" 0
}

# --- options after the command word ---------------------------------------------------------------

@test "without --, options after the command word are the command's" {
  run --separate-stderr rlock run k printf '%s\n' -n
  assert_success
  assert_output -- -n
  run --separate-stderr rlock run k echo -t 5
  assert_success
  assert_output -- "-t 5"
}

@test "without --, -t after the command word does not change the lock's TTL" {
  run --separate-stderr rlock run k sh -c 'echo "$*"; redis-cli -p "$REDIS_PORT" pttl "rlock:{k}"' sh -t 5
  assert_success
  assert_line --index 0 -- "-t 5"
  local pttl=${lines[1]}
  [[ $pttl =~ ^[0-9]+$ ]] && ((pttl > 25000 && pttl <= 30000)) ||
    fail "PTTL $pttl: the default TTL (30s) should hold, not 5s"
}

@test "global options before the subcommand" {
  run --separate-stderr rlock -v -u "redis://127.0.0.1:$REDIS_PORT" run k -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{k}"'
  assert_success
  assert_output 1
}

# --- numbers too large ----------------------------------------------------------------------------

@test "a duration of 1 followed by 400 zeros is a usage error (64), for every duration option" {
  local huge o
  huge=1$(printf '0%.0s' {1..400})
  for o in -t -w --kill-after --max-hold --timeout --io-timeout --connect-timeout; do
    run --separate-stderr rlock run k "$o" "$huge" -- touch "$T/ran"
    [[ $status == 64 ]] || fail "$o 1e400 exited $status (expected 64): '$stderr'"
    assert_usage_error
  done
  assert_file_not_exists "$T/ran"
  run --separate-stderr rlock acquire k -t "$huge"
  assert_usage_error
  assert lock_free k
}

# --- extend without -t -----------------------------------------------------------------------------

@test "extend without -t renews for the lease's own TTL (10m), not 30s" {
  acquire_token k -t 10m
  RLOCK_TOKEN=$TOKEN run --separate-stderr rlock extend k
  assert_success
  local pttl
  pttl=$(rcli pttl "$(lock_key k)")
  ((pttl > 500000)) || fail "PTTL $pttl after extend without -t of a 10m lease"
}

@test "extend without -t of a short lease keeps it short" {
  acquire_token k -t 5s
  RLOCK_TOKEN=$TOKEN run --separate-stderr rlock extend k
  assert_success
  local pttl
  pttl=$(rcli pttl "$(lock_key k)")
  ((pttl > 1000 && pttl <= 5000)) || fail "PTTL $pttl after extend without -t of a 5s lease"
}

# --- re-entrancy from outside the tree ------------------------------------------------------------

@test "RLOCK_HELD copied out of the holding tree does not re-enter" {
  bg holder rlock run A -- sh -c 'printf "%s" "$RLOCK_HELD" > "$0.tmp"; mv "$0.tmp" "$0"; while [ ! -e "$0.go" ]; do sleep 0.05; done' "$T/held"
  wait_until test -e "$T/held" || fail "the holder did not start: $(bg_err holder)"
  [[ -s $T/held ]] || fail "the child saw no RLOCK_HELD"
  RLOCK_HELD=$(cat "$T/held") run --separate-stderr rlock run A -n -- touch "$T/ran"
  [[ $status == 75 ]] || fail "a process outside the tree with a copied RLOCK_HELD got exit $status (expected 75)"
  assert_file_not_exists "$T/ran"
  RLOCK_HELD=$(cat "$T/held") run --separate-stderr rlock acquire A -n
  [[ $status == 75 ]] || fail "acquire outside the tree with a copied RLOCK_HELD got exit $status (expected 75): $output"
  touch "$T/held.go"
  bg_wait holder
  assert_equal "$BG_STATUS" 0
  assert lock_free A
}

@test "a nested run inside the holding tree still re-enters at once" {
  run timeout 20 rlock run A -- sh -c 'rlock run A -n -- sh -c "echo inner"; echo "rc=$?"'
  assert_success
  assert_line inner
  assert_line rc=0
}

@test "acquire inside run A on db0 and run A on db1 prints the db1 lock's token" {
  local url1="redis://127.0.0.1:$REDIS_PORT/1"
  run --separate-stderr timeout 20 rlock run A -- rlock run A -u "$url1" -- sh -c \
    'rlock acquire A -u "$0"; redis-cli -p "$REDIS_PORT" -n 1 get "rlock:{A}"' "$url1"
  assert_success
  [[ ${#lines[@]} == 2 ]] || fail "expected the token and the db1 value: '$output' (stderr: '$stderr')"
  [[ ${lines[0]} =~ $TOKEN_RE ]] || fail "acquire printed '${lines[0]}', not a token"
  assert_equal "${lines[0]}" "${lines[1]}"
}
