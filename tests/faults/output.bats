#!/usr/bin/env bats
# rlock's own output under faults: a stderr that stalls (a full pipe nobody reads) must not
# stop rlock from ending its child before the lease runs out; broken pipes and full disks are
# reported with the right exit codes and never change a child's status; holder data that
# other processes wrote into Redis (user, host, command) cannot forge rows or send terminal
# escape sequences through `status` and `list`.

load ../helpers/common
load helpers/faults

setup() {
  faults_setup
  redis_start
}

teardown() {
  common_teardown
}

# second_holder KEY LOG LABEL: one `rlock run KEY -n` of a critical section witnessed in LOG;
# succeeds when it got the lock.
second_holder() {
  rlock run "$1" -n -- "$CS" "$2" "$3" 0 2>>"$T/second.err"
}

# pause_redis_past_ttl SECONDS: stops Redis for SECONDS (longer than the lease), then resumes it.
pause_redis_past_ttl() {
  redis_pause
  sleep "$1"
  redis_resume
}

# --- a stalled stderr ----------------------------------------------------------------------------

# Two holders whose stderr stalls, cut off from Redis by one pause (2.3s: their 2s leases, renewed
# before it at the latest, have ended by its end):
#   full:   stderr a full pipe from the start (lock k): the child still runs;
#   stalls: stderr that fills up while the child runs (lock j).
# Each child is stopped before its lease ends: a second holder sees no overlap.
@test "stderr full from the start, or that stalls while the child runs: the child is stopped before the lease ends" {
  fifo_blocked full
  bg_redirect full 2 "$full_FIFO" rlock run -v k -t 2s --io-timeout 300ms -- "$CS" "$T/k.log" full 30
  WLOG=$T/k.log wait_until -t 10 cs_started full ||
    fail "the child did not start while rlock's stderr was a full pipe (rlock blocked writing to it?)"
  fifo_open stalls
  bg_redirect stalls 2 "$stalls_FIFO" rlock run -v j -t 2s --io-timeout 300ms -- "$CS" "$T/j.log" stalls 30
  WLOG=$T/j.log wait_cs stalls stalls
  local n
  n=$(fifo_fill stalls)
  ((n > 0)) || fail "the FIFO was already full"
  # The leases are 2s; Redis answers nothing for 2.3s, so they cannot be renewed.
  pause_redis_past_ttl 2.3
  wait_until -t 10 second_holder k "$T/k.log" second || fail "a second holder of k never got the lock: $(cat "$T/second.err")"
  wait_until -t 10 second_holder j "$T/j.log" second || fail "a second holder of j never got the lock: $(cat "$T/second.err")"
  assert_no_overlap "$T/k.log"
  assert_no_overlap "$T/j.log"
  # rlock may stay blocked on its stderr until someone reads it.
  fifo_drain full
  fifo_drain stalls
  bg_wait full 15
  assert_equal "$BG_STATUS" 76
  bg_wait stalls 15
  assert_equal "$BG_STATUS" 76
}

@test "-v with stderr a pipe whose reader has gone: run still exits 0" {
  run with_broken_pipe 2 rlock run -v k -- true
  assert_success
  assert lock_free k
  # As a shell pipeline: the reader (true) is gone before rlock writes its timeline.
  run bash -c 'rlock run -v k -- true 2>&1 | true; echo "${PIPESTATUS[0]}"'
  assert_output 0
}

@test "-v with stderr a pipe whose reader has gone: the child's status passes through" {
  run with_broken_pipe 2 rlock run -v k -- sh -c 'exit 3'
  assert_failure 3
  assert lock_free k
}

@test "status and list to a full disk (/dev/full) exit 71" {
  acquire_token k
  run --separate-stderr bash -c 'rlock status k >/dev/full'
  [[ $status == 71 ]] || fail "status > /dev/full exited $status (expected 71); stderr: $stderr"
  [[ $stderr == *"rlock: error: "* ]] || fail "no error message: '$stderr'"
  run --separate-stderr bash -c 'rlock list >/dev/full'
  [[ $status == 71 ]] || fail "list > /dev/full exited $status (expected 71); stderr: $stderr"
  run --separate-stderr bash -c 'rlock status k --json >/dev/full'
  [[ $status == 71 ]] || fail "status --json > /dev/full exited $status (expected 71); stderr: $stderr"
  # The lock is untouched.
  assert_equal "$(rcli get "$(lock_key k)")" "$TOKEN"
}

@test "acquire to a full disk: exit 71 and the lock is not left held" {
  run --separate-stderr bash -c 'rlock acquire k -t 60s >/dev/full'
  [[ $status == 71 ]] || fail "acquire > /dev/full exited $status (expected 71); stderr: $stderr"
  assert lock_free k
}

# --- holder data written by others ---------------------------------------------------------------

# hostile_holder: holds k from a process whose USER, host name and command line carry escape
# sequences, carriage returns, newlines, a forged table row and bytes that are not UTF-8.
hostile_holder() {
  local fake_row=$'\r\nk    held   forged-host  1  root  1s  30.0s  99  forged-command\r\n'
  local host=$'h\e[31mred\e[0m\r\nforged'
  local argv_junk=$'\e]0;title\a\e[2J'"$fake_row"$'\xff\xfe'
  USER=$'u\e[1m'"$fake_row" LOGNAME=$'u\e[1m'"$fake_row" bg hostile unshare -u "$FAULTS_PYTHON" -c '
import os, socket, sys
socket.sethostname(os.fsencode(sys.argv[1]))
os.execvp(sys.argv[2], sys.argv[2:])
' "$host" rlock run k -- sh -c 'touch "$0"; while [ ! -e "$0.go" ]; do sleep 0.05; done' "$T/hostile.started" "$argv_junk"
  wait_until test -e "$T/hostile.started" || fail "the hostile holder did not start: $(bg_err hostile)"
}

@test "status and list of a hostile holder: no control bytes, no forged rows" {
  command -v unshare >/dev/null && [[ $(id -u) == 0 ]] || skip "needs root and unshare(1) to set a host name"
  hostile_holder
  rlock status k >"$T/status.out" 2>"$T/status.err" || fail "status exited $?: $(cat "$T/status.err")"
  rlock list >"$T/list.out" 2>"$T/list.err" || fail "list exited $?: $(cat "$T/list.err")"
  assert_clean_text "$T/status.out" "$T/list.out"
  # A header and one row each.
  assert_equal "$(wc -l <"$T/status.out")" 2
  assert_equal "$(wc -l <"$T/list.out")" 2
}

@test "status --json of a hostile holder parses, is valid UTF-8 and has no raw control bytes" {
  require_jq
  command -v unshare >/dev/null && [[ $(id -u) == 0 ]] || skip "needs root and unshare(1) to set a host name"
  hostile_holder
  rlock status k --json >"$T/status.json" 2>"$T/status.err" || fail "status --json exited $?: $(cat "$T/status.err")"
  jq . "$T/status.json" >/dev/null || fail "not JSON: $(LC_ALL=C cat -v "$T/status.json")"
  assert_utf8 "$T/status.json"
  assert_clean_text "$T/status.json"
  assert_equal "$(jq -r .key "$T/status.json")" k
  assert_equal "$(jq -r .held "$T/status.json")" true
  rlock list --json >"$T/list.json" 2>"$T/list.err" || fail "list --json exited $?: $(cat "$T/list.err")"
  jq . "$T/list.json" >/dev/null || fail "not JSON: $(LC_ALL=C cat -v "$T/list.json")"
  assert_utf8 "$T/list.json"
}

@test "a command line with bytes that are not UTF-8: status --json is still valid UTF-8" {
  require_jq
  bg holder rlock run k -- sh -c 'touch "$0"; while [ ! -e "$0.go" ]; do sleep 0.05; done' "$T/started" $'\xff\xfe\xc3('
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  rlock status k --json >"$T/status.json" 2>"$T/status.err" || fail "status --json exited $?: $(cat "$T/status.err")"
  jq . "$T/status.json" >/dev/null || fail "not JSON: $(LC_ALL=C cat -v "$T/status.json")"
  assert_utf8 "$T/status.json"
  rlock status k >"$T/status.out" || fail "status exited $?"
  assert_utf8 "$T/status.out"
}
