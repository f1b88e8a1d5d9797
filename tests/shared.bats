#!/usr/bin/env bats
# -s/--shared: many shared (read) holders or one exclusive holder, writer-preferring: once an
# exclusive waiter is queued, new shared requests queue behind it; a run of shared waiters at the
# head of the queue is granted together.
#
# The holds are witnessed by helpers/hold: HOLD_MODE=s (shared) sections may overlap each other
# only, HOLD_MODE=x (exclusive) sections overlap nothing.

load helpers/common
load faults/helpers/faults
load helpers/queue

setup() {
  queue_setup
  redis_start
}

teardown() {
  common_teardown
}

# holding NAME MODE [RUN OPTIONS...]: a background `rlock run k` (MODE s: with -s) whose hold
# lasts until $T/go.NAME exists; waits until it has started.
holding() {
  local name=$1 mode=$2
  shift 2
  local opt=()
  [[ $mode == s ]] && opt=(-s)
  HOLD_MODE=$mode bg "$name" rlock run k "${opt[@]}" "$@" -- "$HOLD" "$HLOG" "$name" "until:$T/go.$name"
  wait_until -t 10 _holding_or_done "$name" || true
  hold_started "$name" || fail "$name did not start its hold: rc $(cat "$T/$name.rc" 2>/dev/null); $(bg_err "$name")"
}
_holding_or_done() { hold_started "$1" || bg_done "$1"; }

# hold_order: the labels of the holds in the order they started, one line.
hold_order() {
  awk '$1 == "start" { printf "%s%s", sep, $4; sep = " " } END { print "" }' "$HLOG"
}

@test "shared holders hold together; an exclusive -n is 75; a shared -n joins them" {
  holding r1 s
  holding r2 s
  run --separate-stderr rlock run k -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  HOLD_MODE=s run --separate-stderr rlock run k -s -n -- "$HOLD" "$HLOG" r3 0
  assert_success
  assert_equal "$(hold_stat max_shared)" 3
  touch "$T/go.r1" "$T/go.r2"
  wait_all 15 r1 r2
  assert_holds_ok
}

@test "an exclusive holder keeps shared requests out: shared -n is 75, a shared waiter starts at the release" {
  holding x1 x
  run --separate-stderr rlock run k -s -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  HOLD_MODE=s enqueue r1 k 1 rlock run k --shared -w 100 -- "$HOLD" "$HLOG" r1 0
  touch "$T/go.x1"
  wait_all 15 x1 r1
  local gap
  gap=$(ms_between "$(hold_end_ns x1)" "$(hold_start_ns r1)")
  ((gap <= PROMPT_MS)) || fail "r1 started ${gap}ms after x1 released"
  assert_holds_ok
}

@test "RLOCK_SLOT is not set for shared holds; -x is the exclusive default" {
  run --separate-stderr rlock run k -s -- sh -c 'echo "slot=${RLOCK_SLOT-unset}"'
  assert_success
  assert_output slot=unset
  holding r1 s
  run --separate-stderr rlock run k -x -n -- touch "$T/ran"
  assert_failure 75
  run --separate-stderr rlock run k --exclusive -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  touch "$T/go.r1"
  wait_all 15 r1
}

@test "writer-preferring: with an exclusive waiter queued, a new shared request queues behind it" {
  holding r1 s
  HOLD_MODE=x enqueue x1 k 1 rlock run k -w 100 -- "$HOLD" "$HLOG" x1 0.3
  # Shared with the holder, but an exclusive waiter is queued: no jumping ahead.
  run --separate-stderr rlock run k -s -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  HOLD_MODE=s enqueue r2 k 2 rlock run k -s -w 100 -- "$HOLD" "$HLOG" r2 0
  ! hold_started r2 || fail "r2 started beside r1 although x1 was queued first"
  touch "$T/go.r1"
  wait_all 15 r1 x1 r2
  assert_equal "$(hold_order)" "r1 x1 r2"
  local gap
  gap=$(ms_between "$(hold_end_ns r1)" "$(hold_start_ns x1)")
  ((gap <= PROMPT_MS)) || fail "x1 started ${gap}ms after r1 released"
  assert_holds_ok
}

@test "acquire -s twice holds together; exclusive -n is 75 until both are released" {
  local t1 t2
  t1=$(rlock acquire k -s) || fail "first acquire -s failed"
  t2=$(rlock acquire k --shared) || fail "second acquire -s failed"
  [[ $t1 =~ $TOKEN_RE && $t2 =~ $TOKEN_RE ]] || fail "tokens '$t1' '$t2'"
  run --separate-stderr rlock acquire k -n
  assert_failure 75
  RLOCK_TOKEN=$t1 run --separate-stderr rlock release k
  assert_success
  run --separate-stderr rlock acquire k -n
  assert_failure 75
  RLOCK_TOKEN=$t2 run --separate-stderr rlock release k
  assert_success
  run --separate-stderr rlock acquire k -n
  assert_success
}

# That writers are not starved by a stream of reads (writer preference): a shared request that
# arrives while an exclusive waiter is queued queues behind it, the writer is granted once the
# holds before it end, and the later reads after it: tests/protocol/modes_test.cpp
# (ManySharedHoldersAndAnExclusiveWaiterBehindThem); with real processes, the writer never beside
# a read and started promptly at the release: "writer-preferring" above.

# That a run of shared waiters at the head of the queue is granted together at the release, each
# woken at once, and that an exclusive waiter behind them (and a shared one behind it) stays
# queued: tests/protocol/modes_test.cpp (ARunOfSharedWaitersIsGrantedTogether,
# ARunOfSharedWaitersLongerThanTheBudgetIsGrantedOverSeveralCalls,
# ManySharedHoldersAndAnExclusiveWaiterBehindThem). That a shared waiter's run starts its command
# at the release: "an exclusive holder keeps shared requests out" above.

# That a shared hold whose holder died (its lease lapsed) lets the exclusive waiter in:
# tests/protocol/modes_test.cpp (ASharedHoldThatIsNotRenewedLapses); that a waiter is served
# within TTL + H of a holder's SIGKILL, whatever the mode: queue.bats.

@test "fences increase across shared and exclusive holders of one key" {
  holding r1 s
  holding r2 s
  touch "$T/go.r1" "$T/go.r2"
  wait_all 15 r1 r2
  HOLD_MODE=x run rlock run k -- "$HOLD" "$HLOG" x1 0
  assert_success
  HOLD_MODE=s run rlock run k -s -- "$HOLD" "$HLOG" r3 0
  assert_success
  local f1 f2 fx f3
  f1=$(awk '$1 == "start" && $4 == "r1" { print $7 }' "$HLOG")
  f2=$(awk '$1 == "start" && $4 == "r2" { print $7 }' "$HLOG")
  fx=$(awk '$1 == "start" && $4 == "x1" { print $7 }' "$HLOG")
  f3=$(awk '$1 == "start" && $4 == "r3" { print $7 }' "$HLOG")
  [[ $f1 =~ ^[0-9]+$ && $f2 =~ ^[0-9]+$ && $fx =~ ^[0-9]+$ && $f3 =~ ^[0-9]+$ ]] || fail "fences: $(cat "$HLOG")"
  ((f1 < f2 && f2 < fx && fx < f3)) || fail "fences do not increase: $f1 $f2 $fx $f3"
}

# --- status and list ----------------------------------------------------------------------------

@test "status --json of shared holders with waiters: mode shared, holders marked shared without slots, waiters marked; list shows the lock with its queue length" {
  holding r1 s
  holding r2 s
  HOLD_MODE=x enqueue x1 k 1 rlock run k -w 100 -- "$HOLD" "$HLOG" x1 0
  HOLD_MODE=s enqueue r3 k 2 rlock run k -s -w 100 -- "$HOLD" "$HLOG" r3 0
  run --separate-stderr rlock status k --json
  assert_success
  local j=$output
  jq -e '
    .mode == "shared" and .limit == null and .queue_length == 2
    and (.holders | length) == 2
    and all(.holders[]; .shared == true and .slot == null and (.fence | type) == "number"
      and (.ttl_ms | type) == "number" and .ttl_ms > 0 and (.host | type) == "string")
    and [.waiters[].shared] == [false, true] and [.waiters[].position] == [1, 2]
  ' <<<"$j" >/dev/null || fail "status --json: $j"
  assert_equal "$(jq -c '[.holders[].pid] | sort' <<<"$j")" "$(printf '%s\n' "$r1_pid" "$r2_pid" | sort -n | jq -sc .)"
  assert_equal "$(jq -c '[.waiters[].pid]' <<<"$j")" "[$x1_pid,$r3_pid]"
  run --separate-stderr rlock status k
  assert_success
  assert_output --partial "$r1_pid"
  assert_output --partial "$r2_pid"
  [[ ${output,,} == *shared* ]] || fail "the table does not say the holds are shared: $output"
  list_shows_waiting k 2
  touch "$T/go.r1" "$T/go.r2"
  wait_all 15 r1 r2 x1 r3
}
