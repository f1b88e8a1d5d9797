# Shared helpers of the integration suites (tests/*.bats).
#
# Every test gets its own redis-server on a random loopback port (or a unix socket) in its own
# directory, so suites can run in parallel (ctest -j2). teardown kills the server and every
# process the test started, even when the test failed.
#
# Environment:
#   RLOCK_BIN         the binary under test (default: ../build/rlock next to this directory)
#   RLOCK_SOURCE_DIR  the source tree (set by CTest; cli.bats checks that the version names one of its commits)
#
# In the tests, `rlock` is the binary under test (a symlink on PATH), so child commands and
# `sh -c` scripts can call it too.

bats_require_minimum_version 1.5.0

# bats-support, bats-assert and bats-file: their files sourced directly, as their load.bash files
# would (each runs dirname once a file, 17 processes a test).
_rlock_bats_libs=${RLOCK_BATS_LIB_DIR:-/usr/lib/bats}
for _rlock_lib in "$_rlock_bats_libs"/bats-{support,assert,file}/src/*.bash; do
  # shellcheck disable=SC1090
  source "$_rlock_lib"
done
unset _rlock_lib

# Bats runs a DEBUG trap before every command, helpers' included (set -T): it copies the call
# stack each time, about 0.2 ms a command, which made bash half of the suites' CPU. Only the
# stack of a command in the test file itself is recorded here, as bats records it; a command
# of a helper or a library returns at once. A failure inside a helper is then reported at the
# test file's line that called it. (The handler of bats 1.8, Debian 12's, less its Windows path
# handling; another version keeps its own.)
if [[ ${BATS_VERSION-} == 1.8.* ]] && declare -F bats_capture_stack_trace >/dev/null &&
  declare -F bats_emit_trace >/dev/null; then
  bats_debug_trap() {
    [[ $1 == "${BATS_TEST_SOURCE-}" ]] || return 0
    [[ ${BATS_INTERRUPTED-NOTSET} == NOTSET && ${BATS_TIMED_OUT-NOTSET} == NOTSET ]] || return 0
    BATS_DEBUG_LASTLAST_STACK_TRACE=(${BATS_DEBUG_LAST_STACK_TRACE[@]+"${BATS_DEBUG_LAST_STACK_TRACE[@]}"})
    BATS_DEBUG_LAST_LINENO=(${BASH_LINENO[@]+"${BASH_LINENO[@]}"})
    BATS_DEBUG_LAST_SOURCE=(${BASH_SOURCE[@]+"${BASH_SOURCE[@]}"})
    bats_capture_stack_trace
    bats_emit_trace
  }
fi

: "${RLOCK_BIN:=$BATS_TEST_DIRNAME/../build/rlock}"
# No test may hang a run: bats stops a test after this many seconds.
: "${BATS_TEST_TIMEOUT:=60}"

# ---------------------------------------------------------------------------------------------
# Time and polling

# Milliseconds since the epoch (wall clock, microsecond resolution).
now_ms() {
  local t=${EPOCHREALTIME//[.,]/}
  echo $((10#$t / 1000))
}

# Milliseconds elapsed since $1 (a now_ms value).
elapsed_ms() {
  echo $(($(now_ms) - $1))
}

# nap SECONDS: sleeps without starting a process (the polls below run thousands of times a
# pass): a read that times out on the test's own FIFO, which never gets data; sleep(1) when the
# test has none (a helper used before common_setup).
nap() {
  if [[ -n ${_rlock_nap_fifo:-} && -p $_rlock_nap_fifo ]]; then
    read -rt "$1" <>"$_rlock_nap_fifo" || true
  else
    sleep "$1"
  fi
}

# wait_until [-t SECONDS] [!] CMD [ARG...]
# Runs CMD until it succeeds (or, with !, fails); returns 1 when SECONDS (default 5, fractions
# allowed) pass first. Tests use it to wait for observable state, never fixed sleeps. It polls
# every 10ms for the first 200ms (most states come within them: a process started or gone, a
# file written), then every 50ms.
wait_until() {
  local timeout=5 negate=0
  if [[ $1 == -t ]]; then
    timeout=$2
    shift 2
  fi
  if [[ $1 == '!' ]]; then
    negate=1
    shift
  fi
  local whole=${timeout%%.*} frac=0
  [[ $timeout == *.* ]] && frac=${timeout#*.}
  frac=${frac}000
  # (The clock read in place, as now_ms does, without a process for each poll.)
  local now=${EPOCHREALTIME//[.,]/}
  local deadline=$((10#$now / 1000 + 10#${whole:-0} * 1000 + 10#${frac:0:3})) polls=0
  while :; do
    if ((negate)); then
      "$@" || return 0
    else
      "$@" && return 0
    fi
    now=${EPOCHREALTIME//[.,]/}
    ((10#$now / 1000 >= deadline)) && return 1
    if ((++polls <= 20)); then
      nap 0.01
    else
      nap 0.05
    fi
  done
}

# scaled N: N times RLOCK_TEST_SCALE (default 1), at least 1. Stress counts use it: the
# sanitizer pass (several times slower per process) runs fewer rounds of the same checks.
scaled() {
  awk -v n="$1" -v s="${RLOCK_TEST_SCALE:-1}" 'BEGIN { v = int(n * s); print (v < 1 ? 1 : v) }'
}

# ---------------------------------------------------------------------------------------------
# Processes

# Whether $1 is a pid (an empty one would read /proc//stat, which is /proc/stat).
is_pid() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

# Whether process $1 is alive (exists and is not a zombie); a non-pid is no live process.
pid_alive() {
  local stat
  is_pid "$1" || return 1
  [[ -r /proc/$1/stat ]] || return 1
  read -r stat 2>/dev/null </proc/"$1"/stat || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

pid_gone() {
  is_pid "$1" || { echo "pid_gone: not a pid: '$1'" >&2; return 1; }
  ! pid_alive "$1"
}

# Whether every process $@ is gone.
pids_gone() {
  local p
  for p; do
    pid_alive "$p" && return 1
  done
  return 0
}

# Whether any live process is in process group $1.
group_alive() {
  local p
  for p in $(pgrep -g "$1" 2>/dev/null); do
    pid_alive "$p" && return 0
  done
  return 1
}

# The first child process of $1 (empty when it has none).
child_of() {
  pgrep -P "$1" 2>/dev/null | head -n 1
}

# bg NAME CMD [ARG...]
# Starts CMD in the background with stdin from /dev/null and its output in
# $BATS_TEST_TMPDIR/NAME.out and NAME.err. SIGINT and SIGQUIT are reset to their default
# action first (a non-interactive shell starts background jobs with them ignored), so signal
# tests see what a user's terminal would send. A small supervisor (perl) is CMD's parent: it
# records CMD's exit status (128+N for death by signal N) for bg_wait. Sets NAME_pid to the pid
# of CMD itself.
bg() {
  local name=$1
  shift
  local base="$BATS_TEST_TMPDIR/$name"
  rm -f "$base.pid" "$base.rc"
  perl -e '
    use POSIX ();
    $SIG{INT} = "DEFAULT";
    $SIG{QUIT} = "DEFAULT";
    my ($base) = shift @ARGV;
    sub put { my ($file, $text) = @_; open(my $f, ">", "$file.tmp") or die; print $f "$text\n"; close $f; rename("$file.tmp", $file) or die; }
    my $pid = fork();
    defined $pid or exit 71;
    if ($pid == 0) { exec { $ARGV[0] } @ARGV; POSIX::_exit(127); }
    put("$base.pid", $pid);
    waitpid($pid, 0);
    my $st = $?;
    put("$base.rc", ($st & 127) ? 128 + ($st & 127) : ($st >> 8));
  ' "$base" "$@" </dev/null >"$base.out" 2>"$base.err" 3>&- &
  local supervisor=$!
  disown "$supervisor" 2>/dev/null || true
  echo "$supervisor" >>"$BATS_TEST_TMPDIR/.bg_pids"
  wait_until -t 5 test -s "$base.pid" || fail "could not start $name: $*"
  local pid
  pid=$(cat "$base.pid")
  echo "$pid" >>"$BATS_TEST_TMPDIR/.bg_pids"
  printf -v "${name}_pid" '%s' "$pid"
}

# bg_wait NAME [SECONDS]
# Waits (default 10s) for the background command NAME to end and sets BG_STATUS to its exit
# status; fails the test (showing its stderr) when it is still running.
bg_wait() {
  local name=$1 timeout=${2:-10}
  local base="$BATS_TEST_TMPDIR/$name"
  if ! wait_until -t "$timeout" test -s "$base.rc"; then
    fail "$name still running after ${timeout}s; stderr: $(cat "$base.err" 2>/dev/null)"
  fi
  BG_STATUS=$(cat "$base.rc")
}

# Whether the background command NAME has ended.
bg_done() {
  [[ -s $BATS_TEST_TMPDIR/$1.rc ]]
}

# Output of a background command.
bg_out() { cat "$BATS_TEST_TMPDIR/$1.out"; }
bg_err() { cat "$BATS_TEST_TMPDIR/$1.err"; }

# Kills every process started during this test: the ones started by bg and the servers (their
# pids are recorded), and every other one carrying RLOCKTEST_MARK in its environment (a process
# that escaped into another group or lost its parent still has it).
kill_test_processes() {
  [[ -n ${RLOCKTEST_MARK:-} ]] || return 0
  local recorded=() round pids p
  [[ -f $BATS_TEST_TMPDIR/.bg_pids ]] && mapfile -t recorded <"$BATS_TEST_TMPDIR/.bg_pids"
  for round in 1 2 3 4 5; do
    pids=()
    for p in "${recorded[@]}"; do
      pid_alive "$p" && pids+=("$p")
    done
    for p in $(grep -lzxF "RLOCKTEST_MARK=$RLOCKTEST_MARK" /proc/[0-9]*/environ 2>/dev/null); do
      p=${p#/proc/}
      p=${p%/environ}
      [[ $p == "$$" || $p == "$BASHPID" ]] && continue
      pid_alive "$p" && pids+=("$p")
    done
    ((${#pids[@]})) || break
    kill -STOP "${pids[@]}" 2>/dev/null || true
    kill -KILL "${pids[@]}" 2>/dev/null || true
    wait_until -t 2 pids_gone "${pids[@]}" || true
  done
  return 0
}

# ---------------------------------------------------------------------------------------------
# Redis servers

# The redis-cli of the test's server.
rcli() {
  local auth=()
  [[ -n ${REDIS_PASS:-} ]] && auth=(env "REDISCLI_AUTH=$REDIS_PASS")
  if [[ -n ${REDIS_SOCKET:-} ]]; then
    "${auth[@]}" redis-cli -s "$REDIS_SOCKET" "$@"
  else
    "${auth[@]}" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
  fi
}

# The Redis name of lock KEY under the default prefix.
lock_key() { echo "rlock:{$1}"; }

key_exists() { [[ $(rcli exists "$1" 2>/dev/null) == 1 ]]; }
key_missing() { [[ $(rcli exists "$1" 2>/dev/null) == 0 ]]; }
lock_held() { key_exists "$(lock_key "$1")"; }
lock_free() { key_missing "$(lock_key "$1")"; }

# Whether something accepts TCP connections on 127.0.0.1:$1.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A port in 20000-60000 on which nothing listens now (for "Redis is down" tests).
free_port() {
  local p
  while :; do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
    port_in_use "$p" || break
  done
  echo "$p"
}

# _redis_launch PORT [REDIS ARGS...]: starts redis-server in REDIS_DIR and waits (5s at most)
# until it answers; returns 1 when it could not bind (or did not come up).
_redis_launch() {
  local port=$1
  shift
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$REDIS_DIR" \
    --daemonize no --logfile "$REDIS_DIR/redis.log" "$@" </dev/null >/dev/null 2>&1 3>&- &
  REDIS_PID=$!
  disown "$REDIS_PID" 2>/dev/null || true
  echo "$REDIS_PID" >>"$BATS_TEST_TMPDIR/.bg_pids"
  local deadline=$(($(now_ms) + 5000)) info
  while (($(now_ms) < deadline)); do
    if pid_gone "$REDIS_PID"; then
      return 1
    fi
    # The answer must come from this server, not from one another suite started on the port.
    info=$(rcli info server 2>/dev/null)
    if [[ $info == *"process_id:$REDIS_PID"$'\r'* ]]; then
      return 0
    fi
    nap 0.02
  done
  kill -KILL "$REDIS_PID" 2>/dev/null || true
  wait_until -t 2 pid_gone "$REDIS_PID" || true
  return 1
}

# redis_start [REDIS ARGS...]
# Starts a private redis-server on a random free port of 127.0.0.1 and exports REDIS_PORT,
# REDIS_PID and RLOCK_URL=redis://127.0.0.1:PORT.
redis_start() {
  REDIS_DIR=$(mktemp -d /tmp/rlock-test.XXXXXX)
  export REDIS_DIR
  unset REDIS_SOCKET
  local attempt port
  for attempt in {1..20}; do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
    port_in_use "$port" && continue
    export REDIS_PORT=$port
    if _redis_launch "$port" "$@"; then
      export REDIS_PID
      export RLOCK_URL="redis://127.0.0.1:$port"
      return 0
    fi
  done
  fail "could not start redis-server on a free port (log: $(tail -n 5 "$REDIS_DIR/redis.log" 2>/dev/null))"
}

# redis_start_auth PASSWORD: a server with requirepass; rcli authenticates, rlock must be told.
redis_start_auth() {
  export REDIS_PASS=$1
  redis_start --requirepass "$1"
}

# redis_start_unix [REDIS ARGS...]: a server listening only on a unix socket; exports
# REDIS_SOCKET and RLOCK_URL=unix://SOCKET.
redis_start_unix() {
  REDIS_DIR=$(mktemp -d /tmp/rlock-test.XXXXXX)
  export REDIS_DIR
  export REDIS_SOCKET=$REDIS_DIR/redis.sock
  redis-server --port 0 --unixsocket "$REDIS_SOCKET" --unixsocketperm 700 --save '' --appendonly no \
    --dir "$REDIS_DIR" --daemonize no --logfile "$REDIS_DIR/redis.log" "$@" </dev/null >/dev/null 2>&1 3>&- &
  export REDIS_PID=$!
  disown "$REDIS_PID" 2>/dev/null || true
  echo "$REDIS_PID" >>"$BATS_TEST_TMPDIR/.bg_pids"
  wait_until -t 5 redis_answers || fail "redis-server on $REDIS_SOCKET did not come up"
  export RLOCK_URL="unix://$REDIS_SOCKET"
}

redis_answers() { [[ $(rcli ping 2>/dev/null) == PONG ]]; }

# redis_kill: kills the test's server at once (SIGKILL) and waits until it is gone.
redis_kill() {
  [[ -n ${REDIS_PID:-} ]] || return 0
  kill -KILL "$REDIS_PID" 2>/dev/null || true
  wait_until -t 5 pid_gone "$REDIS_PID" || true
  REDIS_PID=
}

# redis_restart: kills the server and starts a fresh, empty one on the same port.
redis_restart() {
  redis_kill
  rm -rf "$REDIS_DIR"
  REDIS_DIR=$(mktemp -d /tmp/rlock-test.XXXXXX)
  local attempt
  for attempt in {1..50}; do
    if _redis_launch "$REDIS_PORT"; then
      export REDIS_PID
      return 0
    fi
    nap 0.1
  done
  fail "could not restart redis-server on port $REDIS_PORT"
}

redis_stop() {
  redis_kill
  [[ -n ${REDIS_DIR:-} && $REDIS_DIR == /tmp/rlock-test.* ]] && rm -rf "$REDIS_DIR"
  REDIS_DIR=
}

# ---------------------------------------------------------------------------------------------
# Test set-up

# common_setup: a clean environment for one test. Call first in each suite's setup().
common_setup() {
  [[ -x $RLOCK_BIN ]] || fail "RLOCK_BIN=$RLOCK_BIN is not an executable; build rlock first (cmake --build build)"
  local v
  # No setting may leak in from the caller's environment or config files. (The exported
  # variables among the names, without a process: a test's set-up runs hundreds of times a pass.)
  for v in ${!RLOCK_*} REDIS_URL REDISCLI_AUTH; do
    [[ ${!v@a} == *x* ]] || continue
    case $v in
      RLOCK_BIN | RLOCK_SOURCE_DIR | RLOCK_BUILD_DIR | RLOCK_BATS_LIB_DIR | RLOCK_TEST_SCALE) export -n "$v" ;;
      RLOCK_FUNCTIONS) ;; # the pass's choice of how scripts run (a suite run twice, tests/CMakeLists.txt)
      RLOCK_* | REDIS_URL | REDISCLI_AUTH) unset "$v" ;;
    esac
  done
  unset REDIS_PASS REDIS_SOCKET REDIS_PORT REDIS_PID REDIS_DIR
  # Nor a CI's variables, which make rlock print its progress while it waits and name its job.
  unset CI GITHUB_ACTIONS GITLAB_CI BUILDKITE JENKINS_URL GITHUB_SERVER_URL GITHUB_REPOSITORY GITHUB_RUN_ID \
    CI_JOB_URL BUILDKITE_BUILD_URL CIRCLE_BUILD_URL BUILD_URL
  export XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/xdg
  # `rlock` on PATH is the binary under test, for the tests and their child scripts.
  mkdir -p "$XDG_CONFIG_HOME" "$BATS_TEST_TMPDIR/bin"
  ln -sf "$(readlink -f "$RLOCK_BIN")" "$BATS_TEST_TMPDIR/bin/rlock"
  export PATH="$BATS_TEST_TMPDIR/bin:$PATH"
  # Every process this test starts carries the mark, so teardown finds them all.
  export RLOCKTEST_MARK="rlocktest.$$.${BATS_TEST_NUMBER:-0}.$RANDOM$RANDOM"
  # Tests do not read the terminal; the same stdin as under CI.
  exec </dev/null
  T=$BATS_TEST_TMPDIR
  _rlock_nap_fifo=$T/.nap
  mkfifo "$_rlock_nap_fifo"
}

# common_teardown: kills the test's processes and server. Call from each suite's teardown().
common_teardown() {
  kill_test_processes
  redis_stop
}

# assert_usage_error: the last `run --separate-stderr` was a usage error: exit 64, nothing on
# stdout, and one line on stderr starting with "rlock: error: ".
assert_usage_error() {
  assert_error_line 64
}

# assert_error_line CODE: exit CODE, nothing on stdout, one "rlock: error: " line on stderr.
assert_error_line() {
  local code=$1
  if [[ $status -ne $code ]]; then
    fail "expected exit $code, got $status; stdout: '$output'; stderr: '$stderr'"
  fi
  assert_equal "$output" ""
  if [[ ${#stderr_lines[@]} -ne 1 ]]; then
    fail "expected one line on stderr, got ${#stderr_lines[@]}: '$stderr'"
  fi
  [[ ${stderr_lines[0]} == "rlock: error: "?* ]] || fail "stderr does not start with 'rlock: error: ': '$stderr'"
}

# A regular expression for a token: at least 128 bits as hex.
TOKEN_RE='^[0-9a-fA-F]{32,}$'

# assert_error_exit CODE: exit CODE, nothing on stdout, and exactly one "rlock: error: " line on
# stderr (warnings may come with it, e.g. about a password given in a URL on the command line).
assert_error_exit() {
  local code=$1 line n=0
  if [[ $status -ne $code ]]; then
    fail "expected exit $code, got $status; stdout: '$output'; stderr: '$stderr'"
  fi
  assert_equal "$output" ""
  for line in "${stderr_lines[@]}"; do
    [[ $line == "rlock: error: "?* ]] && n=$((n + 1))
  done
  ((n == 1)) || fail "expected one 'rlock: error: ' line on stderr, got $n: '$stderr'"
}

# Skips the test when jq is missing (the CI installs it).
require_jq() {
  command -v jq >/dev/null || skip "jq is not installed (needed to check JSON output)"
}

# acquire_token KEY [ACQUIRE OPTIONS...]: `rlock acquire KEY`, which must succeed with a token
# that the lock then holds; sets TOKEN.
acquire_token() {
  local out
  out=$(rlock acquire "$@") || fail "rlock acquire $* exited $?"
  [[ $out =~ $TOKEN_RE ]] || fail "rlock acquire $* printed '$out', not a token"
  [[ $(rcli get "$(lock_key "$1")") == "$out" ]] || fail "after rlock acquire $*, the lock does not hold its token"
  TOKEN=$out
}
