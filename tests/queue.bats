#!/usr/bin/env bats
# Waiting in a FIFO queue: waiters get the lock in the order they queued, once each; newcomers
# (even -n) never jump ahead (with a lapsed lease too: tests/protocol, QueueTest); a waiter that
# gives up or is interrupted stops delaying the others within the documented bounds (one whose
# wait runs out, one that dies, or a head that never claims its grant: tests/protocol, TakeTest and
# TakeQueueTest); a Redis restart and a Sentinel failover do not lose or duplicate anyone (a
# crashed holder: tests/protocol, HeartbeatTest, and crash.bats); status shows the queue; the same
# on a Redis Cluster.
#
# Bounds (see helpers/queue.bash): heartbeat H = 1s, queue lease L = 3s (4.5s behind others), claim window 2s, plus
# SLACK_MS for a loaded machine. Critical sections are witnessed by tests/faults/helpers/cs.

load helpers/common
load helpers/servers
load faults/helpers/faults
load helpers/queue

BATS_TEST_TIMEOUT=150

setup_file() {
  # For the Cluster test, created while the tests before it run.
  cluster_start_bg 3
}

teardown_file() {
  servers_teardown_file
}

setup() {
  queue_setup
}

teardown() {
  common_teardown
}

# hold_k: a background `rlock run k` (as "holder") whose critical section lasts until $T/go
# exists; waits until the section has started.
hold_k() {
  bg holder rlock run k "$@" -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
}

# queue_waiters N [RUN OPTIONS...]: waiters w1..wN, each `rlock run k -w 100 OPTIONS` with a
# critical section of 0.1s, started one after the other: wI only once the queue has I-1 waiters
# and wI has joined it. Sets WAITERS to their names.
queue_waiters() {
  local n=$1 i
  shift
  WAITERS=()
  for i in $(seq 1 "$n"); do
    enqueue "w$i" k "$i" rlock run k -w 100 "$@" -- "$CS" "$WLOG" "w$i" 0.1
    WAITERS+=("w$i")
  done
}

# The labels w1..wN, space separated.
labels() {
  local i out=()
  for i in $(seq 1 "$1"); do out+=("w$i"); done
  echo "${out[*]}"
}

# --- order ------------------------------------------------------------------------------------

# --- no barging -------------------------------------------------------------------------------

# ms_of_free_run: how many ms `rlock run -n` of a free key takes now (what "at once" is on this
# machine, under its current load).
ms_of_free_run() {
  local t0
  t0=$(now_ms)
  rlock run "free-$RANDOM" -n -- true || fail "rlock run of a free key failed"
  elapsed_ms "$t0"
}

@test "-n with waiters queued exits 75 at once, runs nothing and does not queue; once drained, -n takes the lock at once" {
  redis_start
  hold_k
  queue_waiters 2
  local t0 took ref
  ref=$(ms_of_free_run)
  t0=$(now_ms)
  run --separate-stderr rlock run k -n -- "$CS" "$WLOG" barger 0
  took=$(elapsed_ms "$t0")
  assert_failure 75
  ((took <= 3 * ref + 700)) || fail "-n took ${took}ms to give up (a run on a free key took ${ref}ms)"
  assert_equal "$(queue_length k)" 2
  assert_equal "$(zcard_q k)" 2
  touch "$T/go"
  wait_all 30 holder w1 w2
  assert_equal "$(cs_order)" "holder w1 w2"
  ref=$(ms_of_free_run)
  t0=$(now_ms)
  run --separate-stderr rlock run k -n -- "$CS" "$WLOG" late 0
  took=$(elapsed_ms "$t0")
  assert_success
  ((took <= 3 * ref + 700)) || fail "-n on a free lock with an empty queue took ${took}ms (a run on a free key took ${ref}ms)"
  assert_equal "$(cs_order)" "holder w1 w2 late"
  assert_no_overlap
}

# A waiter SIGKILLed in the queue leaves it within its lease and a heartbeat, the others are
# served in order, each at once, and the drained queue keeps nothing; a grant that the head
# (stopped when the lock is handed to it) never claims goes to the next once the claim window has
# passed: tests/protocol/queue_test.cpp (TakeQueueTest, waiters stepping as rlock run does,
# AWaiterKilledInTheQueueIsDroppedAndTheLiveOnesAreServedInOrder and
# AGrantTheStoppedHeadNeverClaimsGoesToTheWaiterBehindAfterTheClaimWindow;
# QueueTest.AGrantNotClaimedWithinTheClaimWindowGoesToTheNext), with the documented L, H and claim
# window pinned in tests/unit/take_test.cpp (QueueTiming.TheStandardTimingIsTheDocumentedOne).

# --- waiters that give up ---------------------------------------------------------------------

# leaves_at_once NAME: NAME (w1, first in the queue, w2 behind it) has just ended; the queue must
# drop to 1 within 1.5s, and w2 must start promptly once the holder releases.
leaves_at_once() {
  wait_until -t 1.5 queue_is k 1 ||
    fail "$1 ended but the queue still has $(queue_length k) waiters 1.5s later: $(status_json k)"
  assert_equal "$(zcard_q k)" 1
  assert_equal "$(status_json k | jq -c '[.waiters[].pid]')" "[$w2_pid]"
  touch "$T/go"
  wait_all 30 holder w2
  assert_equal "$(cs_order)" "holder w2"
  local gap
  gap=$(ms_between "$(cs_end_ns holder)" "$(cs_start_ns w2)")
  ((gap <= PROMPT_MS)) || fail "w2 started ${gap}ms after the holder released"
  assert_no_overlap
}

# A wait that runs out (-w) with a waiter behind it leaves the queue at once, and the one behind is
# served at the release: tests/protocol/take_test.cpp
# (TakeTest.AWaitThatRunsOutLeavesTheQueueAndTheOneBehindIsServedAtTheRelease); rlock run -w
# giving up with 75 after about its wait: run.bats ("-w 1 gives up after about a second...").

# That a -n attempt with a waiter queued leaves no trace and does not delay the waiter:
# tests/protocol/take_test.cpp (NoWaitWithAWaiterQueuedLeavesNoTraceAndTheWaiterIsServedAtTheRelease).

@test "SIGINT to a waiting rlock (stdin not a tty): exit 130, it leaves the queue at once" {
  redis_start
  hold_k
  enqueue w1 k 1 rlock run k -w 100 -- "$CS" "$WLOG" w1 0
  enqueue w2 k 2 rlock run k -w 100 -- "$CS" "$WLOG" w2 0
  kill -INT "$w1_pid"
  bg_wait w1 5
  assert_equal "$BG_STATUS" 130
  leaves_at_once w1
}

@test "SIGTERM to a waiting rlock: exit 143, it leaves the queue at once" {
  redis_start
  hold_k
  enqueue w1 k 1 rlock run k -w 100 -- "$CS" "$WLOG" w1 0
  enqueue w2 k 2 rlock run k -w 100 -- "$CS" "$WLOG" w2 0
  kill -TERM "$w1_pid"
  bg_wait w1 5
  assert_equal "$BG_STATUS" 143
  leaves_at_once w1
}

# --- many waiters, a restart, a failover ------------------------------------------------------

# One holder and 8 waiters queued behind it, one after the other: status and list show them, in
# order; then the holder releases and they all run once, in that order, each at the release of
# the one before. (A holder killed with SIGKILL: its lease runs out and the head's step hands the
# lock on, tests/protocol/heartbeat_test.cpp HeartbeatTest.AHolderWhoseLeaseRunsOutIsHandedOnByTheHeadsStep;
# a waiter queued behind a SIGKILLed run gets it within TTL + 1s: crash.bats.)
@test "8 waiters queued one after the other: status and list show them in order; at the release all 8 run once, in order, and the queue is drained" {
  redis_start
  USER=qholder bg holder rlock run k -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  USER=qwaiter queue_waiters 8
  assert_equal "$(zcard_q k)" 8
  local pids=() i
  for i in $(seq 1 8); do
    pids+=("$(eval echo "\$w${i}_pid")")
  done
  pids=$(IFS=,; echo "[${pids[*]}]")

  # status --json: mode, the holder, queue_length and the waiters in order.
  run --separate-stderr rlock status k --json
  assert_success
  local j=$output
  jq -e '
    .held == true and .mode == "exclusive"
    and (.limit == null or .limit == 1)
    and .queue_length == 8
    and (.holders | type) == "array" and (.holders | length) == 1
    and (.waiters | type) == "array" and (.waiters | length) == 8
  ' <<<"$j" >/dev/null || fail "status --json: $j"
  # The exclusive holder: the top-level fields and the one entry of holders agree.
  jq -e --argjson pid "$holder_pid" --arg host "$(uname -n)" '
    .pid == $pid and .host == $host and .user == "qholder"
    and (.holders[0] | .pid == $pid and .host == $host and .user == "qholder"
      and (.command | type) == "string" and (.command | test("cs"))
      and (.since_ms | type) == "number" and (.held_for_ms | type) == "number" and .held_for_ms >= 0
      and (.ttl_ms | type) == "number" and .ttl_ms > 0
      and (.fence | type) == "number" and .slot == null and .shared == false)
    and .holders[0].fence == .fence
  ' <<<"$j" >/dev/null || fail "the holder in status --json: $j"
  jq -e --argjson pids "$pids" --arg host "$(uname -n)" '
    [.waiters[].pid] == $pids
    and [.waiters[].position] == [1, 2, 3, 4, 5, 6, 7, 8]
    and all(.waiters[]; .host == $host and .user == "qwaiter" and .shared == false
      and (.command | type) == "string" and (.command | test("cs"))
      and (.waiting_since_ms | type) == "number" and (.waited_ms | type) == "number" and .waited_ms >= 0)
    and ([.waiters[].waiting_since_ms] | . == sort)
  ' <<<"$j" >/dev/null || fail "the waiters in status --json: $j"

  # status: WAITING in its table; status -v: one line per waiter after the table, with its host
  # and pid, in queue order.
  run --separate-stderr rlock status k
  assert_success
  local header row
  header=$(grep -m1 -E '^KEY ' <<<"$output") || fail "no table header: $output"
  row=$(grep -m1 -E '^k ' <<<"$output") || fail "no row for k: $output"
  assert_equal "$(table_cell "$header" "$row" WAITING)" 8
  run --separate-stderr rlock status -v k
  assert_success
  local after l1 l2
  after=$(awk 'found { print } /^KEY / { found = 1 }' <<<"$output")
  l1=$(grep -n -E "(^|[^0-9])$w1_pid([^0-9]|$)" <<<"$after" | grep -v -E "(^|[^0-9])$holder_pid([^0-9]|$)" | head -n 1 | cut -d: -f1)
  l2=$(grep -n -E "(^|[^0-9])$w2_pid([^0-9]|$)" <<<"$after" | head -n 1 | cut -d: -f1)
  [[ -n $l1 && -n $l2 ]] || fail "status -v does not list the waiters ($w1_pid, $w2_pid): $output"
  ((l1 < l2)) || fail "status -v lists the waiters out of order: $output"
  grep -E "(^|[^0-9])$w1_pid([^0-9]|$)" <<<"$after" | grep -qF "$(uname -n)" || fail "no host on w1's line: $output"

  # list: the queue length of each lock (WAITING; queue_length in --json).
  acquire_token other
  list_shows_waiting k 8
  list_shows_waiting other 0

  touch "$T/go"
  wait_all 60 holder "${WAITERS[@]}"
  assert_no_overlap
  assert_equal "$(cs_order)" "holder $(labels 8)"
  assert_each_once "${WAITERS[@]}"
  # The queue is drained, and the lock free.
  assert_equal "$(queue_length k)" 0
  assert_equal "$(zcard_q k)" 0
  assert lock_free k
}

# The child of the waiters of the restart and failover tests: records its fence, then the witness.
fenced_section() {
  printf '%s' 'echo "$RLOCK_FENCE $0" >>"$1"; exec "$CS" "$WLOG" "$0" 0.1'
}

# assert_fences_increase HOLDER_FENCE: the fences in $T/fences (in the order the sections ran)
# increase strictly, all above HOLDER_FENCE.
assert_fences_increase() {
  run awk -v h="$1" '$1 + 0 <= h + 0 || (NR > 1 && $1 + 0 <= prev + 0) { bad = 1 } { prev = $1 } END { exit bad }' "$T/fences"
  [[ $status == 0 ]] || fail "fences do not increase strictly above the holder's $1: $(cat "$T/fences")"
}

@test "Redis restarts (empty) while 8 wait: all 8 run once each, no overlap, fences still increase" {
  redis_start
  acquire_token k -t 60s
  local holder_fence i
  holder_fence=$(status_json k | jq -r .fence)
  [[ $holder_fence =~ ^[0-9]+$ ]] || fail "no fence in status --json: $(status_json k)"
  WAITERS=()
  for i in $(seq 1 8); do
    enqueue "w$i" k "$i" rlock run k -w 100 -- sh -c "$(fenced_section)" "w$i" "$T/fences"
    WAITERS+=("w$i")
  done
  redis_restart
  wait_all 60 "${WAITERS[@]}"
  assert_no_overlap
  assert_each_once "${WAITERS[@]}"
  assert_equal "$(wc -l <"$T/fences")" 8
  assert_fences_increase "$holder_fence"
  echo "# order after the restart: $(cs_order)" >&3
}

@test "Sentinel failover while 8 wait: all 8 run once each, no overlap" {
  repl_start
  sentinels_start 3
  export RLOCK_URL=$SENTINEL_URL
  wait_until -t 15 sentinels_know_each_other || skip "the sentinels did not find each other in 15s"
  run --separate-stderr rlock acquire k -t 30s --token-file "$T/token"
  assert_success
  local holder_fence i
  holder_fence=$(status_json k | jq -r .fence)
  WAITERS=()
  for i in $(seq 1 8); do
    enqueue "w$i" k "$i" rlock run k -w 100 -- sh -c "$(fenced_section)" "w$i" "$T/fences"
    WAITERS+=("w$i")
  done
  wait_until -t 10 _replica_has_queue 8 || fail "the queue did not reach the replica"
  assert_equal "$(scli "${SENTINEL_PORTS%% *}" sentinel failover mymaster | tr -d '\r')" OK
  wait_until -t 20 sentinels_agree_on "$REPLICA_PORT" || skip "the sentinels did not promote the replica in 20s"
  wait_until -t 10 role_is "$REPLICA_PORT" master || skip "the replica did not become master in 10s"
  # The release finds the lock on the new master (replicated) and hands it on; if it does not,
  # the lease (30s) runs out and the waiters' heartbeats hand it on.
  rlock release k --token-file "$T/token" 2>"$T/release.err" || true
  wait_all 90 "${WAITERS[@]}"
  assert_no_overlap
  assert_each_once "${WAITERS[@]}"
  assert_fences_increase "$holder_fence"
  echo "# order after the failover: $(cs_order)" >&3
}
_replica_has_queue() {
  [[ $(srv_cli "$REPLICA_PORT" zcard "$(lock_key k):q" 2>/dev/null | tr -d '\r') == "$1" ]]
}

# --- status -----------------------------------------------------------------------------------

@test "status --json of a free lock: mode and limit null, no holders, an empty queue" {
  redis_start
  run --separate-stderr rlock status k --json
  assert_failure 1
  jq -e '.held == false and .mode == null and .limit == null and .holders == [] and .queue_length == 0 and .waiters == []' \
    <<<"$output" >/dev/null || fail "status --json of a free lock: $output"
}

# --- Redis Cluster ----------------------------------------------------------------------------

@test "Cluster of 3 masters: 4 waiters queued in order get the lock in that order; the queue shares the lock's slot" {
  cluster_wait
  export RLOCK_URL=$CLUSTER_URL
  bg holder rlock run k -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  local i names=()
  for i in 1 2 3 4; do
    enqueue "w$i" k "$i" rlock run k -w 100 -- "$CS" "$WLOG" "w$i" 0.1
    names+=("w$i")
  done
  local node
  node=$(cluster_port_of "$(lock_key k)")
  [[ -n $node ]] || fail "no node holds the lock"
  assert_equal "$(srv_cli "$node" zcard "$(lock_key k):q" | tr -d '\r')" 4
  touch "$T/go"
  wait_all 60 holder "${names[@]}"
  assert_no_overlap
  assert_equal "$(cs_order)" "holder w1 w2 w3 w4"
}
