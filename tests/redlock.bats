#!/usr/bin/env bats
# Redlock: several URLs of independent masters make a quorum. Mutual exclusion and strictly
# increasing fences under contention, with masters killed, restarted empty, stopped or cut off
# by a partition; the per-node timeout; status, list, release --force, extend, token files and
# keepers on a quorum; members of every kind (TLS, unix socket, Sentinel); what is refused.
#
# Every test starts its own masters (m1..mN, real redis-servers on free loopback ports).

load helpers/common
load helpers/servers
load helpers/redlock
load helpers/contention
load faults/helpers/faults
# The fault helpers live one directory down.
FAULTS_HELPERS=$BATS_TEST_DIRNAME/faults/helpers

BATS_TEST_TIMEOUT=240

# Stress counts are multiplied by RLOCK_TEST_SCALE (default 1; the sanitizer pass of scripts/test
# sets it below 1), read here, before common_setup clears every RLOCK_* variable.
REDLOCK_SCALE=${RLOCK_TEST_SCALE:-1}
redlock_scaled() {
  awk -v n="$1" -v s="$REDLOCK_SCALE" 'BEGIN { v = int(n * s); print (v < 1 ? 1 : v) }'
}

setup_file() {
  # For the Cluster test, created while the tests before it run.
  cluster_start_bg 3
}

teardown_file() {
  servers_teardown_file
}

setup() {
  faults_setup
  export T
  export XDG_RUNTIME_DIR=$T/run
  mkdir -m 700 "$XDG_RUNTIME_DIR"
}

teardown() {
  common_teardown
}

# ---------------------------------------------------------------------------------------------
# Contention: 8 loops of `rlock run` on one key

# Whether the counter has reached $1 (it is empty for a moment while a section rewrites it).
count_at_least() {
  local n
  n=$(cat "$T/count")
  ((${n:-0} >= $1))
}

# start_loops LOOPS RUNS [RLOCK ARGS...]
start_loops() {
  local loops=$1 runs=$2 w
  shift 2
  for w in $(seq 1 "$loops"); do
    bg "loop$w" sh "$T/loop.sh" "$T" "$w" "$runs" "$@"
  done
}

# check_loops TOTAL: no run failed, no overlap, the counter is exact, fences strictly increase.
check_loops() {
  local total=$1
  if [[ -e $T/errors ]]; then
    fail "runs failed: $(cat "$T/errors"); stderr: $(cat "$T"/stderr.* | sort | uniq -c | head -20)"
  fi
  assert_file_not_exists "$T/overlaps"
  assert_equal "$(cat "$T/count")" "$total"
  assert_equal "$(wc -l <"$T/fences")" "$total"
  run fences_increase "$T/fences"
  assert_success
}

# 8 loops of 6 runs (fewer runs when scaled down): 48 runs, 36 of them after the kill.
contention_size() {
  LOOPS=8
  RUNS=$(redlock_scaled 6)
  TOTAL=$((LOOPS * RUNS))
}

# The loops run on all 5 masters for a quarter of their runs, then with 2 of them killed.
@test "5 masters, 8 concurrent loops of 6 runs, 2 of the masters killed midway: every run succeeds, the counter is exact, no overlap, fences strictly increase" {
  contention_size
  masters_start 5
  write_section
  local t0
  t0=$(now_ms)
  start_loops "$LOOPS" "$RUNS" "${U[@]}"
  wait_until -t 100 count_at_least $((TOTAL / 4)) || fail "the loops did not get going: count $(cat "$T/count")"
  echo "# $(($(cat "$T/count"))) runs on 5 masters in $(elapsed_ms "$t0")ms" >&3
  m_kill 2
  m_kill 5
  local at
  at=$(cat "$T/count")
  wait_until -t 200 all_loops_done "$LOOPS" || fail "the loops did not finish in 200s; count $(cat "$T/count")"
  echo "# masters killed at count $at of $TOTAL" >&3
  ((at < TOTAL)) || fail "the loops were done before the masters were killed"
  check_loops "$TOTAL"
  wait_until -t 5 free_everywhere counter || fail "the lock is still on m$(held_on counter)"
}

# assert_names_masters I...: stderr names master I (its URL) for each I, and no other.
assert_names_masters() {
  local i
  for i in "${!M_PORT[@]}"; do
    if [[ " $* " == *" $i "* ]]; then
      [[ $stderr == *"$(m_url "$i")"* ]] || fail "the error does not name m$i ($(m_url "$i")): '$stderr'"
    else
      [[ $stderr != *"$(m_url "$i")"* ]] || fail "the error names m$i, which answered: '$stderr'"
    fi
  done
}

@test "3 of 5 masters down: run, run -n, run -w, acquire and status exit 69 naming the 3, never 75" {
  masters_start 5
  run --separate-stderr rlock run k "${U[@]}" -- true
  assert_success
  m_kill 1
  m_kill 3
  m_kill 4
  local i
  for i in 1 2 3 4 5; do
    case $i in
      1) run --separate-stderr rlock run k "${U[@]}" -- touch "$T/ran" ;;
      2) run --separate-stderr rlock run k -n "${U[@]}" -- touch "$T/ran" ;;
      3) run --separate-stderr rlock run k -w 3 "${U[@]}" -- touch "$T/ran" ;;
      4) run --separate-stderr rlock acquire k "${U[@]}" ;;
      # Each master gets 2% of the TTL: 400ms here. At -t 5s (100ms) a live master slowed by a
      # loaded machine was named with the dead ones.
      5) run --separate-stderr rlock acquire k -n -t 20s "${U[@]}" ;;
    esac
    assert_error_exit 69
    [[ $stderr == *"no majority of the 5 Redis masters answered (3 needed)"* ]] ||
      fail "case $i: unexpected message: '$stderr'"
    assert_names_masters 1 3 4
  done
  assert_file_not_exists "$T/ran"
  run --separate-stderr rlock status k "${U[@]}"
  assert_error_exit 69
  assert_names_masters 1 3 4
  # Nothing was left on the masters that answered.
  assert free_everywhere k
}

# How many scripts (EVAL, EVALSHA, FCALL) master I has been sent.
script_calls() {
  mcli "$1" info commandstats | tr -d '\r' | awk -F'[:,=]' '/^cmdstat_(eval(sha)?|fcall):/ {
    for (i = 2; i < NF; i += 2) if ($i == "calls" || $i == "failed_calls" || $i == "rejected_calls") n += $(i + 1)
  } END { print n + 0 }'
}
script_calls_above() { (($(script_calls "$1") > $2)); }

@test "a run waiting (-w) for a held lock when 3 of 5 masters go down ends with 69, not 75" {
  masters_start 5
  rlock acquire k "${U[@]}" >/dev/null || fail "acquire"
  local base
  base=$(script_calls 1)
  # It keeps trying until its wait runs out, then says why it could not take the lock. (It has
  # tried 6 times within tens of milliseconds: 1.5s leaves it time to, on a loaded machine.)
  bg waiter rlock run k -w 1.5 "${U[@]}" -- touch "$T/ran"
  # It has tried (and found the lock busy) a few times.
  wait_until -t 10 script_calls_above 1 $((base + 6)) || fail "the waiter did not try: $(bg_err waiter)"
  bg_done waiter && fail "the waiter ended early: $(bg_err waiter)"
  m_kill 1
  m_kill 3
  m_kill 4
  bg_wait waiter 20
  assert_equal "$BG_STATUS" 69
  [[ $(bg_err waiter) == *"no majority of the 5 Redis masters answered (3 needed)"* ]] ||
    fail "unexpected message: $(bg_err waiter)"
  assert_file_not_exists "$T/ran"
}

# ---------------------------------------------------------------------------------------------
# Slow, restarted and cut-off masters

# acquire_release_times N [RLOCK ARGS...]: N times acquire k and release it; sets MAX_ACQ and
# MAX_REL (ms) to the slowest of each; checks the lock is on every master that answers between.
acquire_release_times() {
  local n=$1 i t0 took tok
  shift
  MAX_ACQ=0 MAX_REL=0
  for i in $(seq 1 "$n"); do
    t0=$(now_ms)
    tok=$(rlock acquire k "$@" 2>"$T/acq.err") || fail "acquire $i failed: $(cat "$T/acq.err")"
    took=$(elapsed_ms "$t0")
    ((took > MAX_ACQ)) && MAX_ACQ=$took
    held_everywhere k || fail "acquire $i: the lock is on masters '$(held_on k)' only"
    t0=$(now_ms)
    RLOCK_TOKEN=$tok rlock release k "$@" 2>"$T/rel.err" || fail "release $i failed: $(cat "$T/rel.err")"
    took=$(elapsed_ms "$t0")
    ((took > MAX_REL)) && MAX_REL=$took
    free_everywhere k || fail "release $i: the lock is still on masters '$(held_on k)'"
  done
}

@test "one master stopped (SIGSTOP): acquire and release each take about the per-node timeout, not more; run works" {
  masters_start 3
  # The same with every master answering, for the machine's own pace (a sanitizer build is slow).
  acquire_release_times 2 --node-timeout 200ms "${U[@]}"
  local base=$((MAX_ACQ > MAX_REL ? MAX_ACQ : MAX_REL))
  local limit=$((base + 700 > 1000 ? base + 700 : 1000))
  m_stop 3
  # Once: each acquire and release is a new process, which waits for m3 as the one before did.
  acquire_release_times 1 --node-timeout 200ms "${U[@]}"
  echo "# --node-timeout 200ms: all answer: max ${base}ms; m3 stopped: acquire ${MAX_ACQ}ms, release ${MAX_REL}ms" >&3
  ((MAX_ACQ < limit)) || fail "an acquire took ${MAX_ACQ}ms with m3 stopped (200ms per node, limit ${limit}ms)"
  ((MAX_REL < limit)) || fail "a release took ${MAX_REL}ms with m3 stopped (200ms per node, limit ${limit}ms)"

  # run, with the default per-node timeout (2% of the TTL: 200ms). (A renewal with m3 stopped
  # waits for it the per-node timeout and succeeds: tests/protocol/redlock_test.cpp,
  # ARenewalWithAMasterStoppedWaitsForItThePerNodeTimeoutAndSucceeds.)
  run --separate-stderr rlock run k -t 10s "${U[@]}" -- sh -c 'echo "fence $RLOCK_FENCE"'
  assert_success
  assert_output --regexp '^fence [0-9]+$'
  wait_until -t 5 free_everywhere k || fail "the lock is still on m$(held_on k)"
  # status has no TTL: each master gets the --io-timeout.
  local tok t0 took
  tok=$(rlock acquire k --node-timeout 200ms "${U[@]}") || fail "acquire"
  t0=$(now_ms)
  run --separate-stderr rlock status k --io-timeout 300ms "${U[@]}"
  took=$(elapsed_ms "$t0")
  assert_success
  assert_line "k: 2 of 3 masters agree"
  assert_line --regexp "^k: $(m_url 3) did not answer: "
  ((took < limit)) || fail "status took ${took}ms with m3 stopped (--io-timeout 300ms, limit ${limit}ms)"
  RLOCK_TOKEN=$tok rlock release k --io-timeout 300ms "${U[@]}" 2>/dev/null || fail "release"
  # A long TTL: 2% of it would be 72s, but a master never gets more than the --io-timeout.
  t0=$(now_ms)
  tok=$(rlock acquire k -t 1h --io-timeout 300ms "${U[@]}") || fail "acquire -t 1h"
  took=$(elapsed_ms "$t0")
  ((took < limit)) || fail "acquire -t 1h --io-timeout 300ms took ${took}ms with m3 stopped (limit ${limit}ms)"
  m_cont 3
}

held_on_all_3() { [[ $(held_on "$1") == "1 2 3" ]]; }
refused_at_least() { (($(grep -c 75 "$T/codes") >= $1)); }

@test "a master restarted empty while a holder runs: no second holder, the lock and its fence are set there again, fences increase" {
  masters_start 3
  local nt=(--node-timeout 300ms)
  # The holder holds until the test has seen all it looks for ($T/go).
  bg holder rlock run k -t 3s "${nt[@]}" "${U[@]}" -- \
    sh -c 'echo "$RLOCK_FENCE" >"$0"; exec "$CS" "$WLOG" holder "until:$1"' "$T/fences" "$T/go"
  wait_cs holder holder
  local f1
  f1=$(cat "$T/fences")
  # Contenders with -n all along (the URLs from RLOCK_URL, split at spaces).
  cat >"$T/contend.sh" <<'CONTEND'
while [ ! -e "$1/stop" ]; do
  rlock run k -n --node-timeout 300ms -- "$CS" "$WLOG" intruder 2>>"$1/contend.err"
  echo $? >>"$1/codes"
done
CONTEND
  RLOCK_URL=$(m_url_list) bg contend sh "$T/contend.sh" "$T"
  wait_until test -s "$T/codes" || fail "the contenders did not start: $(bg_err contend)"
  m_restart 1
  # The holder's next renewal sets the lock there again, with a fence counter at least its own.
  wait_until -t 3 held_on_all_3 k || fail "the lock was not set again on m1: on '$(held_on k)'"
  local f
  f=$(mcli 1 get 'rlock:{k}:fence')
  [[ $f =~ ^[0-9]+$ ]] && ((f >= f1)) || fail "the fence counter on m1 is '$f', below the holder's $f1"
  # Contenders go on while the lock is back on m1: 5 more refused before the holder ends.
  local refused
  refused=$(grep -c 75 "$T/codes")
  wait_until -t 10 refused_at_least $((refused + 5)) || fail "only $(grep -c 75 "$T/codes") contenders were refused"
  touch "$T/go"
  bg_wait holder 20
  assert_equal "$BG_STATUS" 0
  touch "$T/stop"
  bg_wait contend 20
  assert_no_overlap
  local codes
  codes=$(sort -u "$T/codes" | tr '\n' ' ')
  [[ $codes == "75 " || $codes == "0 75 " ]] || fail "contenders exited with: $codes ($(cat "$T/contend.err"))"
  # Later holders get larger fences.
  local i
  for i in 1 2 3; do
    rlock run k "${nt[@]}" "${U[@]}" -- sh -c 'echo "$RLOCK_FENCE"' >>"$T/fences" || fail "run $i failed"
  done
  run fences_increase "$T/fences"
  assert_success
}

@test "a holder cut off from 2 of 3 masters: its child is stopped before the validity ends (76), and only then does another get the lock" {
  masters_start 3
  proxy_start p2 "${M_PORT[2]}"
  proxy_start p3 "${M_PORT[3]}"
  local via=(-u "$(m_url 1)" -u "redis://127.0.0.1:$p2_PORT" -u "redis://127.0.0.1:$p3_PORT")
  bg holder rlock run k -t 2s --node-timeout 200ms "${via[@]}" -- "$CS" "$WLOG" holder 60 0.1
  wait_cs holder holder
  local pid paused stopped
  pid=$(cs_pid holder)
  paused=$(mono_ns)
  proxy_pause p2
  proxy_pause p3
  # A second holder, straight to the masters.
  bg second rlock run k -w 30 "${U[@]}" -- "$CS" "$WLOG" second
  bg_wait holder 10
  assert_equal "$BG_STATUS" 76
  stopped=$(awk -v p="$pid" '($1 == "stop" || $1 == "end") && $3 == p { print $2; exit }' "$WLOG")
  [[ -n $stopped ]] || fail "the holder's child recorded no stop: $(cat "$WLOG")"
  echo "# the child was stopped $(((stopped - paused) / 1000000))ms after the partition" >&3
  ((stopped - paused < 2000000000)) || fail "the child ran $(((stopped - paused) / 1000000))ms past the partition (TTL 2s)"
  bg_wait second 30
  assert_equal "$BG_STATUS" 0
  cs_started second || fail "the second holder's section did not run: $(bg_err second)"
  assert_no_overlap
  grep -qi lost "$T/holder.err" || fail "the holder did not say it lost the lock: $(bg_err holder)"
  proxy_resume p2
  proxy_resume p3
}

# The pid of this test's keeper: a process named "rlock keeper" that carries the test's mark.
test_keeper() {
  local p
  for p in $(pgrep -x "rlock keeper"); do
    grep -qzxF "RLOCKTEST_MARK=$RLOCKTEST_MARK" "/proc/$p/environ" 2>/dev/null && echo "$p" && return 0
  done
  return 1
}

# A run (k) and a keeper (j) at once, so that they learn it at the same renewals.
@test "a lock removed from 2 of 3 masters is lost at the next renewal, and given back on the third: a run's child is stopped (76); a keeper's release reports the loss" {
  masters_start 3
  bg holder rlock run k -t 3s --node-timeout 300ms "${U[@]}" -- "$CS" "$WLOG" holder 60 0.1
  local tok t0
  tok=$(rlock acquire j --keepalive -t 3s --node-timeout 300ms "${U[@]}" --pid $$) || fail "acquire"
  assert held_everywhere j
  wait_cs holder holder
  # Removed from one master only: the holder sets it there again at its next renewal.
  mcli 3 del 'rlock:{k}' >/dev/null
  wait_until -t 3 held_on_all_3 k || fail "the lock was not set again on m3: on '$(held_on k)'"
  bg_done holder && fail "the holder ended: $(bg_err holder)"
  # Removed from a majority: lost. (The run and the keeper are stopped meanwhile: a renewal
  # between the two deletions would find the lock on a majority and set it again on m1.)
  local keeper
  keeper=$(test_keeper) || fail "no keeper runs"
  kill -STOP "$holder_pid" "$keeper"
  mcli 1 del 'rlock:{k}' 'rlock:{j}' >/dev/null
  mcli 2 del 'rlock:{k}' 'rlock:{j}' >/dev/null
  kill -CONT "$holder_pid" "$keeper"
  t0=$(now_ms)
  # The keeper learns it at its next renewal (every TTL/3: 1s) and gives m3's copy back then,
  # before that copy's TTL would end it (its PTTL is over 2s, renewed every second).
  wait_until -t 5 free_everywhere j || fail "j is still on m$(held_on j) (PTTL $(mcli 3 pttl 'rlock:{j}')ms)"
  (($(elapsed_ms "$t0") < 2000)) || fail "m3's copy of j went only after $(elapsed_ms "$t0")ms: it expired, nobody gave it back"
  bg_wait holder 5
  assert_equal "$BG_STATUS" 76
  grep -qi lost "$T/holder.err" || fail "the holder did not say it lost the lock: $(bg_err holder)"
  [[ -n $(awk '$1 == "stop"' "$WLOG") ]] || fail "the child was not stopped: $(cat "$WLOG")"
  # It gave the lock back on the master where its token still owned it (m3, set again above).
  [[ $(held_on k) == "" ]] || fail "after the run exited, its lock is still on m$(held_on k) (PTTL $(mcli 3 pttl 'rlock:{k}')ms)"
  RLOCK_TOKEN=$tok run --separate-stderr rlock release j "${U[@]}"
  # release reports the loss (exit 1, SPEC: Tokens between invocations).
  [[ $status -eq 1 && $stderr == *"j was lost at"* ]] || fail "release after the loss: exit $status: '$stderr'"
}

@test "release and extend with 2 of 3 masters down: 69 naming them, not 'not held' (1)" {
  masters_start 3
  local tok
  tok=$(rlock acquire k "${U[@]}") || fail "acquire"
  m_kill 2
  m_kill 3
  # Each retries for --io-timeout (default 2s) before it gives up: shortened here.
  RLOCK_TOKEN=$tok run --separate-stderr rlock release k --io-timeout 300ms "${U[@]}"
  assert_error_exit 69
  [[ $stderr == *"$(m_url 2)"* && $stderr == *"$(m_url 3)"* ]] || fail "the error does not name m2 and m3: '$stderr'"
  RLOCK_TOKEN=$tok run --separate-stderr rlock extend k -t 10s --io-timeout 300ms "${U[@]}"
  assert_error_exit 69
  [[ $stderr == *"$(m_url 2)"* && $stderr == *"$(m_url 3)"* ]] || fail "the error does not name m2 and m3: '$stderr'"
}

@test "a run whose masters go down (2 of 3) just before the child ends is not told it lost the lock: as with one Redis, a warning and the child's status" {
  masters_start 3
  # The child kills two masters and exits 7 long before the first renewal (TTL 1.5s: at 500ms). The
  # release is then retried until the lock's validity ends: a TTL, not the default 30s.
  run --separate-stderr rlock run k -t 1500ms "${U[@]}" -- sh -c 'kill -KILL "$0" "$1"; while kill -0 "$0" 2>/dev/null || kill -0 "$1" 2>/dev/null; do sleep 0.05; done; exit 7' \
    "${M_PID[2]}" "${M_PID[3]}"
  M_PID[2]= M_PID[3]=
  [[ $stderr != *"no longer owned"* ]] || fail "rlock says the token no longer owned the lock, which it cannot know: '$stderr'"
  [[ $status -eq 7 ]] || fail "expected the child's status 7, got $status: '$stderr'"
  [[ $stderr == *"could not release k"* ]] || fail "no warning that the lock could not be released: '$stderr'"
}

@test "leftovers on a minority of masters, nobody with a majority: -n retries a little and gives 75, -w waits for them to expire" {
  masters_start 3
  other_holder 1 k >/dev/null
  mcli 1 pexpire 'rlock:{k}' 2000 >/dev/null
  other_holder 2 k >/dev/null
  mcli 2 pexpire 'rlock:{k}' 2000 >/dev/null
  local t0 took
  t0=$(now_ms)
  run --separate-stderr rlock run k -n "${U[@]}" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_failure 75
  assert_file_not_exists "$T/ran"
  ((took < 1500)) || fail "-n took ${took}ms"
  [[ $(held_on k) == "1 2" ]] || fail "the attempt left the lock on '$(held_on k)'"
  # -w: the leftovers expire (made 300ms from now), then the lock is taken.
  mcli 1 pexpire 'rlock:{k}' 300 >/dev/null
  mcli 2 pexpire 'rlock:{k}' 300 >/dev/null
  run --separate-stderr rlock run k -w 10 "${U[@]}" -- sh -c 'redis-cli -p "$0" exists "rlock:{k}"' "${M_PORT[1]}"
  assert_success
  assert_output 1
}

# --min-hold on a quorum: the minimum is recorded by phase 2, once a majority holds the lock, and
# the hold lingers after its release on every master; a failed attempt's give-back never lingers,
# even on a master that recorded the minimum: tests/protocol/redlock_test.cpp
# (TheMinimumHoldIsRecordedByPhaseTwoNotPhaseOne, AFailedAttemptsGiveBackNeverLingersEvenWhereItsMinimumWasRecorded);
# a run's lingering hold on a quorum, said as such: jobs.bats (Redlock: min-hold ...).

# ---------------------------------------------------------------------------------------------
# status, list, release --force, extend, token files and keepers on a quorum

# other_holder I KEY: KEY taken on master I alone by another process; prints that process's pid.
other_holder() {
  sh -c 'rlock acquire "$1" -t 60s -u "$2" >/dev/null && echo $$' sh "$2" "$(m_url "$1")" ||
    fail "could not take $2 on m$1 alone"
}

@test "status on a quorum: all agree, a master where it is free, one where another holds it, one that is down" {
  require_jq
  masters_start 3
  local tok_a tok_b tok_c
  tok_a=$(rlock acquire a "${U[@]}") || fail "acquire a"
  tok_b=$(rlock acquire b "${U[@]}") || fail "acquire b"
  tok_c=$(rlock acquire c "${U[@]}") || fail "acquire c"
  # The holders' pids as m1 has them (each acquire had its own caller).
  local me
  me=$(mcli 1 hget 'rlock:{a}:info' pid)
  [[ $me =~ ^[0-9]+$ ]] || fail "no holder pid on m1"

  # All three agree: the table alone, no line about the masters.
  run --separate-stderr rlock status a "${U[@]}"
  assert_success
  assert_equal "$stderr" ""
  assert_line --index 1 --regexp "^a +held +[^ ]+ +$me "
  refute_output --partial agree
  assert_equal "${#lines[@]}" 2
  run --separate-stderr rlock status a "${U[@]}" --json
  assert_success
  assert_equal "$(jq -r '.held, .agreeing, (.masters | length), ([.masters[].agrees] | all), ([.masters[].url] | join(" "))' <<<"$output" | tr '\n' ' ')" \
    "true 3 3 true $(m_url_list) "

  # b: deleted on m2, so free there.
  me=$(mcli 1 hget 'rlock:{b}:info' pid)
  mcli 2 del 'rlock:{b}' 'rlock:{b}:info' >/dev/null
  run --separate-stderr rlock status b "${U[@]}"
  assert_success
  assert_line --index 1 --regexp "^b +held +[^ ]+ +$me "
  assert_line "b: 2 of 3 masters agree"
  assert_line "b: $(m_url 2) disagrees: free there"
  assert_equal "${#lines[@]}" 4
  run --separate-stderr rlock status b "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.held, .pid, .agreeing, [.masters[] | [.agrees, .held, .error]]]' <<<"$output")" \
    "[true,$me,2,[[true,true,null],[false,false,null],[true,true,null]]]"

  # c: held on m2 by another process.
  me=$(mcli 1 hget 'rlock:{c}:info' pid)
  mcli 2 del 'rlock:{c}' 'rlock:{c}:info' >/dev/null
  local other
  other=$(other_holder 2 c)
  [[ $other != "$me" ]] || fail "the other holder has the same pid"
  run --separate-stderr rlock status c "${U[@]}"
  assert_success
  assert_line --index 1 --regexp "^c +held +[^ ]+ +$me "
  assert_line "c: 2 of 3 masters agree"
  assert_line --regexp "^c: $(m_url 2) disagrees: held there by [^ ]+ pid $other\$"
  run --separate-stderr rlock status c "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.pid, .agreeing, [.masters[] | [.agrees, .held, .pid]]]' <<<"$output")" \
    "[$me,2,[[true,true,$me],[false,true,$other],[true,true,$me]]]"

  # A lock held on one master only is free: the majority says so.
  other_holder 3 d >/dev/null
  run --separate-stderr rlock status d "${U[@]}"
  assert_failure 1
  assert_line --index 1 --regexp '^d +free '
  assert_line "d: 2 of 3 masters agree"
  assert_line --regexp "^d: $(m_url 3) disagrees: held there by "

  # All keys (a scan on every master): a, b and c are held by a majority, d is not.
  run --separate-stderr rlock status "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.[] | .key] | sort' <<<"$output")" '["a","b","c"]'

  # m3 down: a (held on m1 and m2) is still held; m3 did not answer.
  me=$(mcli 1 hget 'rlock:{a}:info' pid)
  m_kill 3
  run --separate-stderr rlock status a "${U[@]}"
  assert_success
  assert_line --index 1 --regexp "^a +held +[^ ]+ +$me "
  assert_line "a: 2 of 3 masters agree"
  assert_line --regexp "^a: $(m_url 3) did not answer: .+"
  run --separate-stderr rlock status a "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.held, .agreeing, [.masters[] | [.agrees, (.error != null)]]]' <<<"$output")" \
    "[true,2,[[true,false],[true,false],[false,true]]]"
  # All keys: b and c, held on m1 and m3 only, have lost their majority with m3.
  run --separate-stderr rlock status "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.[] | .key] | sort' <<<"$output")" '["a"]'
}

@test "status after a master restarted and took the lock back from the holder's renewal still shows the holder" {
  require_jq
  masters_start 3
  bg holder rlock run k -t 1500ms --node-timeout 300ms "${U[@]}" -- sh -c 'echo "$PPID" >"$0"; sleep 8' "$T/rlock.pid"
  wait_until held_on_all_3 k || fail "the holder did not get the lock: $(bg_err holder)"
  m_restart 1
  wait_until -t 3 held_on_all_3 k || fail "the lock was not set again on m1"
  run --separate-stderr rlock status k "${U[@]}" --json
  assert_success
  local want
  want=$(mcli 2 hget 'rlock:{k}:info' pid)
  assert_equal "$(jq -r '.held, .agreeing' <<<"$output" | tr '\n' ' ')" "true 3 "
  assert_equal "$(jq -r '.pid' <<<"$output")" "$want"
  [[ $(jq -r '.host' <<<"$output") != "" ]] || fail "status shows no host: $output"
  [[ $(jq -r '.command' <<<"$output") == *sleep* ]] || fail "status shows no command: $output"
}

@test "list on a quorum shows the keys a majority holds; release --force removes a lock from every master" {
  require_jq
  masters_start 3
  local tok
  tok=$(rlock acquire held "${U[@]}") || fail "acquire held"
  rlock acquire other "${U[@]}" >/dev/null || fail "acquire other"
  # minority: on m2 only; partly: on m1 and m3 (a majority) after m2 lost it.
  other_holder 2 minority >/dev/null
  rlock acquire partly "${U[@]}" >/dev/null || fail "acquire partly"
  mcli 2 del 'rlock:{partly}' 'rlock:{partly}:info' >/dev/null
  run --separate-stderr rlock list "${U[@]}"
  assert_success
  assert_equal "$(awk 'NR > 1 && $2 == "held" { print $1 }' <<<"$output" | sort | tr '\n' ' ')" "held other partly "
  refute_output --partial minority
  run --separate-stderr rlock list "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.[].key] | sort' <<<"$output")" '["held","other","partly"]'
  run --separate-stderr rlock list 'p*' "${U[@]}" --json
  assert_success
  assert_equal "$(jq -c '[.[].key]' <<<"$output")" '["partly"]'

  # release --force: gone from every master, and it says whose it was.
  run --separate-stderr rlock release held --force "${U[@]}"
  assert_success
  [[ $stderr == *"removed held"* ]] || fail "release --force did not say what it removed: '$stderr'"
  assert free_everywhere held
  RLOCK_TOKEN=$tok run --separate-stderr rlock release held "${U[@]}"
  assert_failure 1
  # On a lock only part of the masters hold, too.
  run --separate-stderr rlock release partly --force "${U[@]}"
  assert_success
  assert free_everywhere partly
  run --separate-stderr rlock release nothing --force "${U[@]}"
  assert_failure 1
}

# The smallest PTTL of lock KEY on the masters that hold it (-2 where it is missing).
min_pttl() {
  local i t min=
  for i in "${!M_PORT[@]}"; do
    t=$(mcli "$i" pttl "rlock:{$1}")
    [[ -z $min ]] || ((t < min)) && min=$t
  done
  echo "$min"
}

@test "extend on a quorum needs -t and resets the TTL on every master; acquire --token-file and release" {
  require_jq
  masters_start 3
  # acquire --json: the fence is the one every master's counter was raised to, and status shows it.
  run --separate-stderr rlock acquire j --json "${U[@]}"
  assert_success
  local fence i
  fence=$(jq -r .fence <<<"$output")
  [[ $fence =~ ^[0-9]+$ ]] || fail "no fence in acquire --json: $output"
  for i in 1 2 3; do
    assert_equal "$(mcli "$i" get 'rlock:{j}:fence')" "$fence"
  done
  assert_equal "$(rlock status j --json "${U[@]}" | jq -r .fence)" "$fence"
  RLOCK_TOKEN=$(jq -r .token <<<"$output") rlock release j "${U[@]}" || fail "release j"

  # 30s: long enough to outlast the checks below on a loaded machine, short of the 60s extend.
  run --separate-stderr rlock acquire k -t 30s --token-file "$T/token" "${U[@]}"
  assert_success
  assert_output ""
  assert held_everywhere k
  (($(min_pttl k) <= 30000)) || fail "PTTL $(min_pttl k) after acquire -t 30s"
  [[ $(stat -c %a "$T/token") == 600 ]] || fail "the token file has mode $(stat -c %a "$T/token")"
  [[ $(mcli 2 get 'rlock:{k}') == "$(cat "$T/token")" ]] || fail "m2 does not hold the token of the file"

  run --separate-stderr rlock extend k --token-file "$T/token" "${U[@]}"
  assert_usage_error
  [[ $stderr == *-t* ]] || fail "the error does not mention -t: '$stderr'"
  run --separate-stderr rlock extend k -t 60s --token-file "$T/token" "${U[@]}"
  assert_success
  local left
  left=$(min_pttl k)
  ((left > 50000)) || fail "after extend -t 60s the smallest PTTL is $left"

  # A token that does not own it: exit 1, nothing changed.
  RLOCK_TOKEN=0123456789abcdef0123456789abcdef run --separate-stderr rlock extend k -t 5s "${U[@]}"
  assert_failure 1
  RLOCK_TOKEN=0123456789abcdef0123456789abcdef run --separate-stderr rlock release k "${U[@]}"
  assert_failure 1
  assert held_everywhere k

  run --separate-stderr rlock release k --token-file "$T/token" "${U[@]}"
  assert_success
  assert free_everywhere k
  run --separate-stderr rlock extend k -t 5s --token-file "$T/token" "${U[@]}"
  assert_failure 1
}

@test "acquire --keepalive on a quorum: the keeper renews past the TTL on every master, and release gives it back" {
  masters_start 3
  cat >"$T/script.sh" <<'SCRIPT'
tok=$(rlock acquire k --keepalive -t 1500ms --node-timeout 300ms "$@") || exit 9
echo "$tok" >"$T/tok"
while [ ! -e "$T/go" ]; do sleep 0.05; done
RLOCK_TOKEN=$tok rlock release k "$@" || exit 8
touch "$T/released"
sleep 1000
SCRIPT
  bg script bash "$T/script.sh" "${U[@]}"
  wait_until test -s "$T/tok" || fail "no lock: $(bg_err script)"
  assert held_everywhere k
  # Held past its TTL (1.8s, three renewals): the keeper renewed it on every master.
  local t0
  t0=$(now_ms)
  while (($(elapsed_ms "$t0") < 1800)); do
    held_everywhere k || fail "the lock lapsed $(elapsed_ms "$t0")ms after acquire: on '$(held_on k)'"
    sleep 0.1
  done
  [[ $(mcli 3 get 'rlock:{k}') == "$(cat "$T/tok")" ]] || fail "m3 does not hold the token"
  touch "$T/go"
  wait_until test -e "$T/released" || fail "release failed: $(bg_err script)"
  wait_until -t 5 free_everywhere k || fail "the lock is still on m$(held_on k)"
  # A script killed with SIGKILL: the keeper releases on every master at once.
  bg killed bash -c 'tok=$(rlock acquire j --keepalive -t 30s "$@") && echo "$tok" >"$T/tok2" && sleep 1000' sh "${U[@]}"
  wait_until test -s "$T/tok2" || fail "no lock j: $(bg_err killed)"
  assert held_everywhere j
  kill -KILL "$killed_pid"
  wait_until -t 3 free_everywhere j || fail "j is still on masters $(held_on j) after its script died"
}

# ---------------------------------------------------------------------------------------------
# Members of every kind, what is refused, two masters

@test "a quorum of a rediss:// member, a unix:// member and a redis:// member" {
  require_jq
  export TLS_DIR=$T/certs
  tls_make_certs "$TLS_DIR" || fail "could not make the test certificates"
  # With appendonly, a new master counts at once (one younger than a TTL without it does not).
  tls_start server --appendonly yes --appendfsync no
  local tls_url=$RLOCK_TLS_URL
  redis_start_unix --appendonly yes --appendfsync no
  unset RLOCK_URL
  local unix_url=unix://$REDIS_SOCKET
  masters_start 1
  local q=(-u "$tls_url" -u "$unix_url" -u "$(m_url 1)" --cacert "$TLS_DIR/ca.pem")

  run --separate-stderr rlock run k "${q[@]}" -- sh -c 'echo "fence $RLOCK_FENCE"'
  assert_success
  assert_output --regexp '^fence [0-9]+$'
  run --separate-stderr rlock acquire k "${q[@]}" --token-file "$T/token"
  assert_success
  local tok
  tok=$(cat "$T/token")
  assert_equal "$(tcli get 'rlock:{k}')" "$tok"
  assert_equal "$(rcli get 'rlock:{k}')" "$tok"
  assert_equal "$(mcli 1 get 'rlock:{k}')" "$tok"
  run --separate-stderr rlock status k "${q[@]}" --json
  assert_success
  assert_equal "$(jq -r '.agreeing, ([.masters[].url] | join(" "))' <<<"$output" | tr '\n' ' ')" \
    "3 $tls_url $unix_url $(m_url 1) "
  run --separate-stderr rlock release k "${q[@]}" --token-file "$T/token"
  assert_success
  assert_equal "$(tcli exists 'rlock:{k}') $(rcli exists 'rlock:{k}') $(mcli 1 exists 'rlock:{k}')" "0 0 0"

  # Without the CA, the TLS member fails its verification alone: the two others are a majority.
  run --separate-stderr rlock run k -u "$tls_url" -u "$unix_url" -u "$(m_url 1)" -- true
  assert_success
  # With the unix member down too, no majority: 69, naming both.
  redis_kill
  run --separate-stderr rlock run k -u "$tls_url" -u "$unix_url" -u "$(m_url 1)" -- touch "$T/ran"
  assert_error_exit 69
  [[ $stderr == *"$tls_url"* && $stderr == *"$unix_url"* ]] || fail "the error does not name both failing members: '$stderr'"
  [[ $stderr != *"$(m_url 1)"* ]] || fail "the error names the master that answered: '$stderr'"
  assert_file_not_exists "$T/ran"
}

@test "a redis+sentinel:// member; RLOCK_URL split at spaces and at commas that start a URL" {
  require_jq
  repl_start
  sentinels_start 3
  masters_start 2
  local q=(-u "$SENTINEL_URL" -u "$(m_url 1)" -u "$(m_url 2)")
  run --separate-stderr rlock acquire k "${q[@]}" --token-file "$T/token"
  assert_success
  assert_equal "$(srv_cli "$MASTER_PORT" get 'rlock:{k}')" "$(cat "$T/token")"
  assert held_everywhere k
  run --separate-stderr rlock release k "${q[@]}" --token-file "$T/token"
  assert_success
  [[ $(srv_cli "$MASTER_PORT" exists 'rlock:{k}') == 0 ]] || fail "still on the Sentinel's master"

  # One text: the Sentinel URL (commas between its sentinels), a comma, a URL, a space, a URL.
  export RLOCK_URL="$SENTINEL_URL,$(m_url 1) $(m_url 2)"
  run --separate-stderr rlock run k -- sh -c 'echo "fence $RLOCK_FENCE"'
  assert_success
  assert_output --regexp '^fence [0-9]+$'
  local tok
  tok=$(rlock acquire k) || fail "acquire with RLOCK_URL"
  run --separate-stderr rlock status k --json
  assert_success
  assert_equal "$(jq -r '.agreeing, (.masters | length)' <<<"$output" | tr '\n' ' ')" "3 3 "
  [[ $(jq -r '.masters[0].url' <<<"$output") == redis+sentinel://* ]] || fail "the first member is not the Sentinel URL: $output"
  RLOCK_TOKEN=$tok run --separate-stderr rlock release k
  assert_success
  # The same in the config file's url.
  unset RLOCK_URL
  mkdir -p "$XDG_CONFIG_HOME/rlock"
  printf 'url = "%s"\n' "$SENTINEL_URL,$(m_url 1),$(m_url 2)" >"$XDG_CONFIG_HOME/rlock/config.toml"
  run --separate-stderr rlock status k --json
  assert_failure 1
  assert_equal "$(jq -r '.masters | length' <<<"$output")" 3
  run --separate-stderr rlock run k -- true
  assert_success

  # The Sentinel member's master down (no failover yet): the two others still make a majority.
  srv_kill "$MASTER_PID"
  run --separate-stderr rlock run k -- true
  assert_success
}

@test "a Redis Cluster node as a member is refused (78, naming it), whichever node owns the key" {
  cluster_wait
  masters_start 2
  local first=${CLUSTER_PORTS%% *} node_url key mine="" other="" i
  node_url=redis://127.0.0.1:$first
  # A key whose slot another node owns (the node answers MOVED), and one the node owns itself.
  for i in $(seq 1 200); do
    if [[ $(cluster_port_of "rlock:{k$i}") == "$first" ]]; then
      [[ -z $mine ]] && mine=k$i
    else
      [[ -z $other ]] && other=k$i
    fi
    [[ -n $mine && -n $other ]] && break
  done
  [[ -n $mine && -n $other ]] || fail "no keys found for both cases"
  for key in "$other" "$mine"; do
    run --separate-stderr rlock run "$key" -u "$node_url" -u "$(m_url 1)" -u "$(m_url 2)" -- touch "$T/ran"
    [[ $status -eq 78 ]] || fail "key $key: expected exit 78, got $status; stderr: '$stderr'"
    [[ $stderr == *"$node_url"* && $stderr == *"a Cluster cannot be a Redlock member"* ]] ||
      fail "key $key: the error does not name the Cluster node: '$stderr'"
    assert_file_not_exists "$T/ran"
    run --separate-stderr rlock acquire "$key" -u "$node_url" -u "$(m_url 1)" -u "$(m_url 2)"
    [[ $status -eq 78 ]] || fail "acquire $key: expected exit 78, got $status; stderr: '$stderr'"
    assert free_everywhere "$key"
    [[ $(ccli exists "rlock:{$key}") == 0 ]] || fail "key $key was left on the Cluster"
  done
}

@test "--limit and --shared are refused with several URLs (64); a space or comma inside one -u is split" {
  masters_start 3
  run --separate-stderr rlock run k --limit 2 "${U[@]}" -- touch "$T/ran"
  assert_usage_error
  run --separate-stderr rlock run k --shared "${U[@]}" -- touch "$T/ran"
  assert_usage_error
  run --separate-stderr rlock acquire k --limit 3 "${U[@]}"
  assert_usage_error
  run --separate-stderr rlock acquire k -s "${U[@]}"
  assert_usage_error
  assert_file_not_exists "$T/ran"
  assert free_everywhere k
  # --exclusive is what a quorum does anyway.
  run --separate-stderr rlock run k -x "${U[@]}" -- true
  assert_success
  # One -u with the masters separated by a space, or by commas.
  run --separate-stderr rlock run k -u "$(m_url_list ' ')" -- sh -c 'redis-cli -p "$0" exists "rlock:{k}"' "${M_PORT[3]}"
  assert_success
  assert_output 1
  run --separate-stderr rlock run k -u "$(m_url_list ,)" -- sh -c 'redis-cli -p "$0" exists "rlock:{k}"' "${M_PORT[2]}"
  assert_success
  assert_output 1
}

@test "two masters: works when both answer, with a warning; 69 when one is down" {
  masters_start 2
  run --separate-stderr rlock run k "${U[@]}" -- sh -c 'echo "fence $RLOCK_FENCE"'
  assert_success
  assert_output --regexp '^fence [0-9]+$'
  [[ $stderr == *"warning"*"two masters"* ]] || fail "no warning about two masters: '$stderr'"
  local tok
  tok=$(rlock acquire k "${U[@]}" 2>/dev/null) || fail "acquire"
  assert held_everywhere k
  RLOCK_TOKEN=$tok run --separate-stderr rlock release k "${U[@]}"
  assert_success
  assert free_everywhere k
  m_kill 2
  run --separate-stderr rlock run k "${U[@]}" -- touch "$T/ran"
  [[ $status -eq 69 ]] || fail "expected 69, got $status: '$stderr'"
  [[ $stderr == *"no majority of the 2 Redis masters answered (2 needed)"*"$(m_url 2)"* ]] ||
    fail "unexpected message: '$stderr'"
  assert_file_not_exists "$T/ran"
  run --separate-stderr rlock run k -n "${U[@]}" -- touch "$T/ran"
  [[ $status -eq 69 ]] || fail "with -n: expected 69, got $status: '$stderr'"
  assert free_everywhere k
}

@test "one server named twice is refused (78) and nothing is left taken on it" {
  masters_start 3
  run --separate-stderr rlock run k -u "$(m_url 1)" -u "redis://localhost:${M_PORT[1]}" -u "$(m_url 2)" -- touch "$T/ran"
  assert_error_exit 78
  [[ $stderr == *"one server"* ]] || fail "the error does not say the two URLs are one server: '$stderr'"
  assert_file_not_exists "$T/ran"
  assert_equal "$(mcli 1 exists 'rlock:{k}') $(mcli 2 exists 'rlock:{k}')" "0 0"
}

# Whether master I says it has been up for a second at least.
up_a_second() {
  local up
  up=$(mcli "$1" info server | tr -d '\r' | sed -n 's/^uptime_in_seconds://p')
  ((${up:-0} >= 1))
}

@test "a master restarted empty less than a TTL ago does not count: a majority without it, or 69 naming it" {
  masters_start 3
  m_restart 1
  m_restart 2
  # m1 and m2 started empty just now, without appendonly: they may have lost a lock that another
  # holder still has, so only m3 counts. No majority: 69, not busy, and nothing left taken.
  run --separate-stderr rlock run k -n -t 30s "${U[@]}" -- touch "$T/ran"
  assert_error_exit 69
  [[ $stderr == *"$(m_url 1)"*"started"* ]] || fail "the error does not say m1 is too young: '$stderr'"
  assert_file_not_exists "$T/ran"
  assert_equal "$(mcli 1 exists 'rlock:{k}') $(mcli 2 exists 'rlock:{k}') $(mcli 3 exists 'rlock:{k}')" "0 0 0"
  # Once they have run a TTL (INFO's uptime_in_seconds, whole seconds, is what rlock reads), they
  # count again.
  wait_until -t 5 up_a_second 1 || fail "m1 says uptime $(mcli 1 info server | tr -d '\r' | grep uptime_in_seconds)"
  wait_until -t 5 up_a_second 2 || fail "m2 says uptime $(mcli 2 info server | tr -d '\r' | grep uptime_in_seconds)"
  run --separate-stderr rlock run k -n -t 1s "${U[@]}" -- touch "$T/ran"
  assert_success
  assert_file_exists "$T/ran"
}
