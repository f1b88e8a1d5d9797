#!/usr/bin/env bats
# Jobs: --min-hold (a cron fleet runs a job once per tick), --supersede (the newest waiting
# request wins), --preempt / --preemptible (a preemptor stops a preemptible holder's whole tree
# and is served next). Each on a single server, and on Sentinel and Cluster (min-hold on Redlock
# too).
#
# The critical sections witness themselves: they append lines with wall-clock milliseconds to
# $W (see write_job). "Hosts" are processes in their own UTS namespace (unshare -u) with their
# own host name, so rlock records them as different machines.
#
# One Sentinel topology, one Cluster and three Redlock masters for the whole file (setup_file);
# the single-server tests start their own server.

load helpers/common
load helpers/servers
load faults/helpers/faults
load helpers/queue

BATS_TEST_TIMEOUT=120

setup_file() {
  # Created while the rest is set up and the tests before the Cluster ones run.
  cluster_start_bg 3
  repl_start
  sentinels_start 3
  local i urls=()
  for i in 1 2 3; do
    # appendonly: a master younger than the TTL without it does not count (rlock(7), Redlock masters).
    srv_start "m$i" --appendonly yes --appendfsync no || fail "could not start Redlock master m$i"
    urls+=("redis://127.0.0.1:$SRV_PORT")
  done
  export JOBS_REDLOCK_URLS="${urls[*]}"
}

teardown_file() {
  servers_teardown_file
}

setup() {
  queue_setup
  export T W=$T/witness
  : >"$W"
  write_job
}

teardown() {
  common_teardown
}

# write_job: $T/job.sh LABEL SECONDS, a critical section that appends "start MS LABEL HOST PID"
# to $W, works SECONDS, then appends "end MS LABEL".
write_job() {
  cat >"$T/job.sh" <<'JOB'
#!/bin/sh
echo "start $(date +%s%3N) $1 $(hostname) $$" >>"$W"
sleep "$2"
echo "end $(date +%s%3N) $1" >>"$W"
JOB
  chmod +x "$T/job.sh"
}

# stderr_has TEXT: the stderr of the last `run --separate-stderr` contains TEXT.
stderr_has() {
  [[ $stderr == *"$1"* ]] || fail "stderr does not contain '$1': '$stderr'"
}

# Whether unshare -u can give a process its own host name here (root, or user namespaces).
can_unshare() {
  unshare -u sh -c 'hostname rlock-probe && [ "$(hostname)" = rlock-probe ]' 2>/dev/null
}

# $T/on_host NAME CMD...: runs CMD in a UTS namespace of its own whose host name is NAME (a
# script, so that bg can start it).
write_on_host() {
  cat >"$T/on_host" <<'ON_HOST'
#!/bin/sh
exec unshare -u sh -c 'hostname "$1" && shift && exec "$@"' sh "$@"
ON_HOST
  chmod +x "$T/on_host"
}

# The labels of the critical sections that started, in order, one line.
starts() { awk '$1 == "start" { printf "%s%s", sep, $3; sep = " " } END { print "" }' "$W"; }
start_ms() { awk -v l="$1" '$1 == "start" && $3 == l { print $2; exit }' "$W"; }
ended() { awk -v l="$1" '$1 == "end" && $3 == l { f = 1 } END { exit !f }' "$W"; }
started() { awk -v l="$1" '$1 == "start" && $3 == l { f = 1 } END { exit !f }' "$W"; }

# sleep_until MS: sleeps until the wall clock reads MS (a now_ms value); at once if it has.
sleep_until() {
  local left=$(($1 - $(now_ms)))
  ((left > 0)) && sleep "$(awk -v m="$left" 'BEGIN { printf "%.3f", m / 1000 }')"
  return 0
}

# status_state KEY: the state field of `rlock status KEY --json`.
status_state() { status_json "$1" | jq -r '.state // empty'; }
is_lingering() { [[ $(status_state "$1") == lingering ]]; }

# assert_bg_status NAME CODE [SECONDS]: the background command NAME ends (within SECONDS,
# default 30) with exit status CODE; else the test fails with its stderr.
assert_bg_status() {
  bg_wait "$1" "${3:-30}"
  [[ $BG_STATUS == "$2" ]] || fail "$1 exited $BG_STATUS, not $2; stderr: $(bg_err "$1")"
}

# --- min-hold ---------------------------------------------------------------------------------

@test "min-hold: four hosts whose cron fires 0.3s apart run the job once in the tick" {
  can_unshare || fail "unshare -u does not work here: the test needs distinct host names"
  redis_start
  write_on_host
  local t0 i
  t0=$(now_ms)
  bg h0 "$T/on_host" h0 rlock run nightly -n --min-hold 4s -- "$T/job.sh" tick1-h0 0.1
  # The job (0.1s) is over, and h0 has let go, before the next host fires: the others find the
  # hold lingering.
  wait_until -t 10 ended tick1-h0 || fail "h0's job did not run: $(bg_err h0)"
  wait_until -t 10 is_lingering nightly || fail "h0's hold does not linger: $(status_json nightly); $(bg_err h0)"
  for i in 1 2 3; do
    sleep_until $((t0 + 300 * i))
    bg "h$i" "$T/on_host" "h$i" rlock run nightly -n --min-hold 4s -- "$T/job.sh" "tick1-h$i" 0.1
  done
  local fired
  fired=$(elapsed_ms "$t0")
  assert_bg_status h0 0
  for i in 1 2 3; do
    assert_bg_status "h$i" 75
    grep -q 'lingering' "$T/h$i.err" || fail "h$i's stderr does not say lingering: $(bg_err "h$i")"
    # Until when, in UTC as status and log give times, with its Z.
    grep -qE 'until [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z \([0-9.]+m?s left\)' "$T/h$i.err" ||
      fail "h$i's stderr does not say until when, in UTC: $(bg_err "h$i")"
    grep -q 'taken by h0 ' "$T/h$i.err" || fail "h$i's stderr does not name host h0: $(bg_err "h$i")"
  done
  # All four fired inside the 4s hold: the test means something only then.
  ((fired < 3500)) || fail "the four hosts took ${fired}ms to fire; the machine is too slow for the test"
  assert_equal "$(starts)" "tick1-h0"
  # The history saw the same: one acquisition, three refusals, from h1..h3.
  run --separate-stderr rlock log nightly --json
  assert_success
  assert_equal "$(jq -r 'select(.event == "busy") | .host' <<<"$output" | sort | xargs)" "h1 h2 h3"
  assert_equal "$(jq -r 'select(.event == "acquired") | .host' <<<"$output" | xargs)" "h0"
}
# That the hold ends at its time, not before, and the next tick's run then takes the lock: "counts
# from the command's start" below, "Redlock: min-hold" and tests/protocol/linger_test.cpp
# (AWaiterIsServedWhenTheLingerEnds).

@test "min-hold: an acquired hold lingers after release, shows in status, and release --force ends it" {
  redis_start
  acquire_token k --min-hold 20s
  RLOCK_TOKEN=$TOKEN run --separate-stderr rlock release k
  assert_success
  # Lingering: held with no process behind it, for the rest of the 20s.
  lock_held k
  run --separate-stderr rlock status k
  assert_success
  assert_line --regexp '^k +lingering '
  run --separate-stderr rlock status k --json
  assert_success
  assert_equal "$(jq -r .state <<<"$output")" lingering
  local left
  left=$(jq -r .ttl_ms <<<"$output")
  ((left > 10000 && left <= 20000)) || fail "ttl_ms $left is not the time left of the 20s hold"
  run --separate-stderr rlock run k -n -- true
  assert_failure 75
  assert_output ""
  stderr_has lingering
  # An admin ends it early.
  run --separate-stderr rlock release k --force
  assert_success
  lock_free k
  run --separate-stderr rlock status k
  assert_failure 1
  run --separate-stderr rlock run k -n -- true
  assert_success
  # A keepalive hold: its keeper gives it back, and it lingers the same.
  run timeout 10 bash -ec 'tok=$(rlock acquire kept --keepalive --min-hold 20s); RLOCK_TOKEN=$tok rlock release kept'
  assert_success
  is_lingering kept || fail "the keepalive hold does not linger after release: $(status_json kept)"
}

# That a waiter is served when a lingering hold ends, not before, and that lingering semaphore
# slots and shared holds keep others out until their time: tests/protocol/linger_test.cpp.

@test "min-hold: a bad duration is a usage error; one shorter than the run costs nothing" {
  redis_start
  run --separate-stderr rlock run k -n --min-hold 2y -- true
  assert_usage_error
  run --separate-stderr rlock acquire k --min-hold 2y
  assert_usage_error
  lock_free k
  run --separate-stderr rlock run k -n --min-hold 100ms -- sleep 0.4
  assert_success
  run --separate-stderr rlock run k -n -- true
  assert_success
  assert_equal "$stderr" ""
}

@test "min-hold: counts from the command's start: a waiter that claims its grant late keeps the lock the whole time" {
  redis_start
  bg holder rlock run k -- sh -c 'while [ ! -e "$0" ]; do sleep 0.05; done' "$T/go"
  wait_until -t 10 lock_held k || fail "the holder did not take k: $(bg_err holder)"
  bg waiter rlock run k --wait 60s --min-hold 2s -- "$T/job.sh" waiter 0
  wait_until -t 10 queue_is k 1 || fail "the waiter did not queue: $(bg_err waiter)"
  # The waiter is stopped when the lock is granted to it, and claims the grant only when
  # continued, 1.2s later (inside the 2s claim window): its command starts 1.2s after the grant.
  kill -STOP "$waiter_pid"
  touch "$T/go"
  assert_bg_status holder 0
  sleep 1.2
  kill -CONT "$waiter_pid"
  assert_bg_status waiter 0
  # The next run takes the lock as soon as the hold stops lingering.
  wait_until -t 20 rlock run k -n -- "$T/job.sh" next 0 2>/dev/null || fail "the hold did not end"
  local waiter next
  waiter=$(start_ms waiter)
  next=$(start_ms next)
  [[ -n $waiter && -n $next ]] || fail "a command did not run: $(cat "$W")"
  # 2s from the waiter's command's start (less the time its start took to be written down), not
  # 2s from the grant, 1.2s or more before it (that leaves at most 0.8s, plus the next run's start).
  echo "# --min-hold 2s, claimed 1.2s late: the next command started $((next - waiter))ms after the waiter's" >&3
  ((next - waiter >= 1500)) || fail "the next command started $((next - waiter))ms after the waiter's, inside its 2s --min-hold"
}

@test "min-hold: a hold given back before its command started never lingers" {
  redis_start
  # --wait-replicas 1 on a server without replicas: the lock is taken, then given back (69).
  run --separate-stderr rlock run k -n --min-hold 20s --wait-replicas 1 --wait-timeout 200ms -- touch "$T/ran"
  assert_failure 69
  assert_file_not_exists "$T/ran"
  lock_free k
  run --separate-stderr rlock run k -n -- touch "$T/ran"
  assert_success
  assert_file_exists "$T/ran"
  # acquire: a token that cannot be written is never handed out, so the hold was never used.
  run --separate-stderr rlock acquire a --min-hold 20s --token-file "$T/no/such/dir/token"
  assert_failure 71
  lock_free a
  run --separate-stderr rlock acquire a -n --min-hold 20s --wait-replicas 1 --wait-timeout 200ms
  assert_failure 69
  lock_free a
  run --separate-stderr rlock run a -n -- true
  assert_success
}

# --- supersede --------------------------------------------------------------------------------

@test "supersede: the newest waiter wins; older superseding waiters leave naming it; plain waiters keep their place" {
  redis_start
  bg holder rlock run s -- sh -c '"$0" holder 0; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/job.sh" "$T/go"
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  enqueue w1 s 1 rlock run s --wait 60s --supersede -- "$T/job.sh" W1 0
  enqueue plain s 2 rlock run s --wait 60s -- "$T/job.sh" PLAIN 0
  # W2 replaces W1: the queue stays at 2 (PLAIN, W2).
  bg w2 rlock run s --wait 60s --supersede -- "$T/job.sh" W2 0
  assert_bg_status w1 79 10
  grep -q "superseded" "$T/w1.err" || fail "W1 does not say it was superseded: $(bg_err w1)"
  grep -qF "$(hostname) pid $w2_pid " "$T/w1.err" || fail "W1 does not name W2 (pid $w2_pid): $(bg_err w1)"
  grep -qF "job.sh W2 0" "$T/w1.err" || fail "W1 does not name W2's command: $(bg_err w1)"
  wait_until -t 10 queue_is s 2 || fail "W2 did not take a place: $(status_json s)"
  local t3
  t3=$(now_ms)
  bg w3 rlock run s --wait 60s --supersede -- "$T/job.sh" W3 0
  wait_until -t 10 bg_done w2 || fail "W2 still waits after W3 came: $(bg_err w2)"
  (($(elapsed_ms "$t3") < 5000)) || fail "W2 left $(elapsed_ms "$t3")ms after W3 came"
  assert_bg_status w2 79
  grep -qF "pid $w3_pid " "$T/w2.err" || fail "W2 does not name W3 (pid $w3_pid): $(bg_err w2)"
  grep -qF "job.sh W3 0" "$T/w2.err" || fail "W2 does not name W3's command: $(bg_err w2)"
  wait_until -t 10 queue_is s 2 || fail "W3 did not take a place: $(status_json s)"
  pid_alive "$plain_pid" || fail "the plain waiter left: $(bg_err plain)"
  touch "$T/go"
  assert_bg_status holder 0
  assert_bg_status plain 0
  assert_bg_status w3 0
  assert_equal "$(starts)" "holder PLAIN W3"
  run --separate-stderr rlock run s -n --supersede -- true
  assert_usage_error
}

# --- preempt ----------------------------------------------------------------------------------

# write_tree: $T/tree.sh, a preemptible holder's command: records its pid, starts three background
# children that append "old MS" to $W every 50ms (each records its pid in $T/pids), and waits.
write_tree() {
  cat >"$T/tree.sh" <<'TREE'
#!/bin/sh
echo $$ >>"$T/pids"
for i in 1 2 3; do
  (while :; do echo "old $(date +%s%3N)" >>"$W"; sleep 0.05; done) &
  echo $! >>"$T/pids"
done
wait
TREE
  chmod +x "$T/tree.sh"
}

tree_running() { [[ $(wc -l <"$T/pids" 2>/dev/null) -ge 4 ]] && grep -q '^old ' "$W"; }

@test "preempt: a preemptible holder's whole tree is stopped, and the preemptor is served ahead of the queue" {
  redis_start
  write_tree
  bg holder rlock run p --preemptible -- "$T/tree.sh"
  wait_until -t 10 tree_running || fail "the holder's tree did not start: $(bg_err holder)"
  enqueue queued p 1 rlock run p --wait 60s -- sh -c 'echo "queued $(date +%s%3N)" >>"$W"'
  local asked
  asked=$(now_ms)
  bg pre rlock run p --preempt --wait 30s -- sh -c 'echo "new $(date +%s%3N)" >>"$W"'
  assert_bg_status holder 80 15
  grep -q -- "--preempt" "$T/holder.err" || fail "the holder does not say it was preempted: $(bg_err holder)"
  grep -qF "pid $pre_pid " "$T/holder.err" || fail "the holder does not name the preemptor (pid $pre_pid): $(bg_err holder)"
  assert_bg_status pre 0 15
  assert_bg_status queued 0 15
  # Every process of the old tree is gone.
  local p pids
  mapfile -t pids <"$T/pids"
  for p in "${pids[@]}"; do
    ! kill -0 "$p" 2>/dev/null || fail "process $p of the preempted tree is still alive"
  done
  local new last_old queued_at
  new=$(awk '$1 == "new" { print $2 }' "$W")
  queued_at=$(awk '$1 == "queued" { print $2 }' "$W")
  last_old=$(awk '$1 == "old" { v = $2 } END { print v }' "$W")
  [[ -n $new && -n $queued_at && -n $last_old ]] || fail "witness incomplete: $(cat "$W")"
  ((last_old < new)) || fail "the old tree wrote at $last_old, after the preemptor started at $new"
  ((new < queued_at)) || fail "the waiter queued first ran at $queued_at, before the preemptor at $new"
  ((new - asked < 5000)) || fail "the preemptor started $((new - asked))ms after its request"
  # The history says who preempted whom.
  run --separate-stderr rlock log p --json
  assert_success
  assert_equal "$(jq -r 'select(.event == "preempted") | .pid' <<<"$output")" "$holder_pid"
}

@test "preempt: the preemptor is woken by the holder's release, not by its own heartbeat (3 rounds)" {
  redis_start
  local round gap
  for round in 1 2 3; do
    bg holder rlock run pk --preemptible -- sleep 100
    wait_until -t 10 eval '[[ $(rcli exists "rlock:{pk}") == 1 ]]' || fail "the holder did not take the lock: $(bg_err holder)"
    run --separate-stderr rlock run pk --preempt --wait 30s -- true
    assert_success
    bg_wait holder 10
    # From the holder's "preempted" to the preemptor's "acquired": a round trip, not a heartbeat (1s).
    gap=$(rlock log pk --json | jq -rs '(map(select(.event == "acquired")) | last | .time_ms) -
      (map(select(.event == "preempted")) | last | .time_ms)')
    ((gap < 600)) || fail "round $round: the preemptor took the lock ${gap}ms after the holder let it go"
  done
}

@test "preempt: a holder without --preemptible is not stopped; --preempt --shared is a usage error" {
  redis_start
  bg holder rlock run p -- "$T/job.sh" holder 30
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  run --separate-stderr rlock run p --preempt -n -- "$T/job.sh" pre 0
  assert_failure 75
  run --separate-stderr rlock acquire p --preempt -n
  assert_failure 75
  pid_alive "$holder_pid" || fail "the holder was stopped: $(bg_err holder)"
  ! ended holder || fail "the holder's job ended"
  assert_equal "$(starts)" "holder"
  run --separate-stderr rlock run p --preempt --shared -w 1 -- true
  assert_usage_error
  run --separate-stderr rlock acquire p --preempt --shared
  assert_usage_error
}

# A holder's rlock that is stopped (SIGSTOP) cannot see a request until it is continued: the
# request can leave first.
# That a request whose preemptor gave up (its wait ran out) or died (its place lapsed) before the
# holder saw it does not stop the holder: tests/protocol/preempt_test.cpp.

@test "preempt: a superseded request is withdrawn; the holder stops for the newer one, which it names" {
  redis_start
  bg holder rlock run p --preemptible -- "$T/job.sh" holder 20
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  kill -STOP "$holder_pid"
  enqueue p1 p 1 rlock run p --preempt --supersede -w 30s -- "$T/job.sh" P1 0
  bg p2 rlock run p --preempt --supersede -w 30s -- "$T/job.sh" P2 0
  assert_bg_status p1 79 10
  wait_until -t 10 queue_is p 1 || fail "P2 did not take a place: $(status_json p)"
  kill -CONT "$holder_pid"
  assert_bg_status holder 80 15
  grep -qF "pid $p2_pid " "$T/holder.err" || fail "the holder does not name P2 (pid $p2_pid): $(bg_err holder)"
  ! grep -qF "pid $p1_pid " "$T/holder.err" || fail "the holder names P1, which left: $(bg_err holder)"
  assert_bg_status p2 0 10
  assert_equal "$(starts)" "holder P2"
}

@test "preempt: a request waiting behind a holder without --preemptible goes ahead of the queue, and keeps its intent" {
  redis_start
  bg holder rlock run p -- sh -c '"$0" H 0; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/job.sh" "$T/go"
  wait_until -t 10 started H || fail "the holder did not start: $(bg_err holder)"
  # A plain preemptible waiter first, then a preemptor that is itself preemptible, then another
  # preemptor: the preemptors go ahead of the plain waiter, in their order.
  enqueue w p 1 rlock run p --preemptible -w 60s -- "$T/job.sh" W 0
  enqueue p1 p 2 rlock run p --preempt --preemptible -w 60s -- "$T/job.sh" P1 10
  enqueue p2 p 3 rlock run p --preempt -w 60s -- "$T/job.sh" P2 0
  local go
  go=$(now_ms)
  touch "$T/go"
  assert_bg_status holder 0 10
  # P1 is served first, and asked at once to stop for P2, which waits (P1's command may be
  # stopped before it writes its start).
  assert_bg_status p1 80 10
  grep -qF "pid $p2_pid " "$T/p1.err" || fail "P1 does not name P2 (pid $p2_pid): $(bg_err p1)"
  assert_bg_status p2 0 10
  assert_bg_status w 0 10
  [[ $(starts) =~ ^H\ (P1\ )?P2\ W$ ]] || fail "order: $(starts)"
  ! ended P1 || fail "P1's job ran to its end: $(cat "$W")"
  local p2
  p2=$(start_ms P2)
  ((p2 - go < 5000)) || fail "P2 started $((p2 - go))ms after the holder let go: P1 was not asked at once"
}

@test "preempt -n: a preemptible holder is asked to stop, and waited for" {
  redis_start
  bg holder rlock run p --preemptible -t 6s -- "$T/job.sh" holder 30
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  local t0
  t0=$(now_ms)
  run --separate-stderr rlock run p --preempt -n -- "$T/job.sh" pre 0
  assert_success
  (($(elapsed_ms "$t0") < 6000)) || fail "-n --preempt took $(elapsed_ms "$t0")ms"
  assert_bg_status holder 80 10
  assert_equal "$(starts)" "holder pre"
  # acquire too; and with a holder without --preemptible, or one that never answers, -n is bounded.
  bg holder2 rlock run p --preemptible -t 1s -- "$T/job.sh" holder2 30
  wait_until -t 10 started holder2 || fail "the second holder did not start: $(bg_err holder2)"
  kill -STOP "$holder2_pid"
  t0=$(now_ms)
  run --separate-stderr rlock acquire p --preempt -n
  assert_success
  # Stopped, it cannot stop its tree: it waits for the lease (1s) to run out, and no longer than
  # that plus a second.
  (($(elapsed_ms "$t0") < 1000 + 1000 + SLACK_MS)) || fail "acquire -n --preempt took $(elapsed_ms "$t0")ms"
  kill -CONT "$holder2_pid"
}

# --- exit codes -------------------------------------------------------------------------------

@test "exit codes: busy and a --wait that ran out are 75 (-E); superseded is 79 (--superseded-exit-code), for run and acquire" {
  redis_start
  bg holder rlock run e -- sh -c '"$0" holder 0; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/job.sh" "$T/go"
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  run --separate-stderr rlock run e -n -- true
  assert_failure 75
  run --separate-stderr rlock run e -w 0.1s -- true
  assert_failure 75
  run --separate-stderr rlock run e -n -E 3 -- true
  assert_failure 3
  run --separate-stderr rlock acquire e -w 0.1s -E 4
  assert_failure 4
  # -E is the busy code only: a superseded waiter exits 79 (or its own code).
  enqueue w1 e 1 rlock run e -w 60s -E 3 --supersede -- "$T/job.sh" W1 0
  bg w2 rlock run e -w 60s --supersede --superseded-exit-code 42 -- "$T/job.sh" W2 0
  assert_bg_status w1 79 10
  wait_until -t 10 queue_is e 1 || fail "W2 did not take a place: $(status_json e)"
  bg w3 rlock acquire e -w 60s --supersede --superseded-exit-code 43
  assert_bg_status w2 42 10
  wait_until -t 10 queue_is e 1 || fail "W3 did not take a place: $(status_json e)"
  bg w4 rlock run e -w 60s --supersede -- "$T/job.sh" W4 0
  assert_bg_status w3 43 10
  touch "$T/go"
  assert_bg_status holder 0
  assert_bg_status w4 0
  assert_equal "$(starts)" "holder W4"
}

@test "exit codes: a preempted run exits 80, or --preempted-exit-code" {
  redis_start
  bg holder rlock run p --preemptible -- "$T/job.sh" holder 30
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  bg pre rlock run p --preempt -w 30s -- "$T/job.sh" pre 0
  assert_bg_status holder 80 15
  assert_bg_status pre 0 15
  bg holder2 rlock run p --preemptible --preempted-exit-code 0 -- "$T/job.sh" holder2 30
  wait_until -t 10 started holder2 || fail "the holder did not start: $(bg_err holder2)"
  bg pre2 rlock run p --preempt -w 30s -- "$T/job.sh" pre2 0
  assert_bg_status holder2 0 15
  assert_bg_status pre2 0 15
  assert_equal "$(starts)" "holder pre holder2 pre2"
}

@test "--cancel-in-progress: the newest request wins; older waiters exit 79, the running holder that gave it exits 80" {
  redis_start
  # The holder ignores --signal (TERM): its stop lasts --kill-after, while newer requests come
  # (each within a few hundred ms).
  bg holder rlock run c --cancel-in-progress --kill-after 2s -- sh -c 'trap "" TERM; exec "$0" holder 30' "$T/job.sh"
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  enqueue w1 c 1 rlock run c --cancel-in-progress -w 60s -- "$T/job.sh" W1 0
  bg w2 rlock run c --cancel-in-progress -w 60s -- "$T/job.sh" W2 0
  assert_bg_status w1 79 10
  grep -qF "pid $w2_pid " "$T/w1.err" || fail "W1 does not name W2: $(bg_err w1)"
  assert_bg_status holder 80 15
  grep -q -- "--cancel-in-progress" "$T/holder.err" || fail "the holder does not say it was cancelled: $(bg_err holder)"
  # In the words the user gave: not --preempt or --supersede, which it never typed.
  ! grep -qE -- '--(preempt|supersede)' "$T/holder.err" "$T/w1.err" ||
    fail "names options never given: $(bg_err holder) $(bg_err w1)"
  grep -qF -- "(--cancel-in-progress)" "$T/w1.err" || fail "W1 does not name its option: $(bg_err w1)"
  assert_bg_status w2 0 15
  assert_equal "$(starts)" "holder W2"
  run --separate-stderr rlock run c --cancel-in-progress -n -- true
  assert_usage_error
  run --separate-stderr rlock run c --cancel-in-progress --shared -- true
  assert_usage_error
}

@test "--cancel-in-progress, --preempt: a holder started without the flag is waited for, and the waiter says why" {
  redis_start
  # The holders run until the test has seen the waiter say why it waits.
  bg holder rlock run c -- sh -c '"$0" holder 0; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/job.sh" "$T/go"
  wait_until -t 10 started holder || fail "the holder did not start: $(bg_err holder)"
  bg w rlock run c --cancel-in-progress -w 30s -- "$T/job.sh" W 0
  wait_until -t 10 grep -q "not cancellable" "$T/w.err" || fail "the waiter says nothing: $(bg_err w)"
  bg_done holder && fail "the holder ended: $(bg_err holder)"
  touch "$T/go"
  assert_bg_status holder 0 15
  assert_bg_status w 0 15
  assert_equal "$(cat "$T/w.err")" \
    "rlock: c: the holder is not cancellable (started without --cancel-in-progress); waiting for it"
  assert_equal "$(starts)" "holder W"
  bg holder2 rlock run p -- sh -c '"$0" holder2 0; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/job.sh" "$T/go2"
  wait_until -t 10 started holder2 || fail "the holder did not start: $(bg_err holder2)"
  bg pre rlock acquire p --preempt -w 30s
  wait_until -t 10 grep -q "not preemptible" "$T/pre.err" || fail "the waiter says nothing: $(bg_err pre)"
  bg_done holder2 && fail "the holder ended: $(bg_err holder2)"
  touch "$T/go2"
  assert_bg_status holder2 0 15
  assert_bg_status pre 0 15
  assert_equal "$(cat "$T/pre.err")" \
    "rlock: p: the holder is not preemptible (started without --preemptible); waiting for it"
}

# --- Sentinel, Cluster, Redlock ---------------------------------------------------------------

# jobs_trio KEYBASE: min-hold, supersede and preempt, briefly, on whatever RLOCK_URL names.
jobs_trio() {
  local k=$1
  # min-hold: the second run of the tick is refused, the hold lingers.
  run --separate-stderr rlock run "$k-m" -n --min-hold 20s -- "$T/job.sh" m1 0
  assert_success
  run --separate-stderr rlock run "$k-m" -n --min-hold 20s -- "$T/job.sh" m2 0
  assert_failure 75
  stderr_has lingering
  is_lingering "$k-m" || fail "status does not say lingering: $(status_json "$k-m")"
  rlock release "$k-m" --force >/dev/null
  # supersede
  bg holder rlock run "$k-s" -- sh -c '"$0" sholder 0; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/job.sh" "$T/go"
  wait_until -t 10 started sholder || fail "the holder did not start: $(bg_err holder)"
  enqueue w1 "$k-s" 1 rlock run "$k-s" --wait 60s --supersede -- "$T/job.sh" W1 0
  bg w2 rlock run "$k-s" --wait 60s --supersede -- "$T/job.sh" W2 0
  assert_bg_status w1 79 10
  grep -qF "pid $w2_pid " "$T/w1.err" || fail "W1 does not name W2: $(bg_err w1)"
  wait_until -t 10 queue_is "$k-s" 1 || fail "W2 did not take a place: $(status_json "$k-s")"
  touch "$T/go"
  assert_bg_status holder 0
  assert_bg_status w2 0
  # preempt
  write_tree
  : >"$T/pids"
  bg pholder rlock run "$k-p" --preemptible -- "$T/tree.sh"
  wait_until -t 10 tree_running || fail "the holder's tree did not start: $(bg_err pholder)"
  bg pre rlock run "$k-p" --preempt --wait 30s -- sh -c 'echo "new $(date +%s%3N)" >>"$W"'
  assert_bg_status pholder 80 15
  assert_bg_status pre 0 15
  local p pids
  mapfile -t pids <"$T/pids"
  for p in "${pids[@]}"; do
    ! kill -0 "$p" 2>/dev/null || fail "process $p of the preempted tree is still alive"
  done
  local new last_old
  new=$(awk '$1 == "new" { print $2 }' "$W")
  last_old=$(awk '$1 == "old" { v = $2 } END { print v }' "$W")
  ((last_old < new)) || fail "the old tree wrote at $last_old, after the preemptor started at $new"
  assert_equal "$(starts)" "m1 sholder W2"
}

@test "Sentinel: min-hold, supersede and preempt" {
  srv_cli "$MASTER_PORT" flushall >/dev/null
  export RLOCK_URL=$SENTINEL_URL
  jobs_trio sent
}

@test "Cluster: min-hold, supersede and preempt" {
  cluster_wait
  cluster_flush
  export RLOCK_URL=$CLUSTER_URL
  jobs_trio clu
}

@test "Redlock: min-hold keeps the lock on a majority after the run" {
  local urls=() u
  for u in $JOBS_REDLOCK_URLS; do
    srv_cli "${u##*:}" flushall >/dev/null
    urls+=(-u "$u")
  done
  # 2s: the second run, started at once, comes well inside it.
  run --separate-stderr rlock run nightly "${urls[@]}" -n --min-hold 2s -- "$T/job.sh" r1 0
  assert_success
  run --separate-stderr rlock run nightly "${urls[@]}" -n --min-hold 2s -- "$T/job.sh" r2 0
  assert_failure 75
  stderr_has lingering
  local n=0
  for u in $JOBS_REDLOCK_URLS; do
    [[ $(srv_cli "${u##*:}" exists "rlock:{nightly}" | tr -d '\r') == 1 ]] && n=$((n + 1))
  done
  ((n >= 2)) || fail "the lingering hold is on $n of 3 masters"
  # After the hold, the next tick runs.
  wait_until -t 10 rlock run nightly "${urls[@]}" -n -- "$T/job.sh" r3 0 2>/dev/null ||
    fail "the hold did not end"
  assert_equal "$(starts)" "r1 r3"
}
