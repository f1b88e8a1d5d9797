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
load faults/helpers/faults
# The fault helpers live one directory down.
FAULTS_HELPERS=$BATS_TEST_DIRNAME/faults/helpers

BATS_TEST_TIMEOUT=240

setup() {
  faults_setup
  export XDG_RUNTIME_DIR=$T/run
  mkdir -m 700 "$XDG_RUNTIME_DIR"
}

teardown() {
  common_teardown
}

# ---------------------------------------------------------------------------------------------
# Contention: 8 loops of `rlock run` on one key

# The critical section: a read-increment-write that loses updates when two run at once, a
# marker directory that only one section may have created at a time, and the fence it ran with.
write_section() {
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
shift 3
while [ "$i" -lt "$n" ]; do
  rlock run counter -w 100 "$@" -- sh "$d/section.sh" "$d" 2>>"$d/stderr.$w" ||
    echo "loop $w, run $i: exit $?" >>"$d/errors"
  i=$((i + 1))
done
touch "$d/done.$w"
LOOP
  echo 0 >"$T/count"
  : >"$T/fences"
}

all_loops_done() {
  local w
  for w in $(seq 1 "$1"); do
    [[ -e $T/done.$w ]] || return 1
  done
}

count_at_least() { (($(cat "$T/count") >= $1)); }

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

@test "5 masters, 8 concurrent loops of 30 runs: the counter ends at exactly 240, no overlap, fences strictly increase" {
  masters_start 5
  write_section
  local t0
  t0=$(now_ms)
  start_loops 8 30 "${U[@]}"
  wait_until -t 200 all_loops_done 8 || fail "the loops did not finish in 200s; count $(cat "$T/count")"
  echo "# 240 runs on 5 masters in $(elapsed_ms "$t0")ms" >&3
  check_loops 240
  assert free_everywhere counter
}

@test "2 of 5 masters killed while 8 loops run: every run succeeds, the counter is exact" {
  masters_start 5
  write_section
  start_loops 8 30 "${U[@]}"
  wait_until -t 100 count_at_least 60 || fail "the loops did not get going: count $(cat "$T/count")"
  m_kill 2
  m_kill 5
  local at
  at=$(cat "$T/count")
  wait_until -t 200 all_loops_done 8 || fail "the loops did not finish in 200s; count $(cat "$T/count")"
  echo "# masters killed at count $at" >&3
  ((at < 240)) || fail "the loops were done before the masters were killed"
  check_loops 240
  assert free_everywhere counter
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
      5) run --separate-stderr rlock acquire k -n -t 5s "${U[@]}" ;;
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
