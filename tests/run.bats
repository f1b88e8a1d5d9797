#!/usr/bin/env bats
# rlock run: the child's status, environment and stdin, holding and releasing, conflicts and
# waiting, signals, renewals and --max-hold.
#
# The tests tagged "scripts" run again with the scripts run by EVALSHA (bats.run.evalsha): each
# step of a run that calls a script (taking, busy, waiting and woken, renewing, releasing, the
# release after a stop). The others check the run loop and the child, the same either way.

load helpers/common

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# A child that says it started, then waits until the test creates $T/go.
wait_for_go() {
  printf 'touch "%s/started"; while [ ! -e "%s/go" ]; do sleep 0.05; done' "$T" "$T"
}

# --- the child's status ------------------------------------------------------------------------

# bats test_tags=scripts
@test "the child's exit status passes through" {
  run rlock run k -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{k}"'
  assert_success
  assert_output 1
  run rlock run k -- sh -c 'exit 3'
  assert_failure 3
  run rlock run k -- sh -c 'exit 42'
  assert_failure 42
  run rlock run k -- false
  assert_failure 1
}

@test "-c runs a shell command and its status passes through" {
  run rlock run k -c 'exit 7'
  assert_failure 7
  run rlock run k -c 'echo "a b" | tr a-z A-Z'
  assert_success
  assert_output "A B"
}

@test "the child's arguments are passed as they are" {
  run rlock run k -- printf '[%s]\n' 'a b' '' '*' '-n' '--'
  assert_success
  assert_output $'[a b]\n[]\n[*]\n[-n]\n[--]'
}

@test "stdin, stdout and stderr are the child's" {
  run bash -c 'echo hi | rlock run k -- cat'
  assert_success
  assert_output hi
  run --separate-stderr rlock run k -- sh -c 'echo out; echo err >&2'
  assert_success
  assert_equal "$output" out
  assert_equal "$stderr" err
}

@test "the child's death by a signal is 128+N" {
  run rlock run k -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{k}" > "$0"; kill -KILL $$' "$T/held"
  assert_failure 137
  assert_equal "$(cat "$T/held")" 1
  run rlock run k -- sh -c 'kill -TERM $$'
  assert_failure 143
  assert lock_free k
}

# --- the child's environment and the data in Redis ------------------------------------------------

# bats test_tags=scripts
@test "RLOCK_KEY, RLOCK_TOKEN and RLOCK_FENCE are set and the token is the lock's value" {
  run rlock run my-key -- sh -c \
    'echo "key=$RLOCK_KEY"; echo "token=$RLOCK_TOKEN"; echo "fence=$RLOCK_FENCE"; echo "held=$(redis-cli -p "$REDIS_PORT" get "rlock:{my-key}")"'
  assert_success
  assert_line key=my-key
  local token held fence
  token=$(printf '%s\n' "$output" | sed -n 's/^token=//p')
  held=$(printf '%s\n' "$output" | sed -n 's/^held=//p')
  fence=$(printf '%s\n' "$output" | sed -n 's/^fence=//p')
  [[ $token =~ $TOKEN_RE ]] || fail "RLOCK_TOKEN '$token' is not 128 bits of hex"
  assert_equal "$held" "$token"
  [[ $fence =~ ^[0-9]+$ ]] && ((fence >= 1)) || fail "RLOCK_FENCE '$fence' is not a positive integer"
  assert_equal "$(rcli get "$(lock_key my-key):fence")" "$fence"
}

# bats test_tags=scripts
@test "the holder info is recorded while the child runs and goes with the lock's release" {
  run rlock run k -- sh -c 'redis-cli -p "$REDIS_PORT" hgetall "rlock:{k}:info"; redis-cli -p "$REDIS_PORT" pttl "rlock:{k}:info"'
  assert_success
  assert_line host
  assert_line "$(uname -n)"
  assert_line pid
  assert_line user
  assert_line cmd
  assert_line since
  assert_line fence
  assert_line ttl
  assert_line 30000
  # the last line is the PTTL of the info hash: it outlives the lease (30s) by the history's 31
  # days, so that a holder that dies without a release is named as expired in the history
  local pttl=${lines[${#lines[@]} - 1]}
  ((pttl > 31 * 86400000 && pttl <= 31 * 86400000 + 30000)) || fail "info PTTL $pttl"
  assert key_missing "$(lock_key k):info"
}

@test "the guard is gone, its cgroup removed, when run exits" {
  # The guard tells the tree's end before it removes the tree's cgroup, so that the release need
  # not wait; run still reaps it before it exits.
  run rlock run k -- sh -c 'echo "$PPID" >"$1"' sh "$T/guard"
  assert_success
  local guard
  guard=$(cat "$T/guard")
  [[ $guard =~ ^[0-9]+$ ]] || fail "no guard pid: '$guard'"
  if [[ -e /proc/$guard ]]; then
    [[ $(cat "/proc/$guard/comm" 2>/dev/null) != "rlock guard" ]] || fail "the guard $guard outlived run"
  fi
  local mount left
  while read -r mount; do
    left=$(find "$mount" -maxdepth 8 -type d -name "rlock.$guard" 2>/dev/null | head -n 1)
    [[ -z $left ]] || fail "the guard's cgroup $left is left"
  done < <(awk '$3 == "cgroup2" { print $2 }' /proc/mounts)
}

@test "a new token for every acquisition" {
  run rlock run k -- sh -c 'echo "$RLOCK_TOKEN"'
  local first=$output
  run rlock run k -- sh -c 'echo "$RLOCK_TOKEN"'
  [[ $first =~ $TOKEN_RE && $output =~ $TOKEN_RE ]] || fail "tokens: '$first' '$output'"
  assert_not_equal "$first" "$output"
}

# bats test_tags=scripts
@test "the lock is held with the TTL while the child runs and released when it exits" {
  bg holder rlock run k -t 20s -- sh -c "$(wait_for_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  assert lock_held k
  run rcli pttl "$(lock_key k)"
  ((output > 10000 && output <= 20000)) || fail "PTTL $output with -t 20s"
  touch "$T/go"
  bg_wait holder
  assert_equal "$BG_STATUS" 0
  assert lock_free k
}

@test "the token is not on any command line" {
  bg holder rlock run k -- sh -c "$(wait_for_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  local token child
  token=$(rcli get "$(lock_key k)")
  [[ $token =~ $TOKEN_RE ]] || fail "no token in Redis: '$token'"
  child=$(child_of "$holder_pid")
  [[ -n $child ]] || fail "rlock has no child"
  ! tr '\0' ' ' <"/proc/$holder_pid/cmdline" | grep -qF "$token" || fail "the token is in rlock's argv"
  ! tr '\0' ' ' <"/proc/$child/cmdline" | grep -qF "$token" || fail "the token is in the child's argv"
  touch "$T/go"
  bg_wait holder
}

# --- conflicts and waiting --------------------------------------------------------------------

# bats test_tags=scripts
@test "-n on a held lock exits 75 without running the command, -E changes the code" {
  acquire_token k
  local token=$TOKEN
  run --separate-stderr rlock run k -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  run rlock run k -n -E 9 -- touch "$T/ran"
  assert_failure 9
  run rlock run k -w 0 -- touch "$T/ran"
  assert_failure 75
  run rlock run k -n -E 0 -- touch "$T/ran"
  assert_success
  assert_file_not_exists "$T/ran"
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
}

@test "-n on a lock held by another run exits 75" {
  bg holder rlock run k -- sh -c "$(wait_for_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  run rlock run k -n -- true
  assert_failure 75
  RLOCK_CONFLICT_EXIT_CODE=12 run rlock run k -n -- true
  assert_failure 12
  touch "$T/go"
  bg_wait holder
  assert_equal "$BG_STATUS" 0
}

# Two waits that give up, at once (on two locks, so that neither waiter sees the other).
@test "-w 1 gives up after about a second with 75; -w 500ms after about half a second (-E sets the code), and does not count itself among the waiters" {
  acquire_token k -t 60s
  acquire_token j -t 60s
  local t0 took
  t0=$(now_ms)
  bg second rlock run j -w 1 -- touch "$T/ran-j"
  # (-E changes the code of a wait that gives up too.)
  run --separate-stderr rlock run k -w 500ms -E 3 -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_failure 3
  assert_file_not_exists "$T/ran"
  ((took >= 400 && took <= 2500)) || fail "-w 500ms gave up after ${took}ms"
  [[ $stderr == *"k is held by "*"gave up after 500ms (--wait)"* ]] || fail "unexpected message: $stderr"
  [[ $stderr != *waiting* ]] || fail "the lone waiter counted itself: $stderr"
  bg_wait second 5
  took=$(elapsed_ms "$t0")
  assert_equal "$BG_STATUS" 75
  assert_file_not_exists "$T/ran-j"
  ((took >= 900 && took <= 3000)) || fail "-w 1 gave up after ${took}ms"
}

# bats test_tags=scripts
@test "-v says acquired once, with how long it waited" {
  run --separate-stderr rlock -v run k -- true
  assert_success
  assert_equal "$(grep -c 'acquired k ' <<<"$stderr")" 1
  grep -q 'acquired k (fence [0-9]*, ttl 30s)$' <<<"$stderr" || fail "no acquired line: $stderr"
  local tok
  tok=$(rlock acquire k -t 60s)
  bg waiter rlock -v run k -w 20 -- true
  # Released only once the waiter waits: its acquisition comes after waiting.
  wait_until grep -q 'waiting for k' "$T/waiter.err" || fail "the waiter does not wait: $(bg_err waiter)"
  RLOCK_TOKEN=$tok rlock release k
  bg_wait waiter 20
  assert_equal "$BG_STATUS" 0
  assert_equal "$(grep -c 'acquired k ' "$T/waiter.err")" 1
  grep -qE 'acquired k \(fence [0-9]+, ttl 30s\) after waiting [0-9.]+m?s$' "$T/waiter.err" ||
    fail "no acquired line: $(bg_err waiter)"
}

# bats test_tags=scripts
@test "a waiter gets the lock when the holder finishes" {
  bg holder rlock run k -- sh -c "$(wait_for_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  bg waiter rlock run k -w 20 -- sh -c 'echo "$RLOCK_FENCE" > "$0"' "$T/waiter-ran"
  # The waiter is waiting (queued), not running.
  wait_until eval '[[ $(rcli zcard "$(lock_key k):q") == 1 ]] || bg_done waiter'
  pid_alive "$waiter_pid" || fail "the waiter gave up: $(bg_err waiter)"
  [[ $(rcli zcard "$(lock_key k):q") == 1 ]] || fail "the waiter did not queue"
  assert_file_not_exists "$T/waiter-ran"
  touch "$T/go"
  bg_wait holder
  assert_equal "$BG_STATUS" 0
  bg_wait waiter 10
  assert_equal "$BG_STATUS" 0
  assert_file_exists "$T/waiter-ran"
  assert lock_free k
}

# A waiter gets a lock whose holder stopped renewing once its lease lapses: crash.bats (a run -w
# gets the lock of a killed run within TTL + 1s) and tests/protocol/heartbeat_test.cpp
# (AHolderWhoseLeaseRunsOutIsHandedOnByTheHeadsStep).

# --- signals ------------------------------------------------------------------------------------

@test "INT TERM HUP QUIT USR1 USR2 are forwarded to the child, which keeps the lock" {
  cat >"$T/child.sh" <<'EOF'
ulimit -c 0
log=$1
for s in INT TERM HUP QUIT USR1 USR2; do
  trap "echo $s >> '$log'" "$s"
done
touch "$log.ready"
while [ ! -e "$log.stop" ]; do sleep 0.05; done
exit 0
EOF
  bg holder rlock run k -- sh "$T/child.sh" "$T/signals"
  wait_until test -e "$T/signals.ready" || fail "the child did not start: $(bg_err holder)"
  local s
  for s in INT TERM HUP QUIT USR1 USR2; do
    kill -"$s" "$holder_pid"
    wait_until grep -qx "$s" "$T/signals" || fail "SIG$s did not reach the child; log: $(cat "$T/signals" 2>/dev/null)"
    pid_alive "$holder_pid" || fail "rlock died of SIG$s"
  done
  assert lock_held k
  touch "$T/signals.stop"
  bg_wait holder
  assert_equal "$BG_STATUS" 0
  assert_equal "$(cat "$T/signals")" $'INT\nTERM\nHUP\nQUIT\nUSR1\nUSR2'
  assert lock_free k
}

@test "a signal that kills the child gives 128+N and releases the lock" {
  local sig num
  for sig in TERM INT HUP USR1; do
    rm -f "$T/started" "$T/go"
    bg holder rlock run k -- sh -c "$(wait_for_go)"
    wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
    assert lock_held k
    kill -"$sig" "$holder_pid"
    bg_wait holder 5
    num=$(kill -l "$sig")
    assert_equal "$BG_STATUS" $((128 + num))
    assert lock_free k
  done
}

@test "the signal goes to the child's whole process group" {
  bg holder rlock run k -- sh -c 'sleep 1000 & echo $! > "$0.gc"; echo $$ > "$0"; wait' "$T/pids"
  wait_until test -s "$T/pids.gc" || fail "the child did not start: $(bg_err holder)"
  wait_until test -s "$T/pids" || fail "the child did not write its pid: $(bg_err holder)"
  local child grandchild
  child=$(cat "$T/pids")
  grandchild=$(cat "$T/pids.gc")
  kill -TERM "$holder_pid"
  bg_wait holder 5
  assert_equal "$BG_STATUS" 143
  wait_until pid_gone "$grandchild" || fail "the grandchild survived SIGTERM to rlock"
  wait_until pid_gone "$child" || fail "the child survived SIGTERM to rlock"
}

# --- renewals and --max-hold ---------------------------------------------------------------------

# bats test_tags=scripts
@test "renewals keep a short-TTL lock held past its TTL" {
  # The child holds the lock until the test says stop, so every intruder below runs while the
  # lock must still be held: 2.4s of attempts, past the TTL (three renewals), then the child
  # reads the lock's value. (A 2s TTL: with 1s, a renewal answered more than about 0.6s late, as
  # on a loaded 2-core machine, ends the hold before the lease can expire.)
  bg holder rlock run k -t 2s -- sh -c \
    'echo "$RLOCK_TOKEN" > "$0.token"; while [ ! -e "$0.stop" ]; do sleep 0.1; done
     redis-cli -p "$REDIS_PORT" get "rlock:{k}" > "$0.end"' "$T/child"
  wait_until test -s "$T/child.token" || fail "the child did not start: $(bg_err holder)"
  local token attempts=0 t0
  token=$(cat "$T/child.token")
  t0=$(now_ms)
  # Nobody else can take it meanwhile.
  while (($(elapsed_ms "$t0") < 2400)); do
    pid_alive "$holder_pid" || fail "rlock exited while the child ran: $(bg_err holder)"
    run rlock run k -n -- touch "$T/intruder"
    assert_failure 75
    attempts=$((attempts + 1))
    nap 0.2
  done
  touch "$T/child.stop"
  ((attempts >= 3)) || fail "only $attempts attempts were made while the child ran"
  bg_wait holder 10
  assert_equal "$BG_STATUS" 0
  assert_file_not_exists "$T/intruder"
  assert_equal "$(cat "$T/child.end")" "$token"
  assert lock_free k
}

# bats test_tags=scripts
@test "--max-hold stops the child and exits 76, or the --lost-exit-code" {
  local t0 took
  t0=$(now_ms)
  bg holder rlock run k --max-hold 400ms -- sh -c 'echo $$ > "$0"; exec sleep 100' "$T/child"
  run rlock run j --max-hold 300ms --lost-exit-code 5 -- sleep 100
  assert_failure 5
  wait_until test -s "$T/child" || fail "the child did not start: $(bg_err holder)"
  bg_wait holder 10
  took=$(elapsed_ms "$t0")
  assert_equal "$BG_STATUS" 76
  ((took >= 350 && took <= 3400)) || fail "--max-hold 400ms ended after ${took}ms"
  assert pid_gone "$(cat "$T/child")"
  wait_until lock_free k || fail "the lock is still held after --max-hold ended the run"
}

@test "a child that finishes before --max-hold is not affected" {
  run rlock run k --max-hold 10s -- sh -c 'sleep 0.2; redis-cli -p "$REDIS_PORT" exists "rlock:{k}"; exit 4'
  assert_failure 4
  assert_output 1
}
