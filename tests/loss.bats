#!/usr/bin/env bats
# A lost lock (deleted, expired, Redis restarted or gone): run stops the child's whole process
# group, signal first and SIGKILL after --kill-after, before the lock's validity ends, and
# exits 76 (--lost-exit-code).

load helpers/common
load helpers/servers

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# start_family NAME KEY [RLOCK OPTIONS...]: a run of KEY (bg NAME) whose child (a shell) has a
# grandchild; sets CHILD, GRANDCHILD (also in $T/NAME.family and $T/NAME.family.gc).
start_family() {
  local name=$1 key=$2
  shift 2
  bg "$name" rlock run "$key" "$@" -- sh -c 'sleep 1000 & echo $! > "$0.gc"; echo $$ > "$0"; sleep 1000; wait' "$T/$name.family"
  wait_until test -s "$T/$name.family.gc" || fail "the child did not start: $(bg_err "$name")"
  wait_until test -s "$T/$name.family" || fail "the child did not start: $(bg_err "$name")"
  CHILD=$(cat "$T/$name.family")
  GRANDCHILD=$(cat "$T/$name.family.gc")
  pid_alive "$CHILD" && pid_alive "$GRANDCHILD" || fail "child $CHILD or grandchild $GRANDCHILD is not running"
  # The child leads its own process group, which holds the grandchild too.
  assert_equal "$(ps -o pgid= -p "$CHILD" | tr -d ' ')" "$CHILD"
  assert_equal "$(ps -o pgid= -p "$GRANDCHILD" | tr -d ' ')" "$CHILD"
}

family_gone() {
  pid_gone "$CHILD" && pid_gone "$GRANDCHILD" && ! group_alive "$CHILD"
}

# family_of NAME: the pids of the background run NAME's family (start_family NAME): sets CHILD,
# GRANDCHILD.
family_of() {
  CHILD=$(cat "$T/$1.family")
  GRANDCHILD=$(cat "$T/$1.family.gc")
}

# Five holders lose their locks at once (the same wait: the next renewal, within TTL/3): a
# deleted key stops the whole process group in time, 76; --lost-exit-code chooses the code; a
# lock taken over by another holder is lost too (the new holder keeps it); --signal chooses the
# signal sent on loss; a child that ignores the signal gets SIGKILL after --kill-after.
@test "a deleted or taken-over key stops the whole process group within TTL/3 + kill-after + 1s; --lost-exit-code, --signal; SIGKILL after --kill-after" {
  cat >"$T/int.sh" <<'INT'
trap 'echo INT >> "$0.log"; exit 0' INT
trap 'echo TERM >> "$0.log"; exit 0' TERM
echo $$ > "$0.pid"
while :; do sleep 0.05; done
INT
  cat >"$T/stubborn.sh" <<'STUBBORN'
trap 'date +%s%N >> "$0.term"' TERM
echo $$ > "$0.pid"
while :; do sleep 0.05; done
STUBBORN
  start_family deleted a -t 2s --kill-after 500ms
  start_family code b -t 2s --kill-after 500ms --lost-exit-code 9
  start_family taken c -t 2s --kill-after 500ms
  bg int rlock run d -t 2s --kill-after 500ms --signal INT -- sh "$T/int.sh"
  bg stubborn rlock run e -t 2s --kill-after 500ms -- sh "$T/stubborn.sh"
  wait_until test -s "$T/int.sh.pid" || fail "the child did not start: $(bg_err int)"
  wait_until test -s "$T/stubborn.sh.pid" || fail "the child did not start: $(bg_err stubborn)"
  local t0 took stubborn_child
  stubborn_child=$(cat "$T/stubborn.sh.pid")
  t0=$(now_ms)
  rcli del "$(lock_key a)" >/dev/null
  rcli del "$(lock_key b)" >/dev/null
  rcli set "$(lock_key c)" someone-else-0123456789abcdef0123 >/dev/null
  rcli del "$(lock_key d)" >/dev/null
  rcli del "$(lock_key e)" >/dev/null
  family_of deleted
  # The group of the deleted key, and the stubborn child, each seen gone as soon as it is.
  family_gone_at='' stubborn_gone_at=''
  wait_until -t 6 _deleted_and_stubborn_gone ||
    fail "6s after the locks were lost: the process group is ${family_gone_at:+not }still running, the stubborn child ${stubborn_gone_at:+not }still running"
  took=$((family_gone_at - t0))
  # TTL/3 + kill-after + 1s
  ((took <= 2200)) || fail "the process group was gone ${took}ms after the loss (limit 2200ms)"
  bg_wait deleted 5
  assert_equal "$BG_STATUS" 76
  # --lost-exit-code
  bg_wait code 6
  assert_equal "$BG_STATUS" 9
  family_of code
  wait_until family_gone || fail "the process group survived (--lost-exit-code)"
  # Taken over: lost too, and the new holder keeps it.
  bg_wait taken 6
  assert_equal "$BG_STATUS" 76
  family_of taken
  wait_until family_gone || fail "the process group survived (taken over)"
  assert_equal "$(rcli get "$(lock_key c)")" someone-else-0123456789abcdef0123
  # --signal INT
  bg_wait int 6
  assert_equal "$BG_STATUS" 76
  assert_equal "$(cat "$T/int.sh.log")" INT
  # The child that ignores SIGTERM: SIGKILL about --kill-after later.
  [[ -s $T/stubborn.sh.term ]] || fail "the stubborn child got no SIGTERM"
  local term gap
  term=$(($(head -n 1 "$T/stubborn.sh.term") / 1000000))
  (((took = term - t0) <= 2200)) || fail "the stubborn child got SIGTERM ${took}ms after the loss (limit 2200ms)"
  gap=$((stubborn_gone_at - term))
  ((gap >= 350 && gap <= 2000)) || fail "SIGKILL came ${gap}ms after SIGTERM with --kill-after 500ms"
  bg_wait stubborn 5
  assert_equal "$BG_STATUS" 76
}

# _deleted_and_stubborn_gone: records in family_gone_at and stubborn_gone_at when the family
# (family_of) and the stubborn child were first seen gone; succeeds once both are.
_deleted_and_stubborn_gone() {
  [[ -z $family_gone_at ]] && family_gone && family_gone_at=$(now_ms)
  [[ -z $stubborn_gone_at ]] && pid_gone "$stubborn_child" && stubborn_gone_at=$(now_ms)
  [[ -n $family_gone_at && -n $stubborn_gone_at ]]
}

# Two holders, each on its own server, at once (the same wait: their leases): the test's server
# restarts empty under one; the other's server stops answering (SIGSTOP) for longer than the lease
# and answers again within the TTL the run then gives itself to record the loss.
@test "Redis restarted empty, or unreachable for a while, under a running run: the group is stopped, 76; the loss says why, and is recorded with how long the hold lasted" {
  srv_start paused || fail "could not start a second redis-server"
  local paused_srv=$SRV_PID paused_url="redis://127.0.0.1:$SRV_PORT"
  start_family paused k -u "$paused_url" -t 3s --kill-after 1s
  local t_paused
  t_paused=$(now_ms)
  start_family holder k -t 2s --kill-after 500ms
  nap 0.5
  kill -STOP "$paused_srv"
  # (INFO's uptime is in whole seconds: a hold of over 2s is surely older than the restart.)
  nap 1.7
  local t0 took
  t0=$(now_ms)
  redis_restart
  assert lock_free k
  wait_until -t 6 family_gone || fail "the process group is still running after the restart"
  took=$(elapsed_ms "$t0")
  ((took <= 4000)) || fail "the process group was gone ${took}ms after the restart"
  family_of paused
  wait_until -t 6 family_gone || fail "the process group is still running while Redis is paused"
  # The run tries for one more TTL to record the loss: Redis comes back within it.
  nap 0.3
  kill -CONT "$paused_srv"
  # Restarted: the loss says so.
  bg_wait holder 10
  assert_equal "$BG_STATUS" 76
  [[ $(bg_err holder) == *"127.0.0.1:$REDIS_PORT restarted "*" ago, after the lock was taken (run_id "*", appendonly no): without persistence it lost the lock"* ]] ||
    fail "stderr: $(bg_err holder)"
  run --separate-stderr rlock log k --json
  assert_success
  jq -e -s 'length == 1 and .[0].event == "lost" and .[0].outcome == "restarted" and .[0].exit == 143' \
    <<<"$output" >/dev/null || fail "history: $output"
  # Unreachable: the loss is recorded once the server answers.
  bg_wait paused 10
  assert_equal "$BG_STATUS" 76
  took=$(elapsed_ms "$t_paused")
  [[ $(bg_err paused) == *"lost the lock k: renewals kept failing since 20"*" ago): $paused_url: "* ]] ||
    fail "stderr: $(bg_err paused)"
  run --separate-stderr rlock log k --json -u "$paused_url"
  assert_success
  jq -e -s '[.[].event] == ["acquired", "lost"] and .[1].outcome == "renewals_failed" and .[1].exit == 143' \
    <<<"$output" >/dev/null || fail "history: $output"
  # How long it ran: from the acquisition until the tree was gone, under 3s, not the TTL or the
  # time until Redis answered.
  local held
  held=$(jq -s '.[1].held_ms' <<<"$output")
  ((held >= 1000 && held < 3000 && held < took)) || fail "held ${held}ms (the run took ${took}ms)"
  run rlock check k --max-lost 0 -u "$paused_url"
  assert_equal "$status" 2
  assert_output --partial "1 lost since the last success"
}

# Two holders, each on its own server, at once: one whose server dies for good, one whose server
# pauses for less than the renewal margin.
@test "Redis gone for good: the child is stopped before the lock's TTL runs out, 76; a pause shorter than the renewal margin does not lose the lock" {
  srv_start brief || fail "could not start a second redis-server"
  local brief_srv=$SRV_PID brief_url="redis://127.0.0.1:$SRV_PORT"
  bg brief rlock run k -u "$brief_url" -t 2s --kill-after 500ms --io-timeout 500ms -- sh -c 'touch "$0"; sleep 1.5' "$T/started"
  wait_until test -e "$T/started" || fail "the child did not start: $(bg_err brief)"
  [[ $(srv_cli "${brief_url##*:}" exists "$(lock_key k)") == 1 ]] || fail "the brief holder does not hold its lock"
  start_family holder k -t 1500ms --kill-after 500ms
  local t0 took
  t0=$(now_ms)
  redis_kill
  kill -STOP "$brief_srv"
  sleep 0.3
  kill -CONT "$brief_srv"
  wait_until -t 6 family_gone || fail "the process group is still running 6s after Redis died"
  took=$(elapsed_ms "$t0")
  # The last renewal was before the kill, so the lock's validity ended at most 1.5s after it.
  ((took < 1550)) || fail "the process group was gone ${took}ms after Redis died, past the 1.5s TTL"
  bg_wait holder 10
  assert_equal "$BG_STATUS" 76
  # The brief pause.
  bg_wait brief 10
  assert_equal "$BG_STATUS" 0
  [[ $(srv_cli "${brief_url##*:}" exists "$(lock_key k)") == 0 ]] || fail "the brief holder did not release its lock"
}

@test "--kill-after too long for the TTL is a usage error" {
  run --separate-stderr rlock run k -t 3s --kill-after 10s -- true
  assert_usage_error
  run --separate-stderr rlock run k -t 3s --kill-after 3s -- true
  assert_usage_error
  RLOCK_KILL_AFTER=10s run --separate-stderr rlock run k -t 3s -- true
  assert_usage_error
  assert lock_free k
}

@test "--kill-after that fits the TTL is accepted" {
  run rlock run k -t 3s --kill-after 1s -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{k}"'
  assert_success
  assert_output 1
  run rlock run k -t 2s -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{k}"'
  assert_success
  assert_output 1
}
