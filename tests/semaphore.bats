#!/usr/bin/env bats
# --limit N: a counting semaphore of N holders, with the same FIFO queue, renewal, loss and
# fencing as the exclusive lock. RLOCK_SLOT names the holder's slot (1..N); holders that
# disagree on N get 65; --limit 1 is the exclusive lock.
#
# The holds are witnessed by helpers/hold (HOLD_MODE=n: a semaphore slot).

load helpers/common
load faults/helpers/faults
load helpers/queue

BATS_TEST_TIMEOUT=120

setup() {
  queue_setup
  redis_start
}

teardown() {
  common_teardown
}

# has_number TEXT N: whether TEXT has the number N standing alone (not inside another number).
has_number() {
  [[ $1 =~ (^|[^0-9])$2([^0-9]|$) ]]
}

# sem_hold NAME LIMIT [RUN OPTIONS...]: a background `rlock run k --limit LIMIT` whose hold
# lasts until $T/go.NAME exists; waits until it has started.
sem_hold() {
  local name=$1 limit=$2
  shift 2
  HOLD_MODE=n bg "$name" rlock run k --limit "$limit" "$@" -- "$HOLD" "$HLOG" "$name" "until:$T/go.$name"
  wait_until -t 10 _hold_started_or_done "$name" || true
  hold_started "$name" || fail "$name did not start its hold: rc $(cat "$T/$name.rc" 2>/dev/null); $(bg_err "$name")"
}
_hold_started_or_done() { hold_started "$1" || bg_done "$1"; }

@test "--limit 3 with 12 contenders: never more than 3 at once, slots 1..3 never shared at once, all ran once, fences increase" {
  local i names=()
  # All 12 start at once: each waits for $T/start before it runs rlock.
  for i in $(seq 1 12); do
    HOLD_MODE=n bg "c$i" sh -c 'while [ ! -e "$0" ]; do sleep 0.01; done; exec "$@"' "$T/start" \
      rlock run k --limit 3 -w 100 -- "$HOLD" "$HLOG" "c$i" 0.2
    names+=("c$i")
  done
  touch "$T/start"
  wait_all 90 "${names[@]}"
  assert_holds_ok 3
  assert_equal "$(hold_stat sections)" 12
  assert_equal "$(hold_stat max_slots)" 3
  for i in "${names[@]}"; do
    assert_equal "$(hold_count "$i")" 1
  done
  # Each hold saw itself and at most 2 others (the sections count each other, without clocks).
  run awk '$1 == "seen" && ($4 > 3 || $4 < 1) { bad = 1 } END { exit bad }' "$HLOG"
  assert_success
  assert_equal "$(queue_length k)" 0
  run rlock status k
  assert_failure 1
}

@test "the child gets RLOCK_SLOT; two holders of --limit 2 have slots 1 and 2; a third with -n is 75" {
  sem_hold a 2
  run --separate-stderr rlock run k --limit 2 -n -- sh -c 'echo "slot=$RLOCK_SLOT fence=$RLOCK_FENCE"'
  assert_success
  local other mine
  other=$(awk '$1 == "start" && $4 == "a" { print $6 }' "$HLOG")
  mine=$(sed -n 's/^slot=\([0-9]*\) .*/\1/p' <<<"$output")
  [[ $other =~ ^[12]$ && $mine =~ ^[12]$ ]] || fail "slots '$other' and '$mine' (output: $output)"
  assert_not_equal "$mine" "$other"
  sem_hold b 2
  run --separate-stderr rlock run k --limit 2 -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  touch "$T/go.a" "$T/go.b"
  wait_all 15 a b
  assert_holds_ok 2
}

@test "RLOCK_LIMIT sets the limit: two holders at once, the child sees RLOCK_SLOT" {
  RLOCK_LIMIT=2 sem_hold a 2
  RLOCK_LIMIT=2 run --separate-stderr rlock run k -n -- sh -c 'echo "$RLOCK_SLOT"'
  assert_success
  [[ $output =~ ^[12]$ ]] || fail "RLOCK_SLOT '$output'"
  touch "$T/go.a"
  wait_all 15 a
}

@test "a full semaphore queues in FIFO order; a freed slot goes to the head at once" {
  sem_hold a 2
  sem_hold b 2
  local i
  for i in 1 2 3; do
    HOLD_MODE=n enqueue "w$i" k "$i" rlock run k --limit 2 -w 100 -- "$HOLD" "$HLOG" "w$i" "until:$T/go.w$i"
  done
  touch "$T/go.a"
  wait_until -t 10 hold_started w1 || fail "w1 did not get a's slot: $(bg_err w1)"
  local gap
  gap=$(ms_between "$(hold_end_ns a)" "$(hold_start_ns w1)")
  ((gap <= PROMPT_MS)) || fail "w1 started ${gap}ms after a released"
  wait_until -t 1.5 queue_is k 2 || fail "the queue did not drop to 2: $(status_json k)"
  # w2 and w3 still wait: both slots are taken.
  ! hold_started w2 || fail "w2 started while both slots were held"
  touch "$T/go.b"
  wait_until -t 10 hold_started w2 || fail "w2 did not get b's slot: $(bg_err w2)"
  ! hold_started w3 || fail "w3 started before w2's turn was over"
  touch "$T/go.w1" "$T/go.w2" "$T/go.w3"
  wait_all 30 a b w1 w2 w3
  assert_holds_ok 2
  assert_equal "$(awk '$1 == "start" { printf "%s ", $4 }' "$HLOG")" "a b w1 w2 w3 "
}

# That the slot of a holder that died (its lease lapsed) goes to the head waiter, the same slot:
# tests/protocol/modes_test.cpp (ASemaphoreSlotOfAHolderThatDiedIsGivenToTheNext); that a waiter
# is served within TTL + H of a holder's SIGKILL, whatever the mode: queue.bats.

@test "acquire --limit 2 twice gives two tokens; a third -n is 75 until one is released" {
  local t1 t2
  t1=$(rlock acquire k --limit 2) || fail "first acquire failed"
  t2=$(rlock acquire k --limit 2) || fail "second acquire failed"
  [[ $t1 =~ $TOKEN_RE && $t2 =~ $TOKEN_RE ]] || fail "tokens '$t1' '$t2'"
  assert_not_equal "$t1" "$t2"
  run --separate-stderr rlock acquire k --limit 2 -n
  assert_failure 75
  RLOCK_TOKEN=$t1 run --separate-stderr rlock extend k
  assert_success
  RLOCK_TOKEN=$t1 run --separate-stderr rlock release k
  assert_success
  run --separate-stderr rlock acquire k --limit 2 -n
  assert_success
  [[ $output =~ $TOKEN_RE ]] || fail "not a token: $output"
}

# --- disagreeing on N ---------------------------------------------------------------------------

@test "holders disagreeing on N: --limit 2 against holders of --limit 3 is 65, one error naming both limits" {
  local tok
  tok=$(rlock acquire k --limit 3) || fail "acquire --limit 3 failed"
  run --separate-stderr rlock run k --limit 2 -n -- touch "$T/ran"
  assert_error_exit 65
  has_number "$stderr" 3 && has_number "$stderr" 2 || fail "the error does not name both limits: $stderr"
  run --separate-stderr rlock acquire k --limit 2
  assert_error_exit 65
  assert_file_not_exists "$T/ran"
}

@test "holders disagreeing on N: no --limit against holders of --limit 3 is 65, naming both" {
  local tok
  tok=$(rlock acquire k --limit 3) || fail "acquire --limit 3 failed"
  run --separate-stderr rlock run k -n -- touch "$T/ran"
  assert_error_exit 65
  has_number "$stderr" 3 || fail "the error does not name the holders' limit: $stderr"
  has_number "$stderr" 1 || [[ ${stderr,,} == *exclusive* ]] || fail "the error does not name the asked limit: $stderr"
  assert_file_not_exists "$T/ran"
}

@test "holders disagreeing on N: a waiting request (-w 10) is refused with 65 at once, not after waiting" {
  local tok1 tok2 tok3 t0 took
  tok1=$(rlock acquire k --limit 3) && tok2=$(rlock acquire k --limit 3) && tok3=$(rlock acquire k --limit 3) ||
    fail "could not fill the semaphore"
  t0=$(now_ms)
  run --separate-stderr rlock run k --limit 2 -w 10 -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 65
  ((took <= 3000)) || fail "65 came after ${took}ms"
  assert_equal "$(queue_length k)" 0
}

@test "--limit 1 is the exclusive lock: no conflict of limits, -n is 75 both ways, status says exclusive" {
  local tok
  tok=$(rlock acquire k --limit 1) || fail "acquire --limit 1 failed"
  run --separate-stderr rlock run k -n -- touch "$T/ran"
  assert_failure 75
  run --separate-stderr rlock status k --json
  assert_success
  assert_equal "$(jq -r .mode <<<"$output")" exclusive
  RLOCK_TOKEN=$tok run rlock release k
  assert_success
  tok=$(rlock acquire k) || fail "acquire failed"
  run --separate-stderr rlock run k --limit 1 -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
}

@test "--limit 0, a negative or non-numeric --limit, and --shared --limit 2 are usage errors (64)" {
  local bad
  for bad in 0 -1 x 1.5; do
    run --separate-stderr rlock run k --limit "$bad" -- touch "$T/ran"
    assert_usage_error
    run --separate-stderr rlock acquire k --limit "$bad"
    assert_usage_error
  done
  run --separate-stderr rlock run k --shared --limit 2 -- touch "$T/ran"
  assert_usage_error
  run --separate-stderr rlock acquire k -s --limit 2
  assert_usage_error
  RLOCK_LIMIT=2 run --separate-stderr rlock run k -s -- touch "$T/ran"
  assert_usage_error
  assert_file_not_exists "$T/ran"
  assert lock_free k
}

# --- fences ---------------------------------------------------------------------------------------

@test "fences increase across semaphore and exclusive holders of one key" {
  local f1 f2 f3
  f1=$(rlock run k --limit 2 -- sh -c 'echo "$RLOCK_FENCE"') || fail "run --limit 2 failed"
  f2=$(rlock run k -- sh -c 'echo "$RLOCK_FENCE"') || fail "run failed"
  f3=$(rlock run k --limit 3 -- sh -c 'echo "$RLOCK_FENCE"') || fail "run --limit 3 failed"
  [[ $f1 =~ ^[0-9]+$ && $f2 =~ ^[0-9]+$ && $f3 =~ ^[0-9]+$ ]] || fail "fences '$f1' '$f2' '$f3'"
  ((f1 < f2 && f2 < f3)) || fail "fences do not increase: $f1 $f2 $f3"
}

# --- status and list --------------------------------------------------------------------------

@test "status of a full semaphore: mode semaphore, the limit, every holder with its slot, the queue; list shows the lock with its queue length" {
  USER=semholder sem_hold a 3
  USER=semholder sem_hold b 3
  USER=semholder sem_hold c 3
  HOLD_MODE=n enqueue w1 k 1 rlock run k --limit 3 -w 100 -- "$HOLD" "$HLOG" w1 0
  run --separate-stderr rlock status k --json
  assert_success
  local j=$output
  jq -e '
    .mode == "semaphore" and .limit == 3 and .queue_length == 1
    and (.holders | length) == 3
    and ([.holders[].slot] | sort) == [1, 2, 3]
    and all(.holders[]; .shared == false and .user == "semholder" and (.fence | type) == "number"
      and (.ttl_ms | type) == "number" and .ttl_ms > 0 and (.since_ms | type) == "number"
      and (.held_for_ms | type) == "number" and (.host | type) == "string" and (.command | type) == "string")
    and ([.holders[].fence] | unique | length) == 3
    and (.waiters | length) == 1 and .waiters[0].position == 1 and .waiters[0].shared == false
  ' <<<"$j" >/dev/null || fail "status --json: $j"
  assert_equal "$(jq -c '[.holders[].pid] | sort' <<<"$j")" "$(printf '%s\n' "$a_pid" "$b_pid" "$c_pid" | sort -n | jq -sc .)"
  assert_equal "$(jq -r '.waiters[0].pid' <<<"$j")" "$w1_pid"
  # The slots status shows are the ones the children were given.
  local name slot pidvar
  for name in a b c; do
    pidvar=${name}_pid
    slot=$(awk -v l="$name" '$1 == "start" && $4 == l { print $6 }' "$HLOG")
    assert_equal "$(jq -r --argjson p "${!pidvar}" '.holders[] | select(.pid == $p) | .slot' <<<"$j")" "$slot"
  done
  run --separate-stderr rlock status k
  assert_success
  assert_output --partial "$a_pid"
  assert_output --partial "$b_pid"
  assert_output --partial "$c_pid"
  [[ ${output,,} == *semaphore* || ${output,,} == *limit* || $output == */3* ]] ||
    fail "the table does not show the limit: $output"
  list_shows_waiting k 1
  touch "$T/go.a" "$T/go.b" "$T/go.c"
  wait_all 15 a b c w1
}
