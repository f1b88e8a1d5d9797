#!/usr/bin/env bats
# rlock under a terminal (a pty driven by helpers/pty_run.py): ^C stops a shell loop as it
# would with flock(1); ^Z suspends the run (the shell gets its prompt back) and fg resumes it,
# unless the lease ran out meanwhile: then the child is ended without running on, and rlock
# exits 76. Job-control signals sent to a waiting rlock do not make it give up.

load ../helpers/common
load helpers/faults

setup() {
  faults_setup
  redis_start
}

teardown() {
  common_teardown
}

# The prompt of the interactive shells: typed text never matches it ($((6*7)) expands to 42).
PROMPT_RE='@@42@@'

# interactive_bash STEPS: runs an interactive bash (no rc files, no line editing) under a pty.
interactive_bash() {
  PS1='@@$((6*7))@@ ' pty_run "$1" -- bash --norc --noprofile --noediting -i
}

# ticker SECONDS: writes $T/ticker, a witnessed child that ticks (prints TICK-n) every 0.2s for
# SECONDS of running time, then prints cs-end.
make_ticker() {
  printf '#!/bin/sh\nCS_SAY=1 exec "$CS" "$WLOG" ticker %s 0.2\n' "$1" >"$T/ticker"
  chmod +x "$T/ticker"
}

pty_failure() {
  fail "$1
driver: $(cat "$T/pty.err" 2>/dev/null)
terminal: $(LC_ALL=C cat -v "$PTY_OUT" 2>/dev/null)"
}

# --- ^C ----------------------------------------------------------------------------------------

@test "^C in a shell loop of runs stops the loop, and the lock is free" {
  cat >"$T/steps" <<'EOF'
expect 20 child-up
send \x03
wait_exit 15
EOF
  pty_run "$T/steps" -- bash -c 'for i in 1 2 3; do rlock run k -- sh -c "echo child-up; exec sleep 5"; echo "rc=$?"; done; echo loop-done' ||
    pty_failure "the pty steps failed"
  ! grep -q 'rc=' "$PTY_OUT" || pty_failure "the loop went on after ^C (rlock did not die of SIGINT)"
  ! grep -q 'loop-done' "$PTY_OUT" || pty_failure "the loop went on after ^C"
  [[ $PTY_STATUS == 130 ]] || pty_failure "the shell exited $PTY_STATUS, not by SIGINT (130)"
  wait_until -t 5 lock_free k || fail "the lock is still held after ^C"
}

# --- ^Z and fg ---------------------------------------------------------------------------------

@test "^Z gives the prompt back within 3s; fg within 1s resumes the child, which finishes; exit 0" {
  make_ticker 1.2
  cat >"$T/steps" <<EOF
expect 20 $PROMPT_RE
sendline rlock run -t 3s k -- $T/ticker
expect 20 TICK-1
send \\x1a
expect 3 Stopped.*$PROMPT_RE
sleep 0.5
sendline fg
expect 20 cs-end ticker.*$PROMPT_RE
sendline echo "rc=\$?"
expect 5 rc=[0-9]+
sendline exit
wait_exit 10
EOF
  interactive_bash "$T/steps" || pty_failure "the pty steps failed"
  grep -q 'rc=0' "$PTY_OUT" || pty_failure "rlock did not exit 0 after fg"
  assert cs_ended ticker
  assert lock_free k
  assert_no_overlap
}

# The lease (2s) ends at most 2s after the last renewal, which was before ^Z; the shell is told
# fg 2.6s after it showed that the job stopped, which is after ^Z: the lease has run out by then.
@test "^Z for longer than the TTL, then fg: the child does not run on past the lease; exit 76" {
  make_ticker 6
  cat >"$T/steps" <<EOF
expect 20 $PROMPT_RE
sendline rlock run -t 2s --kill-after 0.8s k -- $T/ticker
expect 20 TICK-2
send \\x1a
expect 3 Stopped.*$PROMPT_RE
sleep 2.6
sendline fg
expect 20 $PROMPT_RE
sendline echo "rc=\$?"
expect 5 rc=[0-9]+
sendline exit
wait_exit 10
EOF
  interactive_bash "$T/steps" || pty_failure "the pty steps failed"
  grep -q 'rc=76' "$PTY_OUT" || pty_failure "rlock did not exit 76 after its lease ran out while suspended"
  local zed last pid
  zed=$(pty_mark_ns 'send \x1a')
  pid=$(cs_pid ticker)
  last=$(cs_last_tick_ns "$pid")
  # The last renewal was before ^Z, so the lease ended at most 2s after it.
  ((last <= zed + 2000000000)) ||
    fail "the child ticked $(((last - zed) / 1000000))ms after ^Z, past the 2s lease: $(cat "$WLOG")"
  ! cs_ended ticker || fail "the child ran to its end: $(cat "$WLOG")"
  wait_until -t 2 pid_gone "$pid" || fail "the child $pid is still there"
  wait_until -t 5 lock_free k || fail "the lock is still held"
}

# --- job-control signals while waiting ------------------------------------------------------------

@test "SIGCONT, SIGTSTP and SIGTTIN sent to a waiting rlock: it keeps waiting and then gets the lock" {
  acquire_token k -t 60s
  bg waiter rlock run -v k -w 30 -- "$CS" "$WLOG" waiter 0
  wait_until -t 10 grep -qi wait "$T/waiter.err" || fail "the waiter does not say it waits: $(bg_err waiter)"
  local sig
  for sig in CONT TSTP TTIN CONT; do
    kill -"$sig" "$waiter_pid"
    # A negative: give a wrong reaction time to show.
    sleep 0.3
    pid_alive "$waiter_pid" || fail "the waiter exited after SIG$sig: status $(cat "$T/waiter.rc" 2>/dev/null); $(bg_err waiter)"
  done
  RLOCK_TOKEN=$TOKEN rlock release k || fail "could not release the holder's lock"
  bg_wait waiter 15
  [[ $BG_STATUS == 0 ]] || fail "the waiter exited $BG_STATUS: $(bg_err waiter)"
  assert cs_started waiter
}
