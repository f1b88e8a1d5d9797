#!/usr/bin/env bats
# Progress while waiting, once the wait has lasted about 2s, neither with -q nor with -v: on a
# terminal (stderr a tty, TERM not dumb) one line, rewritten in place with "\r" and ESC[K, names
# the holder (host, pid, command), how long it has held, the queue position and the time spent
# waiting, and is erased when the wait ends. In a CI (CI, GITHUB_ACTIONS, ... set) or on a dumb
# terminal, the same text comes as lines: every 30s, and at once when the holder or the position
# changes. Elsewhere nothing is printed while waiting, unless -v, which logs each change of
# queue position on a timestamped line. A run whose command exited while its leftovers keep the
# lock says so once, where the progress would show, naming them.
#
# Terminals are driven by tests/faults/helpers/pty_run.py.

load helpers/common
load faults/helpers/faults
load helpers/queue

BATS_TEST_TIMEOUT=90

setup() {
  queue_setup
  redis_start
}

teardown() {
  common_teardown
}

# transcript_check PID...: checks the pty transcript $PTY_OUT of a wait that printed a progress
# line naming each PID (in that order over time): one line, never a newline; each later version
# comes after "\r" and ESC[K; the line is erased at the end, and "rlock: got k after Ns" follows.
transcript_check() {
  PIDS="$*" perl -0777 -ne '
    my @pids = split(" ", $ENV{PIDS});
    my $out = $_;
    my @why;
    # The line that says the lock was got comes last, on a line of its own, after the erase.
    push @why, "no last line \"rlock: got k after Ns\"" unless $out =~ s/rlock: got k after [0-9]+s\r?\n\z//;
    push @why, "a newline: the line scrolls instead of being rewritten" if $out =~ /\n/;
    # Versions of the line: the text between rewrites.
    my @versions = grep { /[[:print:]]/ } split(/\r|\e\[K|\e\[2K/, $out);
    push @why, "fewer than 2 versions of the line" if @versions < 2;
    my $at = 0;
    for my $p (@pids) {
      my $i = -1;
      for my $j ($at .. $#versions) { if ($versions[$j] =~ /(^|[^0-9])$p([^0-9]|$)/) { $i = $j; last } }
      if ($i < 0) { push @why, "no version of the line names pid $p (after the earlier ones)"; last }
      $at = $i;
    }
    # A later version is introduced by "\r" and ESC[K (in either order).
    my $first = index($out, $pids[0]);
    my $rest = $first >= 0 ? substr($out, $first) : "";
    push @why, "no later version after \\r and ESC[K" unless $rest =~ /(\r\e\[2?K|\e\[2?K\r)[^\r\e]*[[:print:]]/;
    # Erased at the end: the last ESC[K comes after the last version, and only escape
    # sequences (if anything) follow it.
    my ($erase, $tail) = (-1, "");
    while ($out =~ /\e\[2?K/g) { $erase = pos($out) }
    if ($erase < 0) {
      push @why, "no ESC[K at all";
    } else {
      $tail = substr($out, $erase);
      (my $printable = $tail) =~ s/\e\[[0-9;?]*[A-Za-z]//g;
      push @why, "the line is not erased at the end (after the last ESC[K: " .
        join("", map { sprintf("\\x%02x", ord) } split(//, $tail)) . ")" if $printable =~ /[[:print:]]/;
    }
    if (@why) { print join("\n", @why), "\n"; exit 1 }
  ' "$PTY_OUT" || fail "the progress line is not as it should be (transcript: $(LC_ALL=C cat -v "$PTY_OUT"))"
}

# pty_bg STEPS CMD...: runs CMD under a pty (helpers/pty_run.py with the steps in file STEPS) in
# the background as "pty", so that the test can release holders once the terminal shows what it
# waits for. Sets PTY_OUT (the transcript) and PTY_MARKS (the steps done, see pty_run.py).
pty_bg() {
  pty_bg_as pty "$@"
}

# pty_bg_as NAME STEPS CMD...: pty_bg, in the background as NAME (several terminals at once).
pty_bg_as() {
  local name=$1 steps=$2
  shift 2
  PTY_OUT=$T/$name.tty
  PTY_MARKS=$T/$name.marks
  rm -f "$PTY_OUT" "$PTY_MARKS" "$T/$name.status"
  : >"$PTY_MARKS"
  bg "$name" "$FAULTS_PYTHON" "$FAULTS_HELPERS/pty_run.py" --steps "$steps" --out "$PTY_OUT" --marks "$PTY_MARKS" \
    --status "$T/$name.status" --timeout 80 -- "$@"
}

# step_done TEXT: whether the pty driver has done a step starting with TEXT.
step_done() {
  MARK=$1 awk 'index(substr($0, index($0, " ") + 1), ENVIRON["MARK"]) == 1 { found = 1 } END { exit !found }' "$PTY_MARKS"
}

# wait_step TEXT [SECONDS]: waits (default 30s) until the pty driver has done the step TEXT.
wait_step() {
  wait_until -t "${2:-30}" _step_done_or_over "$1" || true
  step_done "$1" && return 0
  fail "the terminal did not show what step '$1' expects: $(cat "$T/pty.err" 2>/dev/null)
transcript: $(LC_ALL=C cat -v "$PTY_OUT" 2>/dev/null)"
}
_step_done_or_over() { step_done "$1" || bg_done pty; }

# pty_end [NAME]: waits for the driver (default "pty") to finish; the command under the pty must
# have exited 0.
pty_end() {
  local name=${1:-pty}
  bg_wait "$name" 60
  [[ $BG_STATUS == 0 ]] || fail "pty_run ($name) exited $BG_STATUS: $(bg_err "$name")
transcript: $(LC_ALL=C cat -v "$T/$name.tty" 2>/dev/null)"
  assert_equal "$(cat "$T/$name.status" 2>/dev/null)" 0
}

# Two terminals at once, each waiting first in the queue of its own key: TERM=xterm (k) and
# TERM=dumb (k2). Beside them, through the same wait, three waiters that print nothing, each
# first in the queue of its own key (as alone): under a pty with -q in a CI, under a pty with -q,
# and with no terminal at all.
@test "on a terminal, a waiter shows one line naming the holder and its queue position, rewritten in place and erased at the end; with TERM=dumb, as lines, never rewritten; with -q or no terminal, nothing" {
  local key
  for key in kci ktty kplain; do
    bg "holder_$key" rlock run "$key" -- "$CS" "$WLOG" "holder_$key" "until:$T/go"
    wait_cs "holder_$key" "holder_$key"
  done
  echo 'wait_exit 60' >"$T/steps.quiet"
  pty_bg_as ci "$T/steps.quiet" env TERM=xterm CI=true rlock run kci -q -w 60 -- true
  pty_bg_as tty "$T/steps.quiet" env TERM=xterm rlock run ktty -q -w 60 -- true
  TERM=xterm enqueue plain kplain 1 rlock run kplain -w 30 -- true
  wait_until -t 15 queue_is kci 1 || fail "the waiter in a CI did not queue: $(status_json kci)"
  wait_until -t 15 queue_is ktty 1 || fail "the waiter on a terminal did not queue: $(status_json ktty)"
  local quiet_since
  quiet_since=$(now_ms)
  # Each holder has a note: the lines of a dumb terminal show it, the line rewritten in place does
  # not (it could grow longer than the terminal is wide).
  bg holder rlock run k --note xterm-note -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  bg holder2 rlock run k2 --note dumb-note -- "$CS" "$WLOG" holder2 "until:$T/go"
  wait_cs holder2 holder2
  printf '%s\n' "expect 30 $holder2_pid" 'wait_exit 60' >"$T/steps.dumb"
  pty_bg_as dumb "$T/steps.dumb" env TERM=dumb rlock run k2 -w 60 -- true
  printf '%s\n' \
    "expect 30 $holder_pid" \
    "expect 30 (\\r\\x1b\\[2?K|\\x1b\\[2?K\\r)[^\\r]*$holder_pid" \
    'wait_exit 60' >"$T/steps"
  pty_bg "$T/steps" env TERM=xterm rlock run k -w 60 -- true
  wait_step "expect 30 ("
  PTY_MARKS=$T/dumb.marks wait_step "expect 30 $holder2_pid"
  # The quiet ones: long enough for a progress line to show (about 2s into the wait).
  local left=$((quiet_since + 3500 - $(now_ms)))
  ((left <= 0)) || sleep "$(awk -v m="$left" 'BEGIN { printf "%.3f", m / 1000 }')"
  touch "$T/go"
  pty_end
  pty_end dumb
  local name
  for name in ci tty; do
    pty_end "$name"
    [[ ! -s $T/$name.tty ]] || fail "$name: printed $(LC_ALL=C cat -v "$T/$name.tty")"
  done
  bg_wait plain 20
  assert_equal "$BG_STATUS" 0
  [[ ! -s $T/plain.err ]] || fail "printed on stderr: $(LC_ALL=C cat -v "$T/plain.err")"
  [[ ! -s $T/plain.out ]] || fail "printed on stdout: $(LC_ALL=C cat -v "$T/plain.out")"
  transcript_check "$holder_pid"
  local text waited
  text=$(LC_ALL=C tr -d '\033' <"$PTY_OUT")
  # Shown once the wait has lasted about 2s, not before.
  waited=$(grep -aoE 'waited [0-9]+s' <<<"$text" | head -n 1)
  [[ $waited =~ ([0-9]+) ]] && ((BASH_REMATCH[1] >= 2)) || fail "the first line came before 2s: '$waited'"
  [[ $text == *"position 1 of 1"* ]] || fail "the line does not say 'position 1 of 1': $(LC_ALL=C cat -v "$PTY_OUT")"
  [[ $text == *"$(uname -n)"* ]] || fail "the line does not name the holder's host: $(LC_ALL=C cat -v "$PTY_OUT")"
  [[ $text == *cs* ]] || fail "the line does not name the holder's command: $(LC_ALL=C cat -v "$PTY_OUT")"
  [[ $text != *xterm-note* ]] || fail "the line rewritten in place shows the note: $(LC_ALL=C cat -v "$PTY_OUT")"
  grep -qiE 'position|queue|in line|#[0-9]' <<<"$text" ||
    fail "the line does not show the queue position: $(LC_ALL=C cat -v "$PTY_OUT")"
  # TERM=dumb: lines of their own, no escape sequence.
  local dumb=$T/dumb.tty
  ! LC_ALL=C grep -q $'\e' "$dumb" || fail "an escape sequence on a dumb terminal: $(LC_ALL=C cat -v "$dumb")"
  LC_ALL=C grep -q "^rlock: waiting for k2: held by .*pid $holder2_pid.*(.*cs.*): dumb-note; position 1 of 1; waited [0-9]*s"$'\r'"\$" "$dumb" ||
    fail "no line of its own names the holder and its note: $(LC_ALL=C cat -v "$dumb")"
  LC_ALL=C grep -q "^rlock: got k2 after [0-9]*s"$'\r'"\$" "$dumb" ||
    fail "no line says the lock was got: $(LC_ALL=C cat -v "$dumb")"
  wait_all 10 holder holder2 holder_kci holder_ktty holder_kplain
}

# Whether a position line of w2's log after the first says 1.
_later_position_says_1() {
  grep -i position "$T/w2.err" | tail -n +2 | grep -qE '(^|[^0-9:.])1([^0-9:.]|$)'
}

@test "-v without a terminal logs each change of queue position on a timestamped line" {
  bg holder rlock run k -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  enqueue w1 k 1 rlock run k -w 30 -- "$CS" "$WLOG" w1 "until:$T/go.w1"
  enqueue w2 k 2 rlock run k -v -w 30 -- true
  wait_until -t 5 grep -qi position "$T/w2.err" || fail "-v says nothing of a position: $(bg_err w2)"
  touch "$T/go"
  # w2 moves up to position 1 once w1 holds the lock; it says so within a heartbeat or two.
  wait_cs w1 w1
  wait_until -t 5 _later_position_says_1 || fail "w2 did not log its move to position 1: $(bg_err w2)"
  touch "$T/go.w1"
  wait_all 30 holder w1 w2
  assert_clean_text "$T/w2.err"
  local plines first
  plines=$(grep -i position "$T/w2.err")
  # Every such line is timestamped (HH:MM:SS), the first one says 2, a later one 1.
  if grep -v -E '[0-9]{2}:[0-9]{2}:[0-9]{2}' <<<"$plines"; then
    fail "a position line without a timestamp: $(cat "$T/w2.err")"
  fi
  first=$(head -n 1 <<<"$plines")
  [[ $first =~ (^|[^0-9:.])2([^0-9:.]|$) ]] || fail "the first position line does not say 2: $first"
  tail -n +2 <<<"$plines" | grep -qE '(^|[^0-9:.])1([^0-9:.]|$)' ||
    fail "no later position line says 1: $(cat "$T/w2.err")"
}

@test "-v on a terminal logs lines instead of the rewritten progress line" {
  bg holder rlock run k -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  printf '%s\n' 'expect 30 (?i)position' 'wait_exit 60' >"$T/steps"
  pty_bg "$T/steps" env TERM=xterm rlock run k -v -w 60 -- true
  wait_step "expect 30 (?i)position"
  touch "$T/go"
  pty_end
  ! LC_ALL=C grep -q $'\e\\[' "$PTY_OUT" || fail "-v rewrote a line: $(LC_ALL=C cat -v "$PTY_OUT")"
  bg_wait holder 10
}

# --- in a CI -----------------------------------------------------------------------------------

# Two waiters behind the holder and the next holder (w1), whose lines follow the queue: one on a
# terminal (position 2), one in a CI (position 3).
@test "in a CI: a line after about 2s, then one at once when the holder or the position changes; every byte escaped; on a terminal, the line follows the queue too" {
  # The holder's default TTL: its renewals come every 10s and change nothing the waiters see, so
  # their steps stay light; the waiter takes a full step when its first line is due.
  bg holder rlock run k -- "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  # The next holder's command line holds an escape sequence, as any bytes in Redis may.
  enqueue w1 k 1 rlock run k -w 60 -- sh -c 'while [ ! -e "$0" ]; do sleep 0.05; done' "$T/go.w1" $'\e[2Jevil'
  printf '%s\n' \
    "expect 30 $holder_pid" \
    "expect 30 $w1_pid" \
    'wait_exit 60' >"$T/steps"
  pty_bg "$T/steps" env TERM=xterm rlock run k -w 60 -- true
  wait_until -t 15 queue_is k 2 || fail "the waiter on a terminal did not queue: $(status_json k)"
  local t0 seen
  t0=$(now_ms)
  CI=true enqueue waiter k 3 rlock run k -w 60 -- true
  wait_until -t 15 grep -q "pid $holder_pid" "$T/waiter.err" || fail "no line names the holder: $(bg_err waiter)"
  seen=$(elapsed_ms "$t0")
  ((seen >= 1800)) || fail "the first line came ${seen}ms into the wait, before 2s"
  # (A step is taken when the line is due: a waiter far behind does not show it a far heartbeat late.)
  ((seen < 4500)) || fail "the first line came ${seen}ms into the wait, not about 2s (the holder renews at 10s)"
  grep -q "^rlock: waiting for k: held by $(uname -n) pid $holder_pid for [0-9.a-z]* (.*cs.*); position 3 of 3; waited [0-9]*s\$" \
    "$T/waiter.err" || fail "the line is not as it should be: $(LC_ALL=C cat -v "$T/waiter.err")"
  # Nothing changes: no other line (the next one is 30s away), though the waiter looks again
  # each second (a full step when a line could be due).
  sleep 1.5
  assert_equal "$(wc -l <"$T/waiter.err")" 1
  wait_step "expect 30 $holder_pid"
  # The holder changes (w1 takes the lock) and the position with it: a line at once.
  t0=$(now_ms)
  touch "$T/go"
  wait_until -t 10 grep -q "pid $w1_pid" "$T/waiter.err" || fail "no line names the next holder: $(bg_err waiter)"
  seen=$(elapsed_ms "$t0")
  ((seen < 5000)) || fail "the line naming the next holder came ${seen}ms after the change"
  grep "pid $w1_pid" "$T/waiter.err" | grep -qF 'position 2 of 2' || fail "no position 2: $(LC_ALL=C cat -v "$T/waiter.err")"
  grep "pid $w1_pid" "$T/waiter.err" | grep -qF '\x1b[2Jevil' || fail "the command is not escaped: $(LC_ALL=C cat -v "$T/waiter.err")"
  wait_step "expect 30 $w1_pid"
  touch "$T/go.w1"
  bg_wait waiter 20
  assert_equal "$BG_STATUS" 0
  ! LC_ALL=C grep -q $'[\e\r]' "$T/waiter.err" || fail "a control character on stderr: $(LC_ALL=C cat -v "$T/waiter.err")"
  # One line per change, not one per heartbeat; then one when the wait ends, with how long it was.
  (($(wc -l <"$T/waiter.err") <= 5)) || fail "too many lines: $(LC_ALL=C cat -v "$T/waiter.err")"
  [[ -z $(grep -v '^rlock: waiting for k: ' "$T/waiter.err" | sed '$d') ]] || fail "other lines: $(cat "$T/waiter.err")"
  [[ $(tail -n 1 "$T/waiter.err") =~ ^rlock:\ got\ k\ after\ [0-9]+s$ ]] || fail "last line: $(cat "$T/waiter.err")"
  # The terminal's line named the holder, then the next holder.
  pty_end
  transcript_check "$holder_pid" "$w1_pid"
  bg_wait holder 10
  bg_wait w1 10
}

@test "in a CI (GITHUB_ACTIONS), acquire shows the progress too, with the holder's CI job and note; so does -n's refusal; -q silences it" {
  # A 3s TTL: the holder's renewals (each second) make the waiters' steps full ones, from which
  # a line is printed; with the default 30s, the first full step after 2s may come 10s later.
  # The holder runs in a CI job of its own, its note with an escape sequence in it.
  bg holder env GITHUB_RUN_ID=7 GITHUB_REPOSITORY=o/r rlock run k -t 3s --note $'release \e[2J4.2' -- \
    "$CS" "$WLOG" holder "until:$T/go"
  wait_cs holder holder
  local context='in CI job https://github.com/o/r/actions/runs/7: release \x1b[2J4.2'
  run --separate-stderr rlock run k -n -- true
  assert_failure 75
  [[ $stderr == *"pid $holder_pid for "*") $context; "* ]] || fail "-n does not name the job and note: $stderr"
  GITHUB_ACTIONS=true enqueue loud k 1 rlock acquire k -w 60 --json
  GITHUB_ACTIONS=true enqueue quiet k 2 rlock acquire k -q -w 60 --json
  wait_until -t 15 grep -q "pid $holder_pid" "$T/loud.err" || fail "acquire shows no progress: $(bg_err loud)"
  grep -qF ") $context; position" "$T/loud.err" || fail "the line does not name the job and note: $(LC_ALL=C cat -v "$T/loud.err")"
  sleep 1
  touch "$T/go"
  bg_wait loud 20
  assert_equal "$BG_STATUS" 0
  [[ $(tail -n 1 "$T/loud.err") =~ ^rlock:\ got\ k\ after\ [0-9]+s$ ]] || fail "last line: $(cat "$T/loud.err")"
  RLOCK_TOKEN=$(jq -r .token "$T/loud.out") rlock release k
  bg_wait quiet 20
  assert_equal "$BG_STATUS" 0
  [[ ! -s $T/quiet.err ]] || fail "-q printed: $(LC_ALL=C cat -v "$T/quiet.err")"
}

# write_leaver: $T/leave.sh, a command that leaves 7 processes running for 3s (the first with an
# escape sequence in its name) and exits 3: the line about them is due 2s after the exit.
write_leaver() {
  cat >"$T/leave.sh" <<'LEAVE'
#!/bin/bash
(exec -a $'\e[2Jevil' sleep 3) &
for i in 1 2 3 4 5 6; do sleep 3 & done
exit 3
LEAVE
  chmod +x "$T/leave.sh"
}

@test "leftovers that keep the lock: in a CI said once, naming them (bounded) and pointing at --leftovers kill; not without a terminal or a CI, nor with -q" {
  write_leaver
  # All three at once, on three keys: each waits for its leftovers (3s), past the 2s the line is
  # due at.
  bg plain rlock run lk -- "$T/leave.sh"
  CI=true bg quiet rlock run lk2 -q -- "$T/leave.sh"
  CI=true run --separate-stderr rlock run lk3 -- "$T/leave.sh"
  assert_equal "$status" 3
  assert_equal "${#stderr_lines[@]}" 1
  [[ $stderr == "rlock: lk3: the command exited (3), but 7 processes it left running keep the lock: pid "* ]] ||
    fail "not the leftovers line: $stderr"
  [[ $stderr == *" and 2 more; waiting for them (--leftovers kill ends them)" ]] || fail "not bounded: $stderr"
  [[ $stderr == *'(\x1b[2Jevil 3)'* ]] || fail "the leftover's name is not escaped: $(cat -v <<<"$stderr")"
  [[ $(grep -o "pid [0-9]* (sleep 3)" <<<"$stderr" | wc -l) == 4 ]] || fail "not 5 named: $stderr"
  local name
  for name in plain quiet; do
    bg_wait "$name" 20
    assert_equal "$BG_STATUS" 3
    [[ ! -s $T/$name.err ]] || fail "$name printed: $(LC_ALL=C cat -v "$T/$name.err")"
  done
}
