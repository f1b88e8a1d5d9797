# Helpers of the fault suites (tests/faults/*.bats): an independent witness of mutual
# exclusion, a pausable TCP proxy, a pty driver, a stalled stderr, a fake Redis that never ends
# its answer, and small server faults. Load it after the shared helpers:
#
#   load ../helpers/common
#   load helpers/faults
#
# Everything a helper starts is recorded in the test's .bg_pids (or carries RLOCKTEST_MARK), so
# common_teardown kills it even when the test failed.

FAULTS_HELPERS=$BATS_TEST_DIRNAME/helpers

# The shared helpers default RLOCK_BIN to ../build/rlock next to the suite; the fault suites
# are one level deeper.
if [[ ! -x $RLOCK_BIN && -x $BATS_TEST_DIRNAME/../../build/rlock ]]; then
  RLOCK_BIN=$BATS_TEST_DIRNAME/../../build/rlock
fi

# The pty driver runs with Debian's python3 when there is one (it needs nothing beyond the
# standard library), else with the first python3 on PATH.
if [[ -x /usr/bin/python3 ]]; then
  FAULTS_PYTHON=/usr/bin/python3
else
  FAULTS_PYTHON=python3
fi

# faults_setup: common_setup plus the fault helpers' environment. Call first in setup().
#   CS    the witness (tests/faults/helpers/cs), for the tests and their child scripts
#   WLOG  the test's witness log
faults_setup() {
  common_setup
  export CS=$FAULTS_HELPERS/cs
  export WLOG=$T/witness.log
  : >"$WLOG"
}

# ---------------------------------------------------------------------------------------------
# The witness (see helpers/cs for the log format)

# assert_no_overlap [LOG]: fails listing every overlap the witness saw in LOG (default $WLOG):
# a critical section that started while an earlier one (or a process it left running) was
# still alive, or two critical sections whose intervals intersect.
assert_no_overlap() {
  local log=${1:-$WLOG} out
  if ! out=$("$CS" check "$log"); then
    fail "mutual exclusion was broken:
$out
witness log:
$(cat "$log")"
  fi
}

# stale_grant_is_refused URL OLD_PID: the end of a stale-master test. A holder (bg holder, waiting
# on $T/holder-go) and a waiter (bg waiter, its critical section "waiter") took and queued for k
# on a master, stopped (OLD_PID) and failed over since; the holder is let go (it follows the
# failover or loses its lock, 76), a new holder takes k through URL, which reaches the new master,
# then the old master is continued, still granting its queue (and the test's function
# old_master_continued, if there is one, is called). No two critical sections overlap, and the
# waiter's command runs, if at all, only after the new holder's.
stale_grant_is_refused() {
  local url=$1 old_pid=$2 t0
  touch "$T/holder-go"
  bg_wait holder 30
  [[ $BG_STATUS == 0 || $BG_STATUS == 76 ]] || fail "the first holder exited $BG_STATUS: $(bg_err holder)"
  # The new holder takes the lock on the new master, and holds it until the stale grant has met
  # it: the waiter refused the grant (or, refusing nothing, ran or ended), or for 6s at most.
  bg new rlock run k -t 2s -w 30s -u "$url" -- "$CS" "$WLOG" new "until:$T/new-go"
  wait_cs new new 20
  kill -CONT "$old_pid"
  t0=$(now_ms)
  # A test's own step at the moment the old master is back, if it has one.
  if declare -F old_master_continued >/dev/null; then old_master_continued; fi
  wait_until -t 6 _stale_grant_met || true
  touch "$T/new-go"
  bg_wait new 30
  [[ $BG_STATUS == 0 ]] || fail "the new holder exited $BG_STATUS: $(bg_err new)"
  bg_wait waiter 60
  echo "# the waiter exited $BG_STATUS, $(elapsed_ms "$t0")ms after the old master was continued" >&3
  grep -i 'not the confirmed master' "$T/waiter.err" | head -n 2 | sed 's/^/# /' >&3 || true
  assert_no_overlap
  if cs_started waiter; then
    [[ $BG_STATUS == 0 || $BG_STATUS == 76 ]] || fail "the waiter exited $BG_STATUS: $(bg_err waiter)"
  else
    [[ $BG_STATUS != 0 ]] || fail "the waiter exited 0 without running its command: $(bg_err waiter)"
  fi
}

# Whether the waiter of stale_grant_is_refused met the old master's grant: it said it refused
# it, or its critical section started, or it ended.
_stale_grant_met() {
  grep -q 'not the confirmed master' "$T/waiter.err" || cs_started waiter || bg_done waiter
}

# cs_started LABEL [LOG]: whether a critical section LABEL has started.
cs_started() {
  awk -v l="$1" '$1 == "start" && $4 == l { found = 1 } END { exit !found }' "${2:-$WLOG}"
}

# wait_cs LABEL BGNAME [SECONDS]: waits (default 10s) until the critical section LABEL has
# started; fails at once, with BGNAME's stderr, when the background command BGNAME ended first.
wait_cs() {
  local label=$1 name=$2 timeout=${3:-10}
  wait_until -t "$timeout" _cs_started_or_done "$label" "$name" || true
  cs_started "$label" && return 0
  if bg_done "$name"; then
    fail "$name exited $(cat "$T/$name.rc") before the critical section $label started: $(bg_err "$name")"
  fi
  fail "the critical section $label did not start within ${timeout}s: $(bg_err "$name")"
}
_cs_started_or_done() { cs_started "$1" || bg_done "$2"; }

# cs_ended LABEL [LOG]: whether a critical section LABEL has recorded its normal end.
cs_ended() {
  local pid
  pid=$(cs_pid "$1" "${2:-$WLOG}")
  [[ -n $pid ]] && awk -v p="$pid" '$1 == "end" && $3 == p { found = 1 } END { exit !found }' "${2:-$WLOG}"
}

# cs_pid LABEL [LOG]: the pid of the (first) critical section LABEL.
cs_pid() {
  awk -v l="$1" '$1 == "start" && $4 == l { print $3; exit }' "${2:-$WLOG}"
}

# cs_count LABEL [LOG]: how many critical sections LABEL started.
cs_count() {
  awk -v l="$1" '$1 == "start" && $4 == l { n++ } END { print n + 0 }' "${2:-$WLOG}"
}

# cs_last_tick_ns PID [LOG]: the time (CLOCK_MONOTONIC ns) of the last tick of section PID.
cs_last_tick_ns() {
  awk -v p="$1" '$1 == "tick" && $3 == p { t = $2 } END { if (t == "") t = 0; print t }' "${2:-$WLOG}"
}

# mono_ns: CLOCK_MONOTONIC in nanoseconds (the witness's and the pty driver's clock).
mono_ns() {
  perl -MTime::HiRes=clock_gettime,CLOCK_MONOTONIC -e 'printf "%.0f\n", clock_gettime(CLOCK_MONOTONIC) * 1e9'
}

# ---------------------------------------------------------------------------------------------
# A pausable TCP proxy

# proxy_start NAME TARGET_PORT: a TCP proxy (socat, one process per connection) on a free port
# of 127.0.0.1 forwarding to 127.0.0.1:TARGET_PORT. Exports NAME_PORT. The proxy leads its own
# process group, so proxy_pause stops the connections already open too.
proxy_start() {
  local name=$1 target=$2 port attempt
  command -v socat >/dev/null || skip "socat is not installed (scripts/setup installs it)"
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    port=$(free_port)
    bg "proxy_$name" setsid socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$target"
    local pid
    pid=$(cat "$T/proxy_$name.pid")
    # (A socat that could not bind its port, taken since free_port chose it, exits at once: the
    # next port is tried then, not after the 5s.)
    wait_until -t 5 _proxy_listening_or_gone "$port" "$pid" || true
    if _proxy_listening "$port" "$pid"; then
      echo "$pid" >"$T/proxy_$name.pgid"
      printf -v "${name}_PORT" '%s' "$port"
      export "${name}_PORT"
      return 0
    fi
    kill -KILL "$pid" 2>/dev/null || true
  done
  fail "could not start a proxy to port $target: $(cat "$T/proxy_$name.err" 2>/dev/null)"
}

# Whether socat $2 listens on port $1 (checked with ss, without connecting through it).
_proxy_listening() {
  pid_alive "$2" && ss -ltnH "sport = :$1" 2>/dev/null | grep -q .
}
_proxy_listening_or_gone() { pid_gone "$2" || _proxy_listening "$1" "$2"; }

# proxy_pause NAME / proxy_resume NAME: SIGSTOP / SIGCONT to the proxy's process group: new
# connections are still accepted by the kernel but nothing flows, in either direction.
proxy_pause() {
  kill -STOP -- "-$(cat "$T/proxy_$1.pgid")"
}
proxy_resume() {
  kill -CONT -- "-$(cat "$T/proxy_$1.pgid")"
}

# ---------------------------------------------------------------------------------------------
# The pty driver

# pty_run STEPS_FILE [--timeout S] -- CMD...: runs CMD under a pty with helpers/pty_run.py
# (see there for the steps). Sets PTY_OUT (the transcript file), PTY_MARKS (the step times) and
# PTY_STATUS (CMD's exit status, empty if it did not exit); returns the driver's status.
pty_run() {
  local steps=$1
  shift
  local timeout=50
  if [[ $1 == --timeout ]]; then
    timeout=$2
    shift 2
  fi
  [[ $1 == -- ]] && shift
  PTY_OUT=$T/pty.out
  PTY_MARKS=$T/pty.marks
  rm -f "$PTY_OUT" "$PTY_MARKS" "$T/pty.status" "$T/pty.err"
  local rc=0
  "$FAULTS_PYTHON" "$FAULTS_HELPERS/pty_run.py" --steps "$steps" --out "$PTY_OUT" --marks "$PTY_MARKS" \
    --status "$T/pty.status" --timeout "$timeout" -- "$@" 2>"$T/pty.err" || rc=$?
  PTY_STATUS=$(cat "$T/pty.status" 2>/dev/null || true)
  return "$rc"
}

# pty_mark_ns TEXT: the time (CLOCK_MONOTONIC ns) at which the first step starting with TEXT ended.
pty_mark_ns() {
  MARK=$1 awk 'index(substr($0, index($0, " ") + 1), ENVIRON["MARK"]) == 1 { print $1; exit }' "$PTY_MARKS"
}

# ---------------------------------------------------------------------------------------------
# A stalled stderr

# fifo_open NAME: a FIFO $T/NAME.fifo kept open by a process that does not read it (until
# fifo_drain), so that writers never get EPIPE. Sets NAME_FIFO.
fifo_open() {
  local name=$1 fifo=$T/$1.fifo
  rm -f "$fifo" "$T/$name.ready" "$T/$name.drained"
  mkfifo "$fifo"
  bg "fifo_$name" perl -e '
    my ($fifo, $ready, $drained) = @ARGV;
    my $drain = 0;
    $SIG{USR1} = sub { $drain = 1 };
    open(my $r, "+<", $fifo) or die "open $fifo: $!";
    open(my $t, ">", $ready) or die; close $t;
    select(undef, undef, undef, 0.05) until $drain;
    open(my $out, ">>", $drained) or die;
    my $buf;
    while (1) {
      my $n = sysread($r, $buf, 65536);
      last unless $n;
      syswrite($out, $buf);
    }
  ' "$fifo" "$T/$name.ready" "$T/$name.drained"
  wait_until test -e "$T/$name.ready" || fail "the FIFO holder did not start"
  printf -v "${name}_FIFO" '%s' "$fifo"
}

# fifo_fill NAME: writes to the FIFO until its buffer is full (a write would block); prints how
# many bytes it wrote.
fifo_fill() {
  perl -e '
    use Fcntl;
    sysopen(my $w, $ARGV[0], O_WRONLY | O_NONBLOCK) or die "open: $!";
    my ($n, $chunk) = (0, "x" x 4096);
    while (1) { my $r = syswrite($w, $chunk); if (!defined $r) { last if $!{EAGAIN}; die "write: $!" } $n += $r }
    while (1) { my $r = syswrite($w, "y"); if (!defined $r) { last if $!{EAGAIN}; die "write: $!" } $n += $r }
    print "$n\n";
  ' "$T/$1.fifo"
}

# fifo_blocked NAME: a FIFO whose buffer is already full and that nobody reads (see fifo_open):
# a process whose stderr is $NAME_FIFO blocks on its first write.
fifo_blocked() {
  fifo_open "$1"
  local n
  n=$(fifo_fill "$1") || fail "could not fill the FIFO"
  ((n >= 4096)) || fail "only $n bytes went into the FIFO"
}

# fifo_drain NAME: from now on the holder reads the FIFO (into $T/NAME.drained), so blocked
# writers go on.
fifo_drain() {
  local pid
  pid=$(cat "$T/fifo_$1.pid")
  kill -USR1 "$pid"
}

# ---------------------------------------------------------------------------------------------
# Processes and I/O

# bg_redirect NAME FD FILE CMD...: bg NAME CMD with file descriptor FD (1 or 2) opened on FILE
# for writing instead of NAME.out/NAME.err.
bg_redirect() {
  local name=$1 fd=$2 file=$3
  shift 3
  bg "$name" bash -c 'exec '"$fd"'>"$0" && exec "$@"' "$file" "$@"
}

# with_broken_pipe FD CMD...: runs CMD with file descriptor FD (1 or 2) the write end of a pipe
# whose read end is closed (every write gets SIGPIPE, or EPIPE when SIGPIPE is ignored), and
# SIGPIPE at its default action, as in a shell pipeline whose reader has gone.
with_broken_pipe() {
  local fd=$1
  shift
  perl -e '
    my $fd = shift @ARGV;
    pipe(my $r, my $w) or die "pipe: $!";
    close($r);
    $SIG{PIPE} = "DEFAULT";
    open(($fd == 1 ? *STDOUT : *STDERR), ">&", $w) or die "dup: $!";
    close($w);
    exec { $ARGV[0] } @ARGV or exit 127;
  ' "$fd" "$@"
}

# command_of PID: the command rlock PID runs (rlock -> its guard -> the command); empty when none.
command_of() {
  local guard
  guard=$(child_of "$1")
  [[ -n $guard ]] && child_of "$guard"
}

# sgid_sleep: a copy of sleep(1) that is set-group-ID (group nogroup) in $T; prints its path.
# Executing it clears the parent-death signal (PR_SET_PDEATHSIG) of the process.
sgid_sleep() {
  local f=$T/sgid/sleep
  mkdir -p "$T/sgid"
  chmod 755 "$T/sgid"
  cp "$(command -v sleep)" "$f"
  chgrp nogroup "$f" && chmod 2755 "$f" || return 1
  echo "$f"
}

# ---------------------------------------------------------------------------------------------
# Redis faults

# redis_pause / redis_resume: SIGSTOP / SIGCONT of the test's redis-server (connections stay
# open, nothing is answered).
redis_pause() {
  kill -STOP "$REDIS_PID"
}
redis_resume() {
  kill -CONT "$REDIS_PID"
}

# redis_busy: whether the server accepts connections but does not answer within 300ms.
redis_busy() {
  ! timeout 0.3 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1
}

# redis_debug_sleep SECONDS: makes the server (started with --enable-debug-command yes) sleep
# SECONDS in DEBUG SLEEP, in the background, and waits until it no longer answers.
redis_debug_sleep() {
  bg debug_sleep redis-cli -h 127.0.0.1 -p "$REDIS_PORT" debug sleep "$1"
  wait_until -t 5 redis_busy || fail "the server did not go to sleep: $(cat "$T/debug_sleep.out" "$T/debug_sleep.err")"
}

# fake_redis_stream: a server on a free port that answers every connection with an endless
# bulk string ("$1000000000\r\n" and then bytes, 4 KiB every 50ms, never the end). Exports
# FAKE_PORT.
fake_redis_stream() {
  local port attempt
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    bg fake_redis perl -e '
      use IO::Socket::INET;
      use POSIX ();
      $SIG{CHLD} = "IGNORE";
      my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0], Listen => 16, ReuseAddr => 1)
        or exit 1;
      while (my $c = $s->accept) {
        my $pid = fork();
        if (defined $pid && $pid == 0) {
          $SIG{PIPE} = "IGNORE";
          $c->autoflush(1);
          syswrite($c, "\$1000000000\r\n") or POSIX::_exit(0);
          my $chunk = "x" x 4096;
          while (1) {
            my $in;
            $c->blocking(0); sysread($c, $in, 65536); $c->blocking(1);
            defined(syswrite($c, $chunk)) or POSIX::_exit(0);
            select(undef, undef, undef, 0.05);
          }
        }
        close($c);
      }
    ' "$port"
    if wait_until -t 5 ss_listening "$port"; then
      export FAKE_PORT=$port
      return 0
    fi
  done
  fail "could not start the fake server"
}

# Whether something listens on TCP port $1 of 127.0.0.1 (without connecting to it).
ss_listening() {
  ss -ltnH "sport = :$1" 2>/dev/null | grep -q .
}

# ---------------------------------------------------------------------------------------------
# Assertions

# assert_clean_text FILE...: no ESC byte (0x1b) and no other C0 control byte but newline and tab.
assert_clean_text() {
  local f
  for f in "$@"; do
    if LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$f"; then
      fail "$f has control bytes: $(LC_ALL=C cat -v "$f")"
    fi
  done
}

# assert_utf8 FILE: the file is valid UTF-8.
assert_utf8() {
  "$FAULTS_PYTHON" -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8", "strict")' "$1" 2>/dev/null ||
    fail "$1 is not valid UTF-8: $(LC_ALL=C cat -v "$1")"
}

# count_error_lines TEXT: how many lines of TEXT start with "rlock: error: ".
count_error_lines() {
  grep -c '^rlock: error: ' <<<"$1" || true
}
