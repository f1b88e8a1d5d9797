#!/usr/bin/env bats
# The child's process tree: a loss found at release is reported; background jobs the command
# leaves behind (in its process group, or daemonised with setsid) keep the lock until they end,
# or are ended with --leftovers kill; when rlock itself is killed (SIGKILL), its whole tree goes
# with it, even a child that cleared its parent-death signal by executing a set-group-ID binary;
# when its guard is killed, rlock waits for the tree no longer than the kill deadline.
# No cgroup is left behind: a killed nested run's, the command's own, a killed guard's.
#
# Critical sections run the witness (helpers/cs), which records any overlap.

load ../helpers/common
load helpers/faults

setup() {
  faults_setup
  redis_start
}

teardown() {
  common_teardown
  # Cgroups a failed test left (a cgroup directory's files cannot be removed: rmdir, deepest first).
  [[ -n ${stale:-} && -d $stale ]] && find "$stale" -depth -type d -exec rmdir {} + 2>/dev/null
  # The cgroups of a crowd of runs alive (rlock.0..., never a guard's own: no leading zero).
  [[ -n ${crowd:-} ]] && find "$crowd" -maxdepth 1 -type d -name 'rlock.0*' -exec rmdir {} + 2>/dev/null
  true
}

# cgroup2_mount: where the cgroup v2 hierarchy is mounted (where the guard looks for it), or
# nothing.
cgroup2_mount() {
  local m
  for m in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    [[ $(stat -f -c %T "$m" 2>/dev/null) == cgroup2fs ]] && echo "$m" && return
  done
}

# cgroup_of_command FILE: the cgroup directory that a command recorded in FILE (its "0::" line of
# /proc/self/cgroup); skips the test unless the tree had a cgroup of its own (rlock.GUARD).
cgroup_of_command() {
  local mount rel
  mount=$(cgroup2_mount)
  rel=$(cat "$1")
  [[ -n $mount && $rel == */rlock.[0-9]* ]] || skip "no cgroup v2 for the command's tree here"
  echo "$mount$rel"
}

# make_crowd: 300 runs alive next to this shell's cgroup, as the guard's sweep sees them (rlock.01,
# rlock.001, ...: each names pid 1), into $crowd (teardown removes them); skips the test where
# there is no cgroup v2 or no cgroup can be made.
make_crowd() {
  local mount own i name dirs=()
  mount=$(cgroup2_mount)
  [[ -n $mount ]] || skip "no cgroup v2 here"
  own=$(sed -n 's/^0:://p' /proc/self/cgroup)
  crowd=$mount${own%/}
  # (One mkdir for all: a process for each would cost a second or two.)
  for ((i = 2; i <= 301; i++)); do
    printf -v name '%0*d' "$i" 1
    dirs+=("$crowd/rlock.$name")
  done
  mkdir "${dirs[@]}" 2>/dev/null || skip "cannot make a cgroup here"
}

# The command's own cgroup, into $T/cgroup (as a path under the hierarchy).
record_cgroup='sed -n "s/^0:://p" /proc/self/cgroup >"$T/cgroup.tmp" && mv "$T/cgroup.tmp" "$T/cgroup"'

# A child that says it started, then exits 0 when the test creates $T/go.
started_then_go() {
  printf 'touch "%s/started"; while [ ! -e "%s/go" ]; do sleep 0.05; done; exit 0' "$T" "$T"
}

# second_holder LABEL: one `rlock run k -n` of a witnessed critical section; succeeds when it
# got the lock.
second_holder() {
  rlock run k -n -- "$CS" "$WLOG" "$1" 0 2>>"$T/second.err"
}

# --- a loss found at release ---------------------------------------------------------------------

@test "lock deleted while the child runs, child exits 0 before the next renewal: exit 76, one error" {
  bg holder rlock run k -t 30s -- sh -c "$(started_then_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  rcli del "$(lock_key k)" >/dev/null
  touch "$T/go"
  bg_wait holder 10
  [[ $BG_STATUS == 76 ]] || fail "expected 76, got $BG_STATUS; stderr: $(bg_err holder)"
  local err n
  err=$(bg_err holder)
  n=$(count_error_lines "$err")
  ((n == 1)) || fail "expected one 'rlock: error:' line, got $n: '$err'"
  grep '^rlock: error: ' <<<"$err" | grep -qi lost || fail "the error does not say the lock was lost: '$err'"
}

@test "lock deleted while the child runs: --lost-exit-code 9 gives 9 at release" {
  bg holder rlock run k -t 30s --lost-exit-code 9 -- sh -c "$(started_then_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  rcli del "$(lock_key k)" >/dev/null
  touch "$T/go"
  bg_wait holder 10
  [[ $BG_STATUS == 9 ]] || fail "expected 9, got $BG_STATUS; stderr: $(bg_err holder)"
}

@test "lock taken over while the child runs: exit 76 at release, the new holder's lock untouched" {
  bg holder rlock run k -t 30s -- sh -c "$(started_then_go)"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err holder)"
  rcli set "$(lock_key k)" someone-else-0123456789abcdef0123 >/dev/null
  touch "$T/go"
  bg_wait holder 10
  [[ $BG_STATUS == 76 ]] || fail "expected 76, got $BG_STATUS; stderr: $(bg_err holder)"
  assert_equal "$(rcli get "$(lock_key k)")" someone-else-0123456789abcdef0123
}

# --- background jobs left behind -----------------------------------------------------------------

# A shell snippet for -c commands: wait until the background critical section "job" has
# recorded its start (so the command never exits before its leftover exists).
JOB_UP='until grep -q "^start .* job\$" "$WLOG"; do sleep 0.02; done'

# contend_while_jobs_run KEY...: while the critical section "job" of KEY (witnessed in
# $T/KEY.log) has not ended, tries `rlock run KEY -n` of a witnessed section; each try must be
# refused with 75 (a try that gets the lock after the job ended is fine: the witness tells).
# Sets BUSY_SEEN[KEY] to the number of refusals.
contend_while_jobs_run() {
  declare -gA BUSY_SEEN=()
  local -A over=()
  local key rc running
  for key; do
    BUSY_SEEN[$key]=0
  done
  while :; do
    running=0
    for key; do
      [[ -v over[$key] ]] && continue
      if cs_ended job "$T/$key.log"; then
        over[$key]=1
        continue
      fi
      running=1
      rc=0
      rlock run "$key" -n -- "$CS" "$T/$key.log" intruder 0 2>>"$T/intruder.err" || rc=$?
      case $rc in
        75) BUSY_SEEN[$key]=$((BUSY_SEEN[$key] + 1)) ;;
        0) over[$key]=1 ;;
        *) fail "a contender of $key exited $rc: $(cat "$T/intruder.err")" ;;
      esac
    done
    ((running)) || break
    sleep 0.1
  done
}

# Two leftovers at once (the same 3s wait, twice the lease): a background job in the command's
# process group (lock k), and a daemonised one in a session of its own (lock d).
@test "a background job, or a daemonised leftover (setsid -f), left by the command keeps the lock (renewed) until it exits" {
  WLOG=$T/k.log bg holder rlock run k -t 1.5s -c "\"\$CS\" \"\$WLOG\" job 3 & $JOB_UP; exit 0"
  WLOG=$T/d.log bg daemon rlock run d -t 1.5s -c "setsid -f \"\$CS\" \"\$WLOG\" job 3; $JOB_UP; exit 0"
  WLOG=$T/k.log wait_cs job holder
  WLOG=$T/d.log wait_cs job daemon
  contend_while_jobs_run k d
  assert_no_overlap "$T/k.log"
  assert_no_overlap "$T/d.log"
  ((BUSY_SEEN[k] >= 3)) || fail "only ${BUSY_SEEN[k]} contenders were refused while the 3s background job ran"
  ((BUSY_SEEN[d] >= 3)) || fail "only ${BUSY_SEEN[d]} contenders were refused while the 3s daemonised job ran"
  bg_wait holder 10
  assert_equal "$BG_STATUS" 0
  assert lock_free k
  bg_wait daemon 10
  assert_equal "$BG_STATUS" 0
  assert lock_free d
}

@test "--leftovers kill ends the background job when the command exits, with the command's status" {
  bg holder rlock run k -t 3s --leftovers kill --kill-after 1s -c "\"\$CS\" \"\$WLOG\" job 30 & $JOB_UP; exit 3"
  wait_cs job holder
  local job
  job=$(cs_pid job)
  bg_wait holder 10
  [[ $BG_STATUS == 3 ]] || fail "expected the command's status 3, got $BG_STATUS; stderr: $(bg_err holder)"
  wait_until -t 1 pid_gone "$job" || fail "the leftover job $job is still running after rlock exited"
  grep -q "^stop [0-9]* $job TERM" "$WLOG" || fail "the job did not get SIGTERM: $(cat "$WLOG")"
  assert lock_free k
  second_holder after || fail "the lock could not be taken after rlock exited: $(cat "$T/second.err")"
  assert_no_overlap
}

@test "--leftovers kill: a leftover that ignores SIGTERM gets SIGKILL after --kill-after" {
  bg holder env CS_IGNORE_TERM=1 rlock run k -t 3s --leftovers kill --kill-after 0.5s -c "\"\$CS\" \"\$WLOG\" job 30 & $JOB_UP; exit 0"
  wait_cs job holder
  local job
  job=$(cs_pid job)
  bg_wait holder 10
  [[ $BG_STATUS == 0 ]] || fail "expected the command's status 0, got $BG_STATUS; stderr: $(bg_err holder)"
  wait_until -t 1 pid_gone "$job" || fail "the leftover job $job survived"
  assert lock_free k
}

@test "--leftovers kill ends a daemonised leftover (setsid -f) too" {
  bg holder rlock run k -t 3s --leftovers kill --kill-after 1s -c "setsid -f \"\$CS\" \"\$WLOG\" job 30; $JOB_UP; exit 4"
  wait_cs job holder
  local job
  job=$(cs_pid job)
  bg_wait holder 10
  [[ $BG_STATUS == 4 ]] || fail "expected the command's status 4, got $BG_STATUS; stderr: $(bg_err holder)"
  wait_until -t 1 pid_gone "$job" || fail "the daemonised leftover $job is still running after rlock exited"
  assert lock_free k
  second_holder after || fail "the lock could not be taken after rlock exited: $(cat "$T/second.err")"
  assert_no_overlap
}

# --- rlock killed ------------------------------------------------------------------------------

@test "SIGKILL of rlock: child and grandchild are gone within 1.5s; the next holder sees no overlap" {
  bg holder rlock run k -t 2s -c "\"\$CS\" \"\$WLOG\" grandchild 30 & wait"
  wait_cs grandchild holder
  local child grandchild
  child=$(child_of "$holder_pid")
  grandchild=$(cs_pid grandchild)
  [[ -n $child ]] || fail "rlock has no child"
  kill -KILL "$holder_pid"
  wait_until -t 1.5 pid_gone "$grandchild" || fail "the grandchild $grandchild outlived rlock by 1.5s"
  wait_until -t 0.5 pid_gone "$child" || fail "the child $child outlived rlock"
  # After the lease, another holder takes the lock: nothing of the first is left.
  wait_until -t 10 second_holder second || fail "no second holder after the TTL: $(cat "$T/second.err")"
  assert_no_overlap
}

@test "SIGKILL of the outer rlock of a nested run: the cgroups of both are removed" {
  T=$T bg holder rlock run outer -t 3s -- "$RLOCK_BIN" run inner -t 3s -- sh -c "$record_cgroup; exec sleep 30"
  wait_until -t 10 test -s "$T/cgroup" || fail "the inner command did not start: $(bg_err holder)"
  local inner outer
  inner=$(cgroup_of_command "$T/cgroup")
  outer=${inner%/*}
  [[ $outer == */rlock.[0-9]* ]] || skip "the outer tree had no cgroup of its own"
  kill -KILL "$holder_pid"
  wait_until -t 5 test ! -d "$outer" || fail "left behind: $(find "$outer" -type d)"
}

@test "a command that makes a cgroup under its tree's and moves into it: the tree's cgroup is removed" {
  T=$T rlock run k -- sh -c "$record_cgroup"'
    dir=$(cat "$T/cgroup") && mount=$0 && mkdir "$mount$dir/sub" && echo $$ >"$mount$dir/sub/cgroup.procs" &&
      touch "$T/moved"' "$(cgroup2_mount)"
  local tree
  tree=$(cgroup_of_command "$T/cgroup")
  [[ -e $T/moved ]] || skip "the command could not make a cgroup of its own here"
  [[ ! -d $tree ]] || fail "left behind: $(find "$tree" -type d)"
}

@test "the cgroups of killed guards, nested ones included, are removed by the next run's sweep" {
  local mount own dead1 dead2
  mount=$(cgroup2_mount)
  [[ -n $mount ]] || skip "no cgroup v2 here"
  own=$(sed -n 's/^0:://p' /proc/self/cgroup)
  own=${own%/}
  dead1=$(sh -c 'echo $$')
  dead2=$(sh -c 'echo $$')
  stale=$mount$own/rlock.$dead1
  mkdir -p "$stale/rlock.$dead2/sub" 2>/dev/null || skip "cannot make a cgroup here"
  ! pid_alive "$dead1" || skip "pid $dead1 was taken again"
  rlock run k -- true
  [[ ! -d $stale ]] || fail "left behind: $(find "$stale" -type d)"
}

@test "the sweep looks at no more than 64 cgroups of other runs, however many are alive" {
  command -v strace >/dev/null || skip "no strace here"
  local n
  make_crowd
  # (LeakSanitizer, in the sanitizer pass, cannot run under ptrace.)
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
    strace -f -qq -e trace=kill -o "$T/trace" "$RLOCK_BIN" run k -- true
  n=$(grep -cE 'kill\(1, 0\)' "$T/trace" || true)
  ((n > 0)) || skip "the guard swept nothing here (no cgroup of its own?)"
  ((n <= 64)) || fail "$n checks of runs alive in one start"
}

@test "with more than 64 runs alive, the sweep still comes to a killed guard's cgroup" {
  local i dead
  make_crowd
  dead=$(sh -c 'echo $$')
  stale=$crowd/rlock.$dead
  mkdir "$stale" || skip "cannot make a cgroup here"
  ! pid_alive "$dead" || skip "pid $dead was taken again"
  # Each start looks at 64 of the 301 from a place of its own: 60 starts miss it with a chance
  # below one in a million.
  for ((i = 0; i < 60; i++)); do
    [[ -d $stale ]] || break
    rlock run k -- true
  done
  [[ ! -d $stale ]] || fail "60 runs did not sweep $stale"
}

@test "SIGKILL of rlock: a child that executed a set-group-ID binary is gone within 1.5s" {
  [[ $(id -u) == 0 ]] || skip "making a set-group-ID binary needs root"
  local sg
  sg=$(sgid_sleep) || skip "could not make a set-group-ID copy of sleep"
  bg holder rlock run k -t 3s -- "$sg" 30
  local child=""
  wait_until eval 'child=$(command_of "$holder_pid"); [[ -n $child && $(cat /proc/$child/comm 2>/dev/null) == sleep ]]' ||
    fail "rlock did not start the set-group-ID sleep: $(bg_err holder)"
  # The binary really runs with another effective group (so the kernel cleared PDEATHSIG).
  local egid
  egid=$(awk '/^Gid:/ { print $3 }' "/proc/$child/status")
  [[ $egid == "$(getent group nogroup | cut -d: -f3)" ]] || skip "the set-group-ID bit had no effect here (nosuid mount?)"
  kill -KILL "$holder_pid"
  wait_until -t 1.5 pid_gone "$child" || fail "the set-group-ID child $child outlived rlock by 1.5s"
}

# When the guard is killed, the tree comes to rlock, which kills it and waits for it, renewing
# nothing meanwhile: that wait ends at the kill deadline even if a process of the tree cannot be
# reaped (here one held by a tracer that never waits for it; as one in an uninterruptible sleep
# would be). rlock says so, and exits 71 within its lease, not when the process is gone.
@test "the guard killed, a process of the tree that cannot be reaped keeps rlock no longer than its lease: 71" {
  bg holder rlock run k -t 2s -- sh -c 'sleep 120 & echo $! >"$0"; exec sleep 120' "$T/leftover"
  wait_until test -s "$T/leftover" || fail "the command did not start: $(bg_err holder)"
  local leftover guard
  leftover=$(cat "$T/leftover")
  bg tracer "$FAULTS_PYTHON" "$FAULTS_HELPERS/ptrace-hold" "$leftover"
  wait_until grep -q seized "$T/tracer.out" || skip "cannot trace a process here: $(bg_err tracer)"
  guard=$(pgrep -P "$holder_pid" -x 'rlock guard') || fail "no guard: $(bg_err holder)"
  local t0
  t0=$(now_ms)
  kill -KILL "$guard"
  bg_wait holder 15
  local took
  took=$(elapsed_ms "$t0")
  echo "# rlock exited ${took}ms after its guard was killed" >&3
  assert_equal "$BG_STATUS" 71
  bg_done tracer && fail "the tracer ended first: $(bg_err tracer)"
  ((took < 6000)) || fail "rlock waited ${took}ms for the tree, more than its lease (2s) and a margin"
  [[ $(bg_err holder) == *"guard process that watched the command was killed"* &&
    $(bg_err holder) == *"were not gone by the kill deadline"* ]] ||
    fail "rlock did not say a process of the tree was left: $(bg_err holder)"
}
