#!/usr/bin/env bats
# What users bring from flock(1) and from running jobs: flock's spellings, --timeout as the wait,
# --syslog for "why didn't my cron job run?", and messages that say what is wrong, each checked
# against what a user typed in a trial.

load helpers/common

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# syslog_listen NAME [full]: a Unix datagram socket at $T/NAME.sock standing in for /dev/log,
# each datagram appended as a line to $T/NAME.log. With "full", it never reads and its queue is
# filled first: a log daemon that has stopped keeping up.
syslog_listen() {
  local name=$1 mode=${2:-read}
  bg "$name" python3 -c '
import os, socket, sys, time
path, log, mode = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
if mode == "full":
    w = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    w.setblocking(False)
    try:
        while True:
            w.sendto(b"x" * 512, path)
    except BlockingIOError:
        pass
    open(log + ".full", "w").close()
    time.sleep(3600)
with open(log, "a") as f:
    while True:
        f.write(s.recv(8192).decode(errors="replace") + "\n")
        f.flush()
' "$T/$name.sock" "$T/$name.log" "$mode"
  wait_until test -S "$T/$name.sock" || fail "the syslog stand-in did not start"
  [[ $mode != full ]] || wait_until test -e "$T/$name.log.full" || fail "the syslog stand-in's queue is not full"
  export RLOCK_SYSLOG_SOCKET=$T/$name.sock
}

# --- flock's spellings ----------------------------------------------------------------------------

@test "--nb and --nonblock are -n: exit 75 at once when the lock is held" {
  acquire_token k
  local o
  for o in --nb --nonblock; do
    run --separate-stderr rlock run k "$o" -- touch "$T/ran"
    assert_equal "$status" 75
    [[ $stderr == *"not waiting (-n)"* ]] || fail "$o: '$stderr'"
  done
  assert_file_not_exists "$T/ran"
}

@test "-x and --exclusive take an exclusive hold; -x with -s is a usage error" {
  run --separate-stderr rlock run k -x -- sh -c 'rlock status k --json >"$0"' "$T/status"
  assert_success
  run jq -r .mode "$T/status"
  assert_output exclusive
  run --separate-stderr rlock run k --exclusive -- true
  assert_success
  run --separate-stderr rlock run k -x -s -- touch "$T/ran"
  assert_usage_error
  [[ $stderr == *"exclude each other"* ]] || fail "'$stderr'"
  assert_file_not_exists "$T/ran"
}

@test "flock's -o, -F and --no-fork are refused with the reason, and take no lock" {
  local o
  for o in -o -F --no-fork; do
    run --separate-stderr rlock run k "$o" -- touch "$T/ran"
    assert_usage_error
    [[ $stderr == *lease* ]] || fail "$o: the reason is missing: '$stderr'"
    run --separate-stderr rlock acquire k "$o"
    assert_usage_error
  done
  assert_file_not_exists "$T/ran"
  assert lock_free k
}

@test "--timeout D is flock's: wait at most D for the lock, then 75 saying so" {
  acquire_token k
  local start took
  # acquire says the same as run (it waits beside it).
  bg acq rlock acquire k -w 500ms
  start=$(now_ms)
  run --separate-stderr rlock run k --timeout 600ms -- touch "$T/ran"
  took=$(elapsed_ms "$start")
  assert_equal "$status" 75
  [[ $stderr == *"gave up after 600ms (--wait)"* ]] || fail "'$stderr'"
  ((took >= 550 && took < 10000)) || fail "--timeout 600ms gave up after ${took}ms"
  assert_file_not_exists "$T/ran"
  bg_wait acq 10
  assert_equal "$BG_STATUS" 75
  [[ $(bg_err acq) == *"gave up after 500ms (--wait)"* ]] || fail "acquire -w: '$(bg_err acq)'"
}

@test "--io-timeout, RLOCK_IO_TIMEOUT and io-timeout in the config file set the command timeout; 'timeout' there is refused" {
  run --separate-stderr rlock run k --io-timeout 3s -- true
  assert_success
  run --separate-stderr rlock run k --io-timeout 3x -- true
  assert_usage_error
  [[ $stderr == *--io-timeout* ]] || fail "'$stderr'"
  RLOCK_IO_TIMEOUT=nope run --separate-stderr rlock run k -- true
  assert_usage_error
  [[ $stderr == *RLOCK_IO_TIMEOUT* ]] || fail "'$stderr'"
  printf 'io-timeout = "3s"\n' >"$T/ok.toml"
  run --separate-stderr rlock run k --config "$T/ok.toml" -- true
  assert_success
  printf 'timeout = "3s"\n' >"$T/bad.toml"
  run --separate-stderr rlock run k --config "$T/bad.toml" -- touch "$T/ran"
  assert_error_line 78
  [[ $stderr == *"use wait"*"or io-timeout"* ]] || fail "no hint: '$stderr'"
  assert_file_not_exists "$T/ran"
}

# --- --syslog ---------------------------------------------------------------------------------------

@test "--syslog logs acquired, busy, released and lost, with key, holder and durations" {
  syslog_listen log
  bg holder rlock run --syslog k -- sh -c 'touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done' "$T/started" "$T/stop"
  wait_until test -e "$T/started"
  run --separate-stderr rlock run --syslog k -n -- true
  assert_equal "$status" 75
  touch "$T/stop"
  bg_wait holder
  assert_equal "$BG_STATUS" 0
  # Lost: the key is deleted while the command runs.
  run --separate-stderr rlock run --syslog lost -- sh -c 'redis-cli -p "$0" del "rlock:{lost}" >/dev/null' "$REDIS_PORT"
  assert_equal "$status" 76
  wait_until grep -q 'lost lost' "$T/log.log"
  run cat "$T/log.log"
  assert_line --regexp '^<14>[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} rlock\[[0-9]+\]: acquired k \(fence [0-9]+, ttl 30s\) after waiting [0-9.]+m?s: sh -c '
  assert_line --regexp '^<13>.* rlock\[[0-9]+\]: busy: k is held by .* pid [0-9]+ .*; not waiting \(-n\); skipped: true$'
  assert_line --regexp '^<14>.* rlock\[[0-9]+\]: released k after holding it [0-9.]+m?s; the command exited with 0$'
  assert_line --regexp '^<11>.* rlock\[[0-9]+\]: lost lost: when the command ended after [0-9.]+m?s, its token no longer owned it$'
}

@test "RLOCK_SYSLOG and 'syslog = true' in the config file turn it on; without them nothing is sent" {
  syslog_listen log
  run --separate-stderr rlock run k -- true
  assert_success
  RLOCK_SYSLOG=1 run --separate-stderr rlock run env-key -- true
  assert_success
  printf 'syslog = true\n' >"$T/c.toml"
  run --separate-stderr rlock run --config "$T/c.toml" conf-key -- true
  assert_success
  tok=$(rlock acquire --syslog acq) || fail "acquire"
  RLOCK_TOKEN=$tok run --separate-stderr rlock release --syslog acq
  assert_success
  wait_until grep -q 'released acq$' "$T/log.log"
  run cat "$T/log.log"
  assert_line --partial 'acquired env-key'
  assert_line --partial 'acquired conf-key'
  assert_line --partial 'acquired acq (fence'
  refute_line --partial 'acquired k '
}

@test "--syslog never holds rlock up: a full log queue loses lines, an absent one is said once" {
  syslog_listen stuck full
  local start took
  start=$(now_ms)
  run --separate-stderr timeout 20 rlock run --syslog k -- touch "$T/ran"
  took=$(elapsed_ms "$start")
  assert_success
  assert_file_exists "$T/ran"
  ((took < 5000)) || fail "a full syslog queue held rlock up for ${took}ms"
  RLOCK_SYSLOG_SOCKET=$T/absent.sock run --separate-stderr rlock run --syslog k -- touch "$T/ran2"
  assert_success
  assert_file_exists "$T/ran2"
  assert_equal "$(grep -c 'cannot reach syslog' <<<"$stderr")" 1
  # A warning: not with -q (from cron, it would mail every host on every run).
  RLOCK_SYSLOG_SOCKET=$T/absent.sock run --separate-stderr rlock -q run --syslog k -- true
  assert_success
  assert_equal "$stderr" ""
}

# --- messages -------------------------------------------------------------------------------------

@test "a bad URL says what is wrong and shows the accepted forms; REDIS:// is redis://" {
  run --separate-stderr rlock status -u garbage
  assert_error_line 78
  [[ $stderr == *"'garbage': no scheme; use redis://"*"rediss://"*"unix://"*"redis+sentinel://"* ]] || fail "'$stderr'"
  [[ $stderr != *"the URL"* ]] || fail "'$stderr'"
  run --separate-stderr rlock status -u "redis://127.0.0.1:$REDIS_PORT?x=1"
  assert_error_line 78
  [[ $stderr == *"query parameter 'x=1' is not supported"* ]] || fail "'$stderr'"
  run --separate-stderr rlock status -u "redis://u:hunter2@127.0.0.1:nope"
  assert_error_line 78
  [[ $stderr == *"redis://u:***@127.0.0.1:nope"* && $stderr != *hunter2* ]] || fail "'$stderr'"
  run --separate-stderr rlock run k -u "REDIS://127.0.0.1:$REDIS_PORT" -- true
  assert_success
}

@test "spaces around a URL are trimmed; a space inside is read as a quorum, and the error says so" {
  run --separate-stderr rlock run k -u " redis://127.0.0.1:$REDIS_PORT " -- true
  assert_success
  RLOCK_URL="  redis://127.0.0.1:$REDIS_PORT  " run --separate-stderr rlock run k -- true
  assert_success
  run --separate-stderr rlock status -u "redis://127.0.0.1:$REDIS_PORT /2"
  assert_error_line 78
  [[ $stderr == *"'/2'"*"read as 2 URLs of a Redlock quorum; this is URL 2"* ]] || fail "'$stderr'"
}

@test "CLI11's wording never leaks: unknown options, extra words, missing values name the command's help" {
  run --separate-stderr rlock status k -- --bogus
  assert_usage_error
  [[ $stderr == *"unexpected '--bogus'"*"rlock status --help"* ]] || fail "'$stderr'"
  run --separate-stderr rlock release hi echo
  assert_usage_error
  [[ $stderr == *"takes one KEY, 'hi'; unexpected 'echo'"*"rlock release --help"* ]] || fail "'$stderr'"
  run --separate-stderr rlock run k -c
  assert_usage_error
  [[ $stderr == *"-c needs a value: a shell command (see rlock run --help)"* ]] || fail "'$stderr'"
  run --separate-stderr rlock acquire k --bogus
  assert_usage_error
  [[ $stderr == *"rlock acquire has no option --bogus (see rlock acquire --help)"* ]] || fail "'$stderr'"
  run --separate-stderr rlock release
  assert_usage_error
  [[ $stderr == *"missing KEY (see rlock release --help)"* ]] || fail "'$stderr'"
  run --separate-stderr rlock run k -n -w 1s -- true
  assert_usage_error
  [[ $stderr != *"not expected"* && $stderr != *"required"* ]] || fail "'$stderr'"
}

@test "rlock --help run shows run's help, as rlock run --help does" {
  run --separate-stderr rlock run --help
  assert_success
  local expected=$output
  [[ $expected == *"Usage: rlock run [OPTIONS] KEY [--] COMMAND [ARG...]"$'\n'"   or: rlock run [OPTIONS] KEY -c 'SHELL COMMAND'"* ]] ||
    fail "the usage line does not show the command: '$expected'"
  [[ $expected != *"once per cron tick"* ]] || fail "--min-hold's help says what --once-per does: '$expected'"
  run --separate-stderr rlock --help run
  assert_success
  assert_equal "$output" "$expected"
}

@test "a script whose #! interpreter is missing is a bad interpreter (126), not 'not found'" {
  printf '#!/nonexistent/interpreter -e\necho hi\n' >"$T/script"
  chmod +x "$T/script"
  run --separate-stderr rlock run k -- "$T/script"
  assert_error_line 126
  [[ $stderr == *"bad interpreter: /nonexistent/interpreter"* ]] || fail "'$stderr'"
  assert lock_free k
  run -127 --separate-stderr rlock run k -- "$T/absent"
  assert_error_line 127
  [[ $stderr == *"command not found"* ]] || fail "'$stderr'"
}

@test "foreign data at :fence is named the same by run and status, which agree it is not free" {
  rcli set 'rlock:{k}:fence' hello >/dev/null
  run --separate-stderr rlock run k -- touch "$T/ran"
  assert_error_line 65
  [[ $stderr == *"rlock:{k}:fence holds data that is not rlock's"* ]] || fail "run: '$stderr'"
  local run_error=$stderr
  run --separate-stderr rlock status k
  assert_error_line 65
  assert_equal "$stderr" "$run_error"
  rcli del 'rlock:{k}:fence' >/dev/null
  rcli hset 'rlock:{k}:fence' a b >/dev/null
  run --separate-stderr rlock run k -- touch "$T/ran"
  assert_error_line 65
  assert_equal "$stderr" "$run_error"
  run --separate-stderr rlock status k
  assert_equal "$stderr" "$run_error"
  assert_file_not_exists "$T/ran"
}

@test "duration errors carry one hint; too long gives the limit" {
  run --separate-stderr rlock acquire k -t 3x
  assert_usage_error
  assert_equal "$(grep -o '(' <<<"$stderr" | wc -l)" 1
  [[ $stderr == *"unknown unit 'x'"*"ms, s, m, h or d"* ]] || fail "'$stderr'"
  run --separate-stderr rlock acquire k -t 400d
  assert_usage_error
  [[ $stderr == *"too long: the limit is 365d"* ]] || fail "'$stderr'"
}

@test "token options: an empty --token-file, a bad or empty --token-env, a symbolic link, each said plainly" {
  run --separate-stderr rlock acquire k --token-file ''
  assert_usage_error
  [[ $stderr == *"--token-file is empty"* ]] || fail "'$stderr'"
  assert lock_free k
  acquire_token k
  run --separate-stderr rlock release k --token-file ''
  assert_usage_error
  run --separate-stderr rlock release k --token-env 'A=B'
  assert_usage_error
  [[ $stderr == *"'A=B' is not a variable name"* ]] || fail "'$stderr'"
  RLOCK_TOKEN_ENV= RLOCK_TOKEN=$TOKEN run --separate-stderr rlock release k
  assert_usage_error
  [[ $stderr == *"RLOCK_TOKEN_ENV: empty"* ]] || fail "'$stderr'"
  assert lock_held k
  ln -s "$T/elsewhere" "$T/link"
  run --separate-stderr rlock acquire other --token-file "$T/link"
  assert_error_line 71
  [[ $stderr == *"is a symbolic link; rlock does not write a token through one" ]] || fail "'$stderr'"
  assert lock_free other
}

@test "status with no lock held says so in one line, and exits 1" {
  run --separate-stderr rlock status
  assert_failure 1
  assert_output "no lock is held (prefix rlock:)"
  run --separate-stderr rlock status --json
  assert_failure 1
  assert_output "[]"
}

@test "-c passes its string safely: -c '-x' is a command, -c='echo eq' is -c 'echo eq'" {
  run -127 --separate-stderr rlock run k -c '-x'
  assert_equal "$status" 127
  [[ $stderr == *"-x: not found"* ]] || fail "'$stderr'"
  run --separate-stderr rlock run k -c='echo eq'
  assert_success
  assert_output eq
  run --separate-stderr rlock run k -t=5s -c 'echo t'
  assert_success
  assert_output t
}
