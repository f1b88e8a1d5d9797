#!/usr/bin/env bats
# Mutual exclusion under contention: many concurrent runs of one key never overlap, and the
# fencing tokens they see increase strictly in the order the critical sections ran.

load helpers/common

BATS_TEST_TIMEOUT=150

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

all_loops_done() {
  local w
  for w in $(seq 1 "$1"); do
    [[ -e $T/done.$w ]] || return 1
  done
}

@test "8 concurrent loops of 50 runs: a non-atomic counter ends at exactly 400, fences strictly increase" {
  local loops=8 per_loop=50
  echo 0 >"$T/count"
  : >"$T/fences"
  # The critical section: a read-increment-write that loses updates when two run at once,
  # plus a marker directory that only one section may have created at a time.
  cat >"$T/section.sh" <<'SECTION'
d=$1
mkdir "$d/inside" 2>/dev/null || echo "overlap at fence $RLOCK_FENCE" >>"$d/overlaps"
n=$(cat "$d/count")
echo "$RLOCK_FENCE" >>"$d/fences"
echo $((n + 1)) >"$d/count"
rmdir "$d/inside"
SECTION
  cat >"$T/loop.sh" <<'LOOP'
d=$1 w=$2 n=$3 i=0
while [ "$i" -lt "$n" ]; do
  rlock run counter -w 100 -- sh "$d/section.sh" "$d" || echo "loop $w, run $i: exit $?" >>"$d/errors"
  i=$((i + 1))
done
touch "$d/done.$w"
LOOP
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
