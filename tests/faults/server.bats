#!/usr/bin/env bats
# Server-side faults: a restart without persistence (fencing tokens, waiters), an eviction
# policy that may drop locks, a server too busy to answer (an acquire that times out must not
# leave a lock behind), pauses, answers that never end, and a DNS server that never answers.
# (A lease the server shortened is reported at the next renewal: tests/protocol/acquire_test.cpp
# shows extend reports what was left of it, tests/unit/renewal_test.cpp the warning.)
#
# A test that restarts, stops or puts its server to sleep starts its own; the eviction tests
# share one (setup_file), emptied and given their maxmemory settings each (shared_redis).

load ../helpers/common
load ../helpers/servers
load helpers/faults

setup_file() {
  shared_redis_start
}

teardown_file() {
  servers_teardown_file
}

setup() {
  faults_setup
}

teardown() {
  common_teardown
}

# fence_of_a_run: the RLOCK_FENCE a `rlock run k` gets.
fence_of_a_run() {
  rlock run k -- sh -c 'echo "$RLOCK_FENCE"'
}

# --- restart without persistence ------------------------------------------------------------------

@test "fences after a restart without persistence are above every fence given before" {
  redis_start
  local f1 f2 f3
  f1=$(fence_of_a_run) || fail "the first run failed"
  f2=$(fence_of_a_run) || fail "the second run failed"
  [[ $f1 =~ ^[0-9]+$ && $f2 =~ ^[0-9]+$ ]] || fail "fences '$f1' '$f2'"
  ((f2 > f1)) || fail "fences $f1 then $f2"
  redis_restart
  assert key_missing "$(lock_key k):fence"
  f3=$(fence_of_a_run) || fail "the run after the restart failed"
  [[ $f3 =~ ^[0-9]+$ ]] || fail "fence '$f3'"
  ((f3 > f1 && f3 > f2)) || fail "fence $f3 after the restart is not above $f1 and $f2 given before it"
}

@test "a waiter survives a restart of Redis and gets the lock" {
  redis_start
  acquire_token k -t 2s
  bg waiter rlock run -v k -w 20 -- "$CS" "$WLOG" waiter 0
  wait_until -t 10 grep -qi wait "$T/waiter.err" || fail "the waiter does not say it waits: $(bg_err waiter)"
  pid_alive "$waiter_pid" || fail "the waiter gave up: $(bg_err waiter)"
  redis_restart
  bg_wait waiter 25
  [[ $BG_STATUS == 0 ]] || fail "the waiter exited $BG_STATUS after a restart of Redis: $(bg_err waiter)"
  assert cs_started waiter
}

@test "a waiter survives a Redis pause longer than --io-timeout and gets the lock" {
  redis_start
  # (A lease that outlasts the waiter's start and the 1.5s pause, so that the holder still holds
  # when it gives the lock back: the waiter is woken by the release, not by the lease's end.)
  acquire_token k -t 6s
  bg waiter rlock run -v k -w 20 --io-timeout 500ms -- "$CS" "$WLOG" waiter 0
  wait_until -t 10 grep -qi wait "$T/waiter.err" || fail "the waiter does not say it waits: $(bg_err waiter)"
  redis_pause
  sleep 1.5
  redis_resume
  # (The holder gives the lock back: the waiter need not wait for its lease.)
  RLOCK_TOKEN=$TOKEN rlock release k || fail "the holder's release failed"
  bg_wait waiter 25
  [[ $BG_STATUS == 0 ]] || fail "the waiter exited $BG_STATUS after a Redis pause: $(bg_err waiter)"
  assert cs_started waiter
}

# --- a restart with persistence, while a lock is held ----------------------------------------------

# aof_restart: stops the server (SIGTERM: it writes its AOF out) and starts it again on the same port
# and directory, with its data; the connections rlock had to it are dead.
aof_restart() {
  kill -TERM "$REDIS_PID"
  wait_until -t 10 pid_gone "$REDIS_PID" || fail "redis-server did not stop"
  aof_start_again
}

# aof_start_again: starts the stopped server again on its port and directory.
aof_start_again() {
  local attempt
  for attempt in $(seq 1 50); do
    if _redis_launch "$REDIS_PORT" --appendonly yes --appendfsync always; then
      export REDIS_PID
      return 0
    fi
    sleep 0.1
  done
  fail "could not start redis-server again on port $REDIS_PORT"
}

# aof_stop: stops the server (its AOF written out) and waits until it is gone.
aof_stop() {
  kill -TERM "$REDIS_PID"
  wait_until -t 10 pid_gone "$REDIS_PID" || fail "redis-server did not stop"
}

ms_now() { date +%s%3N; }

# Whether N contenders wait in the queue of lock KEY.
queue_length_is() { [[ $(rcli zcard "$(lock_key "$1"):q" 2>/dev/null) == "$2" ]]; }

@test "run releases after a restart of Redis: the next waiter starts within seconds of the command's end, not a TTL" {
  redis_start --appendonly yes --appendfsync always
  bg holder rlock run k -t 60s -- sh -c "touch '$T/started'; while [ ! -e '$T/go' ]; do sleep 0.05; done; date +%s%3N >'$T/holder-end'"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  aof_restart
  assert lock_held k
  bg waiter rlock run k -w 50s -- sh -c "date +%s%3N >'$T/waiter-start'"
  wait_until -t 10 queue_length_is k 1 || fail "the waiter did not queue: $(bg_err waiter)"
  touch "$T/go"
  bg_wait holder 15
  [[ $BG_STATUS == 0 ]] || fail "the holder exited $BG_STATUS: $(bg_err holder)"
  grep -q 'could not release' <<<"$(bg_err holder)" && fail "the holder did not release: $(bg_err holder)"
  bg_wait waiter 20
  [[ $BG_STATUS == 0 ]] || fail "the waiter exited $BG_STATUS: $(bg_err waiter)"
  local gap=$(($(cat "$T/waiter-start") - $(cat "$T/holder-end")))
  echo "# the waiter started ${gap}ms after the holder's command ended" >&3
  ((gap < 10000)) || fail "the waiter started ${gap}ms after the holder's command ended"
}

@test "run whose command ends while Redis is down releases once it is back: the next waiter starts within seconds" {
  redis_start --appendonly yes --appendfsync always
  bg holder rlock run -v k -t 60s -- sh -c "touch '$T/started'; while [ ! -e '$T/go' ]; do sleep 0.05; done; date +%s%3N >'$T/holder-end'"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  aof_stop
  touch "$T/go"
  wait_until test -e "$T/holder-end" || fail "the holder's command did not end"
  # Its release failed (Redis is down) and it waits to try again: then Redis comes back.
  wait_until grep -q 'again in' "$T/holder.err" || fail "no retry of the release under way: $(bg_err holder)"
  aof_start_again
  bg waiter rlock run k -w 50s -- sh -c "date +%s%3N >'$T/waiter-start'"
  bg_wait holder 15
  [[ $BG_STATUS == 0 ]] || fail "the holder exited $BG_STATUS: $(bg_err holder)"
  bg_wait waiter 20
  [[ $BG_STATUS == 0 ]] || fail "the waiter exited $BG_STATUS: $(bg_err waiter)"
  local gap=$(($(cat "$T/waiter-start") - $(cat "$T/holder-end")))
  echo "# the waiter started ${gap}ms after the holder's command ended (Redis was down for part of it)" >&3
  ((gap < 10000)) || fail "the waiter started ${gap}ms after the holder's command ended"
}

@test "release while Redis restarts: retried within --io-timeout, and the lock is free at once" {
  redis_start --appendonly yes --appendfsync always
  acquire_token k -t 60s
  aof_stop
  RLOCK_TOKEN=$TOKEN bg rel rlock -v release k --io-timeout 8s
  # Its first attempt failed (Redis is down) and it waits to try again: then Redis comes back.
  wait_until grep -q 'again in' "$T/rel.err" || fail "no retry under way: $(bg_err rel)"
  aof_start_again
  bg_wait rel 15
  [[ $BG_STATUS == 0 ]] || fail "release exited $BG_STATUS: $(bg_err rel)"
  assert lock_free k
  run rlock run k -n -- true
  assert_success
}

@test "extend while Redis restarts: retried within --io-timeout, and the lease is extended" {
  redis_start --appendonly yes --appendfsync always
  acquire_token k -t 60s
  aof_stop
  RLOCK_TOKEN=$TOKEN bg ext rlock -v extend k -t 120s --io-timeout 8s
  # Its first attempt failed (Redis is down) and it waits to try again: then Redis comes back.
  wait_until grep -q 'again in' "$T/ext.err" || fail "no retry under way: $(bg_err ext)"
  aof_start_again
  bg_wait ext 15
  [[ $BG_STATUS == 0 ]] || fail "extend exited $BG_STATUS: $(bg_err ext)"
  local ttl
  ttl=$(rcli pttl "$(lock_key k)")
  ((ttl > 60000)) || fail "the lease was not extended: PTTL $ttl"
}

@test "a keeper releases after a restart of Redis: the next waiter gets the lock within seconds" {
  redis_start --appendonly yes --appendfsync always
  sleep 1000 &
  local watched=$!
  echo "$watched" >>"$BATS_TEST_TMPDIR/.bg_pids"
  acquire_token k --keepalive --pid "$watched" -t 60s
  aof_restart
  assert lock_held k
  local t0
  t0=$(ms_now)
  kill -KILL "$watched"
  run --separate-stderr rlock run k -w 30s -- true
  assert_success
  local gap=$(($(ms_now) - t0))
  echo "# the next run got the lock ${gap}ms after the watched process ended" >&3
  ((gap < 10000)) || fail "the next run got the lock ${gap}ms after the watched process ended"
}

# --- eviction policy ------------------------------------------------------------------------------

# warnings_about TEXT: the "rlock: warning: " lines of the last run's stderr that contain TEXT.
warnings_about() {
  grep '^rlock: warning: ' <<<"$stderr" | grep -i -- "$1"
}

@test "volatile-lru with a maxmemory: run warns about maxmemory-policy and works" {
  shared_redis 100mb volatile-lru
  run --separate-stderr rlock run k -- echo ran
  assert_success
  assert_output ran
  warnings_about maxmemory-policy >/dev/null || fail "no 'rlock: warning:' naming maxmemory-policy: '$stderr'"
  assert lock_free k
}

@test "allkeys-lru with a maxmemory: run warns too" {
  shared_redis 100mb allkeys-lru
  run --separate-stderr rlock run k -- echo ran
  assert_success
  warnings_about maxmemory-policy >/dev/null || fail "no 'rlock: warning:' naming maxmemory-policy: '$stderr'"
}

@test "--strict refuses an evicting policy with 78 and leaves no lock" {
  shared_redis 100mb volatile-lru
  run --separate-stderr rlock run k --strict -- touch "$T/ran"
  [[ $status == 78 ]] || fail "expected 78 with --strict, got $status: '$stderr'"
  (($(count_error_lines "$stderr") == 1)) || fail "expected one 'rlock: error:' line: '$stderr'"
  assert_file_not_exists "$T/ran"
  assert lock_free k
  run --separate-stderr rlock acquire k --strict
  [[ $status == 78 ]] || fail "acquire --strict: expected 78, got $status: '$stderr'"
  assert lock_free k
}

@test "noeviction, or no maxmemory: no warning" {
  shared_redis 100mb noeviction
  run --separate-stderr rlock run k -- true
  assert_success
  assert_equal "$stderr" ""
  run --separate-stderr rlock run k --strict -- true
  assert_success
  shared_redis 0 volatile-lru
  run --separate-stderr rlock run k -- true
  assert_success
  assert_equal "$stderr" ""
}

# info_calls: how many INFO commands the server ran since the last CONFIG RESETSTAT (its own
# INFO commandstats is counted by the next call).
info_calls() {
  rcli info commandstats | awk -F'[:,=]' '$1 == "cmdstat_info" { n = $3 } END { print n + 0 }'
}

@test "the eviction check reads INFO once, then the policy kept in Redis: the next runs warn without INFO" {
  shared_redis 100mb volatile-lru
  run --separate-stderr rlock run k -- true
  assert_success
  warnings_about maxmemory-policy >/dev/null || fail "no warning at the first run: '$stderr'"
  rcli config resetstat >/dev/null
  run --separate-stderr rlock run k -- true
  assert_success
  warnings_about maxmemory-policy >/dev/null || fail "no warning from the kept policy: '$stderr'"
  run --separate-stderr rlock acquire k
  assert_success
  warnings_about maxmemory-policy >/dev/null || fail "acquire: no warning from the kept policy: '$stderr'"
  assert_equal "$(info_calls)" 0
  # Kept for an hour: once it is gone, the next run reads INFO again (memory, and server: whether
  # it is a Cluster node).
  local ttl
  ttl=$(rcli pttl "$(lock_key k):policy")
  ((ttl > 3000000 && ttl <= 3600000)) || fail "the kept policy's PTTL is $ttl"
  rcli del "$(lock_key k):policy" >/dev/null
  RLOCK_TOKEN=$output rlock release k
  rcli config resetstat >/dev/null
  run --separate-stderr rlock run k -- true
  assert_success
  warnings_about maxmemory-policy >/dev/null || fail "no warning after the kept policy lapsed: '$stderr'"
  assert_equal "$(info_calls)" 2
  assert_equal "$(rcli get "$(lock_key k):policy")" "server 104857600 volatile-lru"
}

@test "with noeviction, a run sends no INFO once the policy is kept" {
  shared_redis 100mb noeviction
  rlock run k -- true
  assert_equal "$(rcli get "$(lock_key k):policy")" server
  rcli config resetstat >/dev/null
  run --separate-stderr rlock run k -- true
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(info_calls)" 0
}

@test "status -v names the eviction policy" {
  shared_redis 100mb volatile-lru
  acquire_token k 2>/dev/null
  run --separate-stderr rlock status -v k
  assert_success
  [[ "$output$stderr" == *volatile-lru* ]] || fail "status -v does not name the policy: '$output' '$stderr'"
}

# --- a server too busy to answer -------------------------------------------------------------------

# warm_server_asleep: a server that has rlock's scripts in its cache (an earlier run, so that a
# queued EVALSHA runs), then sleeps 2.5s (DEBUG SLEEP). (redis_debug_sleep returns once a ping
# has gone unanswered for 0.3s: the requests sent after it have about 2s of the sleep left.)
warm_server_asleep() {
  redis_start --enable-debug-command yes
  rlock run k -- true || fail "the warm-up run failed"
  redis_debug_sleep 2.5
}

# no_orphan_once_awake KEY...: the server wakes, and each KEY is free within 2s: the timed-out
# acquires left nothing behind.
no_orphan_once_awake() {
  wait_until -t 10 redis_answers || fail "the server did not wake up"
  local key
  for key in "$@"; do
    wait_until -t 2 lock_free "$key" ||
      fail "the lock $key is still held $(rcli pttl "$(lock_key "$key")")ms after the server woke: an orphan of the timed-out acquire"
  done
}

# Three requests to one server asleep for 2.5s (they pay the same sleep):
#   run:     a run whose acquire timed out (server busy) leaves no lock behind (k)
#   acquire: an acquire that timed out (server busy) leaves no lock behind (k2)
#   late:    an acquire answered after its 1s lease, as counted from when it was sent, could
#            still be trusted: 69, no token printed, the lock given back (k3)
@test "run or acquire timed out (server busy) leaves no lock behind; acquire answered after its lease: 69, no token, the lock given back" {
  warm_server_asleep
  # (late first: its 1s lease must be over when the server answers.)
  bg late rlock acquire -n --io-timeout 5s -t 1s k3
  bg run rlock run -n --io-timeout 300ms -t 60s k -- touch "$T/ran"
  bg acquire rlock acquire -n --io-timeout 300ms -t 60s k2
  bg_wait run 10
  [[ $BG_STATUS == 69 ]] || fail "run: expected 69, got $BG_STATUS: '$(bg_err run)'"
  assert_file_not_exists "$T/ran"
  bg_wait acquire 10
  [[ $BG_STATUS == 69 ]] || fail "acquire: expected 69, got $BG_STATUS: '$(bg_err acquire)'"
  assert_equal "$(bg_out acquire)" ""
  no_orphan_once_awake k k2
  bg_wait late 10
  [[ $BG_STATUS == 69 ]] || fail "late acquire: expected 69, got $BG_STATUS: '$(bg_out late)' '$(bg_err late)'"
  assert_equal "$(bg_out late)" ""
  wait_until -t 5 lock_free k3 || fail "the lock k3 is still held: $(rcli pttl "$(lock_key k3)")ms left"
}

# --- an --io-timeout longer than the lease ------------------------------------------------------------

@test "--io-timeout longer than the TTL: clamped (the child runs to its end) or refused with 64" {
  shared_redis
  local t0 took
  t0=$(now_ms)
  run --separate-stderr timeout 30 rlock run k -t 1s --io-timeout 1500ms -- sh -c 'sleep 1.3; touch "$0"' "$T/done"
  took=$(elapsed_ms "$t0")
  case $status in
    0) assert_file_exists "$T/done" ;;
    64)
      assert_file_not_exists "$T/done"
      (($(count_error_lines "$stderr") == 1)) || fail "expected one 'rlock: error:' line: '$stderr'"
      ;;
    *) fail "exit $status after ${took}ms (expected 0, or 64 for a refusal): '$stderr'" ;;
  esac
  assert lock_free k
}

@test "a server whose answer never ends: --io-timeout 250ms gives 69 within 3s" {
  fake_redis_stream
  local t0 took
  t0=$(now_ms)
  run --separate-stderr timeout 20 rlock run -u "redis://127.0.0.1:$FAKE_PORT" --io-timeout 250ms k -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  [[ $status == 69 ]] || fail "expected 69, got $status after ${took}ms: '$stderr'"
  ((took < 3000)) || fail "took ${took}ms"
  assert_file_not_exists "$T/ran"
  t0=$(now_ms)
  run --separate-stderr timeout 20 rlock status -u "redis://127.0.0.1:$FAKE_PORT" --io-timeout 250ms k
  took=$(elapsed_ms "$t0")
  [[ $status == 69 ]] || fail "status: expected 69, got $status after ${took}ms: '$stderr'"
  ((took < 3000)) || fail "status took ${took}ms"
}

# --- DNS ------------------------------------------------------------------------------------------

@test "a DNS server that never answers: the first lookup is bounded by --connect-timeout (69 within 3s)" {
  [[ $(id -u) == 0 ]] || skip "needs root for a private mount and network namespace"
  command -v unshare >/dev/null && command -v ip >/dev/null && command -v socat >/dev/null ||
    skip "needs unshare, ip and socat"
  # In private mount and network namespaces: /etc/resolv.conf names 127.0.0.1, where a UDP
  # socket swallows every query (no answer, no ICMP error).
  printf 'nameserver 127.0.0.1\noptions timeout:5 attempts:2\n' >"$T/resolv.conf"
  run --separate-stderr timeout 40 unshare -mn bash -c '
    T=$0
    ip link set lo up || exit 90
    socat -u UDP-RECV:53,bind=127.0.0.1 /dev/null &
    sink=$!
    for _ in $(seq 1 100); do ss -lunH "sport = :53" | grep -q . && break; sleep 0.05; done
    ss -lunH "sport = :53" | grep -q . || exit 91
    mount --bind "$T/resolv.conf" /etc/resolv.conf || exit 92
    t0=${EPOCHREALTIME/./}
    rlock run -u redis://does-not-exist.invalid:6379 --connect-timeout 500ms k -- true
    rc=$?
    t1=${EPOCHREALTIME/./}
    kill "$sink"
    echo "rc=$rc took=$(((t1 - t0) / 1000))"
  ' "$T"
  case $status in
    90 | 91 | 92) skip "could not set up the namespaces (step $status): $stderr" ;;
  esac
  assert_success
  local rc took
  rc=$(sed -n 's/^rc=\([0-9]*\) .*/\1/p' <<<"$output")
  took=$(sed -n 's/.* took=\([0-9]*\)$/\1/p' <<<"$output")
  [[ $rc == 69 ]] || fail "expected 69, got '$rc': $output; stderr: $stderr"
  ((took < 3000)) || fail "the lookup took ${took}ms with --connect-timeout 500ms"
}
