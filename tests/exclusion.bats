#!/usr/bin/env bats
# Mutual exclusion under contention: many concurrent runs of one key never overlap, and the
# fencing tokens they see increase strictly in the order the critical sections ran.

load helpers/common
load helpers/contention

BATS_TEST_TIMEOUT=150

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# 200 runs, each waiting behind up to 7 others: every hand-over of the lock is contended. (More
# runs add time, not other hand-overs; RLOCK_TEST_SCALE=4 makes it 800.)
@test "8 concurrent loops of 25 runs: a non-atomic counter ends at exactly 200, fences strictly increase" {
  local loops=8 per_loop
  per_loop=$(scaled 25)
  write_section
  local w t0
  t0=$(now_ms)
  for w in $(seq 1 "$loops"); do
    bg "loop$w" sh "$T/loop.sh" "$T" "$w" "$per_loop"
  done
  wait_until -t 120 all_loops_done "$loops" || fail "the loops did not finish in 120s; count $(cat "$T/count")"
  echo "# $((loops * per_loop)) runs in $(elapsed_ms "$t0")ms" >&3
  assert_file_not_exists "$T/errors"
  assert_file_not_exists "$T/overlaps"
  assert_equal "$(cat "$T/count")" $((loops * per_loop))
  assert_equal "$(wc -l <"$T/fences")" $((loops * per_loop))
  run awk 'NR > 1 && $1 + 0 <= prev + 0 { print "line " NR ": " $1 " after " prev; bad = 1 } { prev = $1 } END { exit bad }' "$T/fences"
  assert_success
  assert lock_free counter
}
