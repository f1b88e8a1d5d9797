#!/usr/bin/env bats
# The stop of a holder cut off from Redis reaches its whole tree before the lease ends, whatever
# else fails: a tree of thousands of processes (half of them in sessions of their own) with
# rlock stopped, the guard stopped, rlock stopped the moment the command starts, and no /proc.
# A stop sends --signal once per hold, and nothing is executed after its kill deadline.
#
# Witnesses: the holder's critical section and the next holder's (helpers/cs) must not overlap;
# the tree's working processes (helpers/tree) write timestamps, and none may be later than the
# next holder's start. The next holder takes the lock when the lease has expired in Redis: the
# whole first tree must have been killed by then (SIGKILL pending: it runs no code of its own
# again), and be gone soon after.

load ../helpers/common
load ../helpers/servers
load helpers/faults

setup() {
  faults_setup
  redis_start
  export TREE=$FAULTS_HELPERS/tree
}

teardown() {
  local p
  for p in ${big_pid:-} ${self_pid:-} ${noproc_pid:-} ${k_pid:-} ${holder_pid:-}; do kill -CONT "$p" 2>/dev/null; done
  [[ -n ${guard:-} ]] && kill -CONT "$guard" 2>/dev/null
  common_teardown
}

# no_proc_unavailable: says why a run without /proc cannot be tried here (no unshare, no mount
# namespace, or the sanitizer build, whose runtime itself needs /proc (its stack bounds and
# symbols): there the tests would check AddressSanitizer, not rlock); fails when it can be.
no_proc_unavailable() {
  if ! command -v unshare >/dev/null; then
    echo "no unshare"
  elif ! unshare -m true 2>/dev/null; then
    echo "cannot make a mount namespace here"
  elif [[ -n ${ASAN_OPTIONS:-} ]]; then
    echo "the sanitizer runtime needs /proc"
  else
    return 1
  fi
}

# no_proc_possible: skips unless a run without /proc can be tried here.
no_proc_possible() {
  local why
  if why=$(no_proc_unavailable); then skip "$why"; fi
}

# Each holder of a test has its own lock KEY (a name fit for a variable): the background rlock
# KEY, its critical section "holder" and the next holder's, "second", witnessed in $T/KEY.log,
# its tree's ticks in $T/KEY.ticks and the tree's pids in $T/KEY.ready.

# holder_tree KEY N [RLOCK ARGS...]: a background `rlock run KEY` whose command is a critical
# section beside a tree of N more processes; waits until all are registered.
holder_tree() {
  local key=$1 n=$2
  shift 2
  bg "$key" rlock run "$key" "$@" -- sh -c '"$4" "$5" holder 1000 & exec "$0" "$1" "$2" "$3"' \
    "$TREE" "$n" "$T/$key.ticks" "$T/$key.ready" "$CS" "$T/$key.log"
  tree_started "$key"
}

# tree_started KEY: waits until the tree of KEY has started and its critical section with it.
tree_started() {
  wait_until -t 60 test -s "$T/$1.ready" || fail "the tree of $1 did not start: $(bg_err "$1")"
  WLOG=$T/$1.log wait_cs holder "$1"
}

# next_holder KEY...: the next holder of each KEY, straight to Redis (all at once): each waits for
# its lock, then its critical section checks that nothing of the first tree is alive.
next_holder() {
  local key
  for key; do
    bg "${key}_second" rlock run "$key" --wait 60s -- "$CS" "$T/$key.log" second 0
  done
  for key; do
    WLOG=$T/$key.log wait_cs second "${key}_second" 60
    bg_wait "${key}_second" 10
    assert_equal "$BG_STATUS" 0
  done
}

# next_holder_then_lost KEY...: the next holder of each KEY runs with nothing of the first tree
# working beside it; then the first rlock, continued, exits 76 (the lock was lost).
next_holder_then_lost() {
  local key pid
  next_holder "$@"
  for key; do
    assert_no_overlap "$T/$key.log"
    assert_tree_quiet "$key"
    # Continued where a test stopped it; where rlock was never stopped, it may have exited already.
    pid=${key}_pid
    kill -CONT "${!pid}" 2>/dev/null || true
    bg_wait "$key" 20
    assert_equal "$BG_STATUS" 76
  done
}

# assert_tree_quiet KEY: whether the first tree of KEY worked after the next holder started:
# fails naming the late ticks.
assert_tree_quiet() {
  local key=$1 second late
  second=$(awk '$1 == "start" && $4 == "second" { print $2 }' "$T/$key.log")
  late=$(awk -v s="$second" '$2 > s' "$T/$key.ticks")
  [[ -z $late ]] || fail "the first tree of $key worked after the next holder started at $second: $late"
  wait_until -t 10 eval '[[ $(tree_alive "$key") == 0 ]]' || fail "$(tree_alive "$key") processes of the first tree of $key are alive"
}

# tree_alive KEY: how many processes of the first tree of KEY are alive: a pid of the tree that
# is alive (not a zombie) and carries this test's mark (the suites beside this one start
# thousands of processes, and pids are reused: pid_max is 32768 on many machines). One process
# for the whole tree, polled.
tree_alive() {
  perl -e '
    my ($ready, $mark) = @ARGV;
    open(my $r, "<", $ready) or die "$ready: $!";
    my $n = 0;
    while (my $p = <$r>) {
      chomp $p;
      open(my $st, "<", "/proc/$p/stat") or next;
      my $stat = <$st>;
      next unless defined $stat && $stat =~ /\) (\S)/ && $1 ne "Z";
      open(my $env, "<", "/proc/$p/environ") or next;
      local $/;
      my $e = <$env>;
      $n++ if defined $e && grep { $_ eq $mark } split /\0/, $e;
    }
    print "$n\n";
  ' "$T/$1.ready" "RLOCKTEST_MARK=$RLOCKTEST_MARK"
}

# Three rlocks stopped at once (the same wait: the lease):
#   big:    stopped (SIGSTOP) once its tree of 2000 processes, half of them in sessions of their
#           own, runs;
#   self:   stopped by its own command the moment it starts (the command's first act is to stop
#           its grandparent: rlock -> guard -> command), so that rlock can send nothing once the
#           command runs: the guard's deadline is armed already;
#   noproc: in a mount namespace without /proc, stopped once its tree of 200 runs: the tree is
#           still followed (where a run without /proc can be tried, and run does not refuse it
#           for want of a cgroup v2; the test after the next checks that refusal).
@test "rlock stopped with a tree of 2000 processes, the moment the command starts, or without /proc: all gone before the next holder" {
  local n why rc=0 keys=(big self)
  n=$(scaled 2000)
  cat >"$T/first" <<'END'
kill -STOP "$(ps -o ppid= -p "$PPID")"
"$CS" "$T/self.log" holder 1000 &
exec "$TREE" 20 "$T/self.ticks" "$T/self.ready"
END
  T=$T bg self rlock run self -t 3s -- sh "$T/first"
  if why=$(no_proc_unavailable); then
    echo "# without /proc: not tried here ($why)" >&3
  else
    unshare -m --propagation private sh -c 'umount -l /proc && exec "$0" run noproc -- true' "$RLOCK_BIN" \
      2>"$T/probe.err" || rc=$?
    if ((rc == 71)); then
      [[ $(cat "$T/probe.err") == *"/proc"* ]] || fail "the refusal does not say why: $(cat "$T/probe.err")"
      echo "# without /proc: run refuses here (no cgroup v2 to follow the tree)" >&3
    else
      ((rc == 0)) || fail "a run without /proc exited $rc: $(cat "$T/probe.err")"
      cat >"$T/noproc.first" <<END
"$CS" "$T/noproc.log" holder 1000 &
exec "$TREE" 200 "$T/noproc.ticks" "$T/noproc.ready"
END
      bg noproc unshare -m --propagation private sh -c \
        'umount -l /proc && exec "$0" run noproc -t 3s -- sh "$1"' "$RLOCK_BIN" "$T/noproc.first"
      keys+=(noproc)
    fi
  fi
  holder_tree big "$n" -t 3s
  kill -STOP "$big_pid"
  if [[ ${keys[*]} == *noproc* ]]; then
    tree_started noproc
    kill -STOP "$noproc_pid"
  fi
  tree_started self
  [[ $(awk '{ print $3 }' /proc/"$self_pid"/stat) == T ]] || fail "rlock is not stopped"
  next_holder_then_lost "${keys[@]}"
}

@test "the guard stopped (SIGSTOP) and the holder cut off: rlock stops the tree itself, continues the guard, 76" {
  proxy_start p "$REDIS_PORT"
  holder_tree k 50 -t 3s -u "redis://127.0.0.1:$p_PORT"
  guard=$(child_of "$k_pid")
  [[ -n $guard ]] || fail "rlock has no guard"
  kill -STOP "$guard"
  proxy_pause p
  next_holder k
  assert_no_overlap "$T/k.log"
  assert_tree_quiet k
  # The guard was continued and ended, not left stopped.
  wait_until -t 5 pid_gone "$guard" || fail "the guard is still there: $(cat /proc/"$guard"/stat)"
  # Back in touch, rlock records the loss at once rather than trying for one more TTL.
  proxy_resume p
  bg_wait k 20
  assert_equal "$BG_STATUS" 76
}

# term_counter: a bash script that counts the SIGTERMs it gets (a line each in $T/terms, from a
# trap), says it is ready (its pid in $T/ready), and works until it is killed.
term_counter() {
  cat <<'END'
trap 'echo TERM >>"$T/terms"' TERM
echo $$ >"$T/ready.tmp" && mv "$T/ready.tmp" "$T/ready"
while :; do sleep 0.05 & wait $!; done
END
}

# Two holders whose renewals fail at once, each on its own server (the same wait: the lease, then
# --kill-after):
#   paused: its server stopped (SIGSTOP): the command gets --signal once, then SIGKILL.
#   killed: its server killed: a queued --signal (a real-time signal: every kill(2) of it is one
#           more instance, none merges with one still pending) arrives once per process, not
#           once per way to the process. The command blocks it and counts what arrives; it is
#           in the child's process group and in the tree's cgroup (or found through /proc) at
#           once.
# Back in touch, each rlock records the loss at once rather than trying for one more TTL.
@test "renewals failing (Redis paused, or killed): --signal once (a queued one once per process), then SIGKILL" {
  mkdir "$T/p"
  term_counter >"$T/p/cmd"
  cat >"$T/cmd.py" <<'END'
import os, signal
sig = 40
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
with open(os.environ["T"] + "/ready.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(os.environ["T"] + "/ready.tmp", os.environ["T"] + "/ready")
while True:
    if signal.sigtimedwait([sig], 0.1):
        with open(os.environ["T"] + "/signals", "a") as f:
            f.write("40\n")
END
  srv_start paused || fail "could not start a second redis-server"
  local paused_srv=$SRV_PID
  T=$T bg holder rlock run k -t 2s --kill-after 0.8s --signal 40 -- "$FAULTS_PYTHON" "$T/cmd.py"
  wait_until -t 10 test -e "$T/ready" || fail "the command did not start: $(bg_err holder)"
  T=$T/p bg paused rlock run p -u "redis://127.0.0.1:$SRV_PORT" -t 2s --kill-after 0.8s -- bash "$T/p/cmd"
  wait_until -t 10 test -e "$T/p/ready" || fail "the command did not start: $(bg_err paused)"
  kill -STOP "$paused_srv"
  redis_kill
  wait_until -t 10 pid_gone "$(cat "$T/p/ready")" || fail "the command was not killed: $(bg_err paused)"
  wait_until -t 10 pid_gone "$(cat "$T/ready")" || fail "the command was not killed: $(bg_err holder)"
  kill -CONT "$paused_srv"
  # A server again (empty).
  redis_restart
  bg_wait paused 20
  assert_equal "$BG_STATUS" 76
  assert_equal "$(cat "$T/p/terms")" TERM || fail "$(bg_err paused)"
  bg_wait holder 20
  assert_equal "$BG_STATUS" 76
  assert_equal "$(cat "$T/signals")" 40
}

# Two losses after a stop, which pay the same wait (the next renewal): each command goes on
# after a TERM, then its lock is deleted, and the next renewal (within TTL/3, 2s, before
# --kill-after ends, 2.8s after the TERM) finds it lost (or taken) and stops the tree again.
#   left: the command leaves a counter behind and exits: --leftovers kill sends it TERM.
#   pre:  a preemptor's request stops the command (TERM), which goes on.
@test "a loss after a stop by --leftovers kill or by --preempt: the command gets --signal once, then SIGKILL" {
  mkdir "$T/left" "$T/pre"
  term_counter >"$T/left/job"
  printf 'bash "%s/job" &\nwhile [ ! -e "%s/ready" ]; do sleep 0.01; done\n' "$T/left" "$T/left" >"$T/left/cmd"
  T=$T/left bg left rlock run k -t 6s --kill-after 2.8s --leftovers kill -- sh "$T/left/cmd"
  term_counter >"$T/pre/cmd"
  T=$T/pre bg holder rlock run p -t 6s --kill-after 2.8s --preemptible -- bash "$T/pre/cmd"
  wait_until -t 10 test -e "$T/pre/ready" || fail "the command did not start: $(bg_err holder)"
  bg pre rlock run p --preempt --wait 30s -- true
  wait_until -t 10 test -s "$T/left/terms" || fail "the leftover got no TERM: $(bg_err left)"
  rcli del "$(lock_key k)" >/dev/null
  wait_until -t 10 test -s "$T/pre/terms" || fail "the preempted command got no TERM: $(bg_err holder)"
  rcli del "$(lock_key p)" >/dev/null
  bg_wait left 20
  assert_equal "$BG_STATUS" 76
  [[ $(bg_err left) == *"lost the lock"* ]] || fail "the loss was not found: $(bg_err left)"
  assert_equal "$(cat "$T/left/terms")" TERM
  bg_wait holder 20
  [[ $(bg_err holder) == *"lost the lock"* ]] || fail "the loss was not found: $(bg_err holder)"
  assert_equal "$(cat "$T/pre/terms")" TERM
  bg_wait pre 20
  assert_equal "$BG_STATUS" 0
}

# guard_of NAME: the background rlock NAME has its guard process.
guard_of() {
  local pid=${1}_pid
  pgrep -P "${!pid}" -x 'rlock guard' >/dev/null
}
guard_of_holder() { guard_of holder; }
# queued KEY: one waiter in KEY's queue.
queued() { [[ $(rcli zcard "rlock:{$1}:q" 2>/dev/null) == 1 ]]; }
holder_queued() { queued k; }

# untraced_leak_check: ASAN_OPTIONS for an rlock run under strace: LeakSanitizer, which does not
# work under ptrace, off (the sanitizer pass); nothing else changes.
untraced_leak_check() { echo "${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; }

# strace_delay_possible: skips unless strace can hold up a system call of a command it starts
# here (ptrace allowed, fault injection supported).
strace_delay_possible() {
  command -v strace >/dev/null || skip "no strace"
  strace -o /dev/null -e trace=write -e inject=write:delay_enter=1000:when=1 true 2>/dev/null ||
    skip "strace cannot delay a system call here"
}

# Two runs held up at once (the same 3s): rlock's first write(2) is its request to the guard to
# start the command, made after the lease's check (without -v it writes nothing before): strace
# holds that call up for 3s, past the 2s lease by a second, as a stopped process or a frozen VM
# would be held up.
#   k: the command, watched by the kernel (an execve of it opens it: helpers/exec-watch), leaves
#      a file if it ever runs; meanwhile the lease ends and the next holder runs.
#   o: a run of --once-per 1h, whose request is made once the tick is marked run. The guard
#      refuses the start; the command never ran, so its tick is given back, though the lease ran
#      out meanwhile: the next run of the tick runs it.
@test "rlock held up past the lease between its check and the command's start: nothing is executed, 76; a once-per tick is given back" {
  strace_delay_possible
  # The sanitizer runtime makes write(2)s of its own (its memory probes) before rlock's first.
  [[ -z ${ASAN_OPTIONS:-} ]] || skip "the sanitizer runtime writes before rlock's request to the guard"
  printf '#!/bin/sh\ntouch "%s/ran"\n' "$T" >"$T/cmd"
  chmod +x "$T/cmd"
  printf '#!/bin/sh\necho "$1" >>"%s/ran-o"\n' "$T" >"$T/cmd-o"
  chmod +x "$T/cmd-o"
  bg watch "$FAULTS_PYTHON" "$FAULTS_HELPERS/exec-watch" "$T/cmd" "$T/opens"
  wait_until test -s "$T/opens" || fail "exec-watch did not start: $(bg_err watch)"
  bg holder env ASAN_OPTIONS="$(untraced_leak_check)" strace -o "$T/strace" -e trace=write -e inject=write:delay_enter=3000000:when=1 \
    "$RLOCK_BIN" run k -t 2s -- "$T/cmd"
  bg once env ASAN_OPTIONS="$(untraced_leak_check)" strace -o "$T/strace-o" -e trace=write -e inject=write:delay_enter=3000000:when=1 \
    "$RLOCK_BIN" run o -t 2s --once-per 1h -- "$T/cmd-o" first
  wait_until -t 10 lock_held k || fail "the first rlock did not take the lock: $(bg_err holder)"
  wait_until -t 10 lock_held o || fail "the once-per rlock did not take the lock: $(bg_err once)"
  rlock run k --wait 10s -- "$CS" "$WLOG" second 0 || fail "the next holder did not run"
  bg_wait holder 20
  [[ $(grep -m 1 'DELAYED' "$T/strace") == 'write('*'"\4\0\0\0'*', 16) = 16 (DELAYED)' ]] ||
    fail "the delay did not hold up the request to the guard: $(cat "$T/strace")"
  [[ $(grep -c '^open' "$T/opens") == 0 ]] || fail "the command was executed after its deadline"
  assert_file_not_exists "$T/ran"
  assert_equal "$BG_STATUS" 76
  [[ $(count_error_lines "$(bg_err holder)") == 1 && $(bg_err holder) == *"not run"* ]] ||
    fail "expected one error line saying the command was not run: $(bg_err holder)"
  assert lock_free k
  # The once-per run.
  bg_wait once 20
  assert_equal "$BG_STATUS" 76
  [[ $(grep -m 1 'DELAYED' "$T/strace-o") == 'write('*'"\4\0\0\0'*', 16) = 16 (DELAYED)' ]] ||
    fail "the delay did not hold up the once-per run's request to the guard: $(cat "$T/strace-o")"
  run --separate-stderr rlock run o -n --once-per 1h -- "$T/cmd-o" second
  assert_success
  run --separate-stderr rlock run o -n --once-per 1h -- "$T/cmd-o" third
  assert_failure 75
  assert_equal "$(xargs <"$T/ran-o")" "second"
}

# Two guards held up at once (each run queued behind a lock the test holds, so that its guard
# has started and said it is ready before strace attaches to it):
#   k: strace holds up the guard's first clone, which starts the child once the guard found the
#      deadline still ahead, for 3s: the child would run past the 2s lease. It must not exec.
#   j: strace holds up the guard's next write(2), the report that the command started, for 3s
#      (the same), as a starved or frozen guard would be. The command runs meanwhile, and
#      the guard cannot keep its deadline: rlock kills the tree itself, before the next holder.
@test "the guard held up past the lease before the child's start (no exec) or before its report (rlock kills the tree): 76" {
  strace_delay_possible
  printf '#!/bin/sh\ntouch "%s/ran"\n' "$T" >"$T/cmd"
  chmod +x "$T/cmd"
  bg watch "$FAULTS_PYTHON" "$FAULTS_HELPERS/exec-watch" "$T/cmd" "$T/opens"
  wait_until test -s "$T/opens" || fail "exec-watch did not start: $(bg_err watch)"
  local tok tok_j guard guard_j
  tok=$(rlock acquire k -t 60s)
  tok_j=$(rlock acquire j -t 60s)
  bg holder rlock run k --wait 30s -t 2s -- "$T/cmd"
  bg report rlock run j --wait 30s -t 2s -- "$CS" "$WLOG" first 8 0.02
  wait_until guard_of_holder || fail "no guard: $(bg_err holder)"
  wait_until guard_of report || fail "no guard: $(bg_err report)"
  # Queued: each guard, started before the lock was asked for, has long said it is ready (the
  # write that must not be the one held up).
  wait_until holder_queued || fail "the holder is not queued: $(bg_err holder)"
  wait_until queued j || fail "the reporting run is not queued: $(bg_err report)"
  guard=$(pgrep -P "$holder_pid" -x 'rlock guard')
  guard_j=$(pgrep -P "$report_pid" -x 'rlock guard')
  bg tracer strace -p "$guard" -o "$T/strace" -e trace=clone,clone3 -e inject=clone,clone3:delay_enter=3000000:when=1
  bg tracer_j strace -p "$guard_j" -o "$T/strace-j" -e trace=write -e inject=write:delay_enter=3000000:when=1
  wait_until grep -q attached "$T/tracer.err" 2>/dev/null || wait_until test -s "$T/strace" ||
    fail "strace did not attach: $(bg_err tracer)"
  wait_until grep -q attached "$T/tracer_j.err" 2>/dev/null || wait_until test -s "$T/strace-j" ||
    fail "strace did not attach: $(bg_err tracer_j)"
  RLOCK_TOKEN=$tok rlock release k
  RLOCK_TOKEN=$tok_j rlock release j
  wait_cs first report
  # The next holder of j runs once the lease has run out in Redis: by then the first command must
  # be gone, killed by rlock itself (its guard being held up).
  rlock run j --wait 20s -- "$CS" "$WLOG" second 0 || fail "the next holder did not run"
  # k: the child found the deadline passed and did not exec ("not run"), or rlock, with its
  # guard silent past the deadline, killed the child first: one error line either way.
  bg_wait holder 30
  [[ $(grep -c 'clone.*(DELAYED)' "$T/strace") == 1 ]] ||
    fail "the delay did not hold up the guard's start of the child: $(cat "$T/strace")"
  [[ $(grep -c '^open' "$T/opens") == 0 ]] || fail "the command was executed after its deadline"
  assert_file_not_exists "$T/ran"
  assert_equal "$BG_STATUS" 76
  [[ $(count_error_lines "$(bg_err holder)") == 1 &&
    ($(bg_err holder) == *"not run"* || $(bg_err holder) == *"killed whatever of it had started"*) ]] ||
    fail "expected one error line saying the command was not run: $(bg_err holder)"
  assert lock_free k
  # j.
  bg_wait report 20
  grep -q 'write(.*"\\1\\0\\0\\0.*(DELAYED)' "$T/strace-j" ||
    fail "the delay did not hold up the guard's report of the start: $(cat "$T/strace-j")"
  assert_no_overlap
  assert_equal "$BG_STATUS" 76
  [[ $(count_error_lines "$(bg_err report)") == 1 && $(bg_err report) == *"killed whatever of it had started"* ]] ||
    fail "expected one error line saying rlock killed the command at its deadline: $(bg_err report)"
  assert lock_free j
}

@test "without /proc and without a cgroup to follow the tree: run refuses (71) before taking the lock" {
  no_proc_possible
  run --separate-stderr unshare -m --propagation private sh -c \
    'umount -l /proc && mount -t tmpfs none /sys/fs/cgroup && exec "$0" run k -- touch "$1"' "$RLOCK_BIN" "$T/ran"
  assert_error_exit 71
  [[ $stderr == *"/proc"* && $stderr == *cgroup* ]] || fail "the refusal does not say why: '$stderr'"
  assert_file_not_exists "$T/ran"
  assert lock_free k
  assert_equal "$(rcli exists 'rlock:{k}:log')" 0
}

@test "the witness (helpers/cs): a section still running is an overlap; one that ended, or whose pid another process took, is not" {
  "$CS" "$T/w1" first "until:$T/go" &
  local first=$!
  wait_until cs_started first "$T/w1" || fail "the first section did not start"
  "$CS" "$T/w1" second 0
  touch "$T/go"
  wait "$first"
  run "$CS" check "$T/w1"
  assert_failure
  assert_output --partial "second started while pid $first (first) was still alive"

  "$CS" "$T/w2" first 0
  "$CS" "$T/w2" second 0
  run "$CS" check "$T/w2"
  assert_success

  # The log names a live process, which started at another time than the section recorded:
  # its pid was reused (the suites beside this one start thousands of processes).
  sleep 30 &
  local other=$!
  echo "start 1 $other first" >"$T/w3"
  echo "$other 1" >"$T/w3.st"
  "$CS" "$T/w3" second 0
  kill "$other"
  run "$CS" check "$T/w3"
  assert_success
}
