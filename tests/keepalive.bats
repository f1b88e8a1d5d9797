#!/usr/bin/env bats
# acquire --keepalive: a detached keeper renews the lock while the calling process lives and
# gives it back when it ends (SIGKILL included), never takes a lost lock again, and reports the
# loss to the next release or extend.

load helpers/common

BATS_TEST_TIMEOUT=90

setup() {
  common_setup
  redis_start
  # The keepers' states go to a directory of the test's own.
  export XDG_RUNTIME_DIR=$T/run
  mkdir -m 700 "$XDG_RUNTIME_DIR"
}

teardown() {
  common_teardown
}

# Live processes named "rlock keeper" that carry this test's mark.
keepers() {
  local p out=()
  for p in $(pgrep -x "rlock keeper" 2>/dev/null); do
    pid_alive "$p" || continue
    grep -qzxF "RLOCKTEST_MARK=$RLOCKTEST_MARK" "/proc/$p/environ" 2>/dev/null && out+=("$p")
  done
  echo "${out[@]}"
}
no_keeper() { [[ -z $(keepers) ]]; }
state_files() { find "$XDG_RUNTIME_DIR/rlock" -name '*.keeper' 2>/dev/null | wc -l; }
# renewed KEY N: whether status shows N holders of KEY, each renewed since it took the lock (more
# time left than the rest of the lease it took: a renewal, seen without waiting out the TTL).
renewed() {
  rlock status "$1" --json 2>/dev/null |
    jq -e --argjson n "$2" '(.holders | length) == $n and all(.holders[]; .ttl_ms + .held_for_ms > .lease_ms + 100)' >/dev/null
}

@test "a script holds its lock across steps with a 1.5s TTL, never loses it, and releases it; no keeper is left" {
  # 4 steps of 0.45s, each checked at its end: the last check 1.8s in, past the TTL; over three
  # renewals.
  cat >"$T/script.sh" <<'SCRIPT'
set -e
tok=$(rlock acquire k --keepalive -t 1500ms)
for i in 1 2 3 4; do
  sleep 0.45
  [ "$(redis-cli -p "$REDIS_PORT" get 'rlock:{k}')" = "$tok" ] || { echo "lost at step $i"; exit 9; }
done
RLOCK_TOKEN=$tok rlock release k
echo released
SCRIPT
  run bash "$T/script.sh"
  assert_success
  assert_output released
  assert lock_free k
  wait_until no_keeper || fail "a keeper is still running: $(keepers)"
  assert_equal "$(state_files)" 0
}

@test "an unwritable --keeper-log is refused before any lock is taken" {
  run --separate-stderr rlock acquire k --keepalive --keeper-log "$T/no/such/dir/keeper.log"
  assert_failure 71
  [[ $stderr == *"rlock: error: cannot write the keeper log $T/no/such/dir/keeper.log: "* ]] || fail "$stderr"
  assert lock_free k
  no_keeper || fail "a keeper was started: $(keepers)"
}

@test "a token that cannot be written: its keeper gives the lock back and is gone" {
  run --separate-stderr rlock acquire k --keepalive --token-file "$T/no/such/dir/token"
  assert_failure 71
  [[ $stderr == *"rlock: error: cannot write the token to $T/no/such/dir/token: "* ]] || fail "$stderr"
  assert lock_free k
  no_keeper || fail "a keeper is left: $(keepers)"
  assert_equal "$(state_files)" 0
}

@test "status --json says kept for a keepalive hold, as the table does" {
  require_jq
  local tok
  tok=$(rlock acquire k --keepalive -t 30s)
  run --separate-stderr rlock status k --json
  assert_success
  assert_equal "$(jq -r '.holders[0].state' <<<"$output")" kept
  run --separate-stderr rlock status k
  assert_success
  [[ $output == *kept* ]] || fail "the table does not say kept: $output"
  RLOCK_TOKEN=$tok rlock release k
  wait_until no_keeper || fail "a keeper is still running: $(keepers)"
}

@test "a script killed with SIGKILL frees its lock within 1s; no keeper is left" {
  bg script bash -c 'tok=$(rlock acquire k --keepalive -t 30s); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  assert lock_held k
  local k0
  k0=$(keepers)
  [[ -n $k0 ]] || fail "no keeper runs"
  local t0 took
  t0=$(now_ms)
  kill -KILL "$script_pid"
  wait_until -t 3 lock_free k || fail "the lock outlived the script"
  took=$(elapsed_ms "$t0")
  ((took <= 1500)) || fail "the lock was freed ${took}ms after the script died (limit 1s, with slack)"
  wait_until no_keeper || fail "the keeper is still running"
  assert_equal "$(state_files)" 0
}

@test "\$(rlock acquire --keepalive) returns at once: under bash -e, without a terminal, and under setsid with stdin closed" {
  local t0 took
  t0=$(now_ms)
  run timeout 10 bash -ec 'tok=$(rlock acquire a --keepalive); RLOCK_TOKEN=$tok rlock release a; echo ok'
  took=$(elapsed_ms "$t0")
  assert_success
  assert_output ok
  ((took < 5000)) || fail "took ${took}ms"
  # cron-like: a new session, no terminal, stdin closed.
  run timeout 10 setsid bash -ec 'tok=$(rlock acquire b --keepalive <&-); RLOCK_TOKEN=$tok rlock release b <&-; echo ok' <&-
  assert_success
  assert_output ok
  assert lock_free a
  assert lock_free b
  wait_until no_keeper || fail "a keeper is still running"
}

@test "the keeper is detached: its own session, stdio on /dev/null, no other descriptor, no token in argv" {
  bg script bash -c 'tok=$(rlock acquire k --keepalive); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  local k fds
  k=$(keepers)
  [[ -n $k ]] || fail "no keeper"
  [[ $(ps -o sid= -p "$k" | tr -d ' ') == "$k" ]] || fail "the keeper does not lead a session of its own"
  [[ $(ps -o tty= -p "$k" | tr -d ' ') == "?" ]] || fail "the keeper has a terminal"
  for fd in 0 1 2; do
    [[ $(readlink "/proc/$k/fd/$fd") == /dev/null ]] || fail "fd $fd of the keeper is $(readlink "/proc/$k/fd/$fd")"
  done
  # Beyond stdio: the watched process (pidfd), its own signalfd, timer and Redis socket.
  fds=$(ls "/proc/$k/fd" | wc -l)
  ((fds <= 8)) || fail "the keeper holds $fds descriptors: $(ls -l "/proc/$k/fd")"
  ! ls -l "/proc/$k/fd" | grep -q "$T" || fail "the keeper holds a file of the caller: $(ls -l "/proc/$k/fd")"
  ! tr '\0' ' ' <"/proc/$k/cmdline" | grep -qF "$(cat "$T/tok")" || fail "the token is in the keeper's argv"
  kill -KILL "$script_pid"
  wait_until lock_free k
}

@test "status shows the keeper, its pid and the pid it watches" {
  require_jq
  bg script bash -c 'tok=$(rlock acquire k --keepalive); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  local k
  k=$(keepers)
  run rlock status k --json
  assert_success
  assert_equal "$(jq '.holders[0].keeper_pid' <<<"$output")" "$k"
  assert_equal "$(jq '.holders[0].watched_pid' <<<"$output")" "$(jq .pid <<<"$output")"
  run rlock status -v k
  assert_output --partial "kept alive by keeper pid $k"
  kill -KILL "$script_pid"
  wait_until lock_free k
}

@test "Redis unavailable longer than the TTL: the keeper stops, and the next release reports the loss (1)" {
  bg script bash -c 'tok=$(rlock acquire k --keepalive -t 1s --io-timeout 500ms); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  local tok
  tok=$(cat "$T/tok")
  kill -STOP "$REDIS_PID"
  wait_until -t 6 no_keeper || fail "the keeper kept running with Redis paused"
  kill -CONT "$REDIS_PID"
  RLOCK_TOKEN=$tok run --separate-stderr rlock release k
  assert_failure 1
  [[ $stderr == *"lost"* ]] || fail "no word of the loss: $stderr"
  [[ $stderr =~ [0-9]{2}:[0-9]{2}:[0-9]{2} ]] || fail "the loss is not dated: $stderr"
  assert_equal "$(state_files)" 0
}

@test "a lock taken over is never taken again: the keeper stops, signals with --signal, extend reports the loss" {
  bg script bash -c 'trap "echo lost > $0.sig; exit 3" USR1; tok=$(rlock acquire k --keepalive -t 1s --signal USR1); echo "$tok" > "$0"; while :; do sleep 0.1; done' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  local tok
  tok=$(cat "$T/tok")
  rcli set "$(lock_key k)" someone-else-0123456789abcdef0123456789abcdef01 >/dev/null
  wait_until -t 5 test -s "$T/tok.sig" || fail "the watched script got no SIGUSR1"
  wait_until no_keeper || fail "the keeper is still running"
  assert_equal "$(rcli get "$(lock_key k)")" someone-else-0123456789abcdef0123456789abcdef01
  RLOCK_TOKEN=$tok run --separate-stderr rlock extend k
  assert_failure 1
  [[ $stderr == *"lost"* ]] || fail "no word of the loss: $stderr"
}

@test "--max-hold bounds the keeper's life" {
  bg script bash -c 'tok=$(rlock acquire k --keepalive -t 2s --max-hold 500ms); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  wait_until -t 4 lock_free k || fail "the lock outlived --max-hold"
  wait_until no_keeper || fail "the keeper is still running"
  RLOCK_TOKEN=$(cat "$T/tok") run --separate-stderr rlock release k
  assert_failure 1
  [[ $stderr == *"max-hold"* ]] || fail "no word of --max-hold: $stderr"
}

@test "inside the watched script, a nested run or acquire of the key proceeds at once under the keeper's hold" {
  cat >"$T/script.sh" <<'SCRIPT'
tok=$(rlock acquire k --keepalive)
rlock run k -n -- sh -c 'echo "inner=$RLOCK_TOKEN"'
inner=$(rlock acquire k -n)
echo "acquired=$inner"
echo "outer=$tok"
RLOCK_TOKEN=$tok rlock release k
SCRIPT
  run timeout 20 bash "$T/script.sh"
  assert_success
  local outer
  outer=$(sed -n 's/^outer=//p' <<<"$output")
  assert_line "inner=$outer"
  assert_line "acquired=$outer"
  assert lock_free k
  # Outside the watched tree, the key is busy for anyone else.
  bg script bash -c 'tok=$(rlock acquire k --keepalive); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok"
  run rlock run k -n -- true
  assert_failure 75
  kill -KILL "$script_pid"
}

@test "keepalive works with --limit and with the queue" {
  require_jq
  bg one bash -c 'tok=$(rlock acquire s --limit 2 --keepalive -t 2s); echo "$tok" > "$0"; sleep 1000' "$T/one"
  bg two bash -c 'tok=$(rlock acquire s --limit 2 --keepalive -t 2s); echo "$tok" > "$0"; sleep 1000' "$T/two"
  wait_until test -s "$T/one" && wait_until test -s "$T/two" || fail "two holders did not get slots"
  bg three bash -c 'tok=$(rlock acquire s --limit 2 --keepalive -t 2s -w 20); echo "$tok" > "$0"; sleep 1000' "$T/three"
  # The keepers renew the two slots (no renewal comes before TTL/3 less its jitter, 0.6s).
  nap 0.5
  wait_until -t 5 renewed s 2 || fail "the keepers did not renew both slots: $(rlock status s --json)"
  [[ ! -s $T/three ]] || fail "a third holder got in beside two kept slots"
  kill -KILL "$one_pid"
  wait_until -t 5 test -s "$T/three" || fail "the waiter did not get the slot freed by the dead script"
  kill -KILL "$two_pid" "$three_pid"
}

@test "another user cannot stop someone else's keeper through rlock" {
  [[ $(id -u) == 0 ]] || skip "needs root to act as another user"
  id nobody >/dev/null 2>&1 || skip "no user nobody"
  bg script bash -c 'tok=$(rlock acquire k --keepalive); echo "$tok" > "$0"; sleep 1000' "$T/tok"
  wait_until test -s "$T/tok" || fail "the script did not get the lock: $(bg_err script)"
  local k other
  k=$(keepers)
  # A copy of the binary that the other user may run (the test's directories are private).
  other=$(mktemp -d /tmp/rlock-other.XXXXXX)
  chmod 755 "$other"
  cp "$(readlink -f "$RLOCK_BIN")" "$other/rlock"
  chmod 755 "$other/rlock"
  as_nobody() {
    (cd / && setpriv --reuid=nobody --regid=nogroup --clear-groups env -u XDG_RUNTIME_DIR RLOCK_URL="$RLOCK_URL" \
      RLOCKTEST_MARK="$RLOCKTEST_MARK" "$@")
  }
  # Without the token: release refuses, and nothing it does touches the keeper.
  RLOCK_TOKEN=0000000000000000ffffffffffffffffffffffffffffffff run as_nobody "$other/rlock" release k
  assert_failure 1
  pid_alive "$k" || fail "the keeper died"
  # With the token copied, the other user may release the lock (the token is the authority),
  # but rlock does not touch the keeper: its states are in a directory only its user may read.
  RLOCK_TOKEN="$(cat "$T/tok")" run as_nobody env RLOCK_TOKEN="$(cat "$T/tok")" "$other/rlock" release k
  rm -rf "$other"
  assert_success
  [[ $(awk '/^Uid:/ { print $2 }' "/proc/$k/status") == 0 ]] || fail "the keeper does not run as its caller"
  kill -KILL "$script_pid"
}

@test "a /tmp/rlock-UID that another user created first is skipped for a directory in the home" {
  [[ $(id -u) == 0 ]] || skip "needs root to act as another user"
  id nobody >/dev/null 2>&1 || skip "no user nobody"
  local uid squat other home
  uid=$(id -u nobody)
  squat=/tmp/rlock-$uid
  [[ ! -e $squat ]] || skip "$squat exists already"
  require_jq
  # Root (another user, for nobody) squats nobody's /tmp directory; cron sets no XDG_RUNTIME_DIR.
  mkdir -m 777 "$squat"
  other=$(mktemp -d /tmp/rlock-other.XXXXXX)
  home=$other/home
  mkdir -p "$home"
  chown nobody "$home"
  chmod 755 "$other"
  cp "$(readlink -f "$RLOCK_BIN")" "$other/rlock"
  chmod 755 "$other/rlock"
  # As nobody: take the lock, show the keeper's state file, wait until the keeper renewed the lock
  # (more time left than the rest of the lease it took), release it.
  cat >"$other/script.sh" <<'SCRIPT'
rlock=$1
tok=$("$rlock" acquire k --keepalive -t 1500ms) && ls "$HOME/.rlock" || exit 9
i=0
until "$rlock" status k --json | jq -e '.ttl_ms + .held_for_ms > .lease_ms + 100' >/dev/null; do
  i=$((i + 1))
  [ "$i" -lt 100 ] || { echo "not renewed"; exit 9; }
  sleep 0.05
done
RLOCK_TOKEN=$tok "$rlock" release k && echo released
SCRIPT
  chmod 644 "$other/script.sh"
  run bash -c 'cd / && setpriv --reuid=nobody --regid=nogroup --clear-groups env -u XDG_RUNTIME_DIR HOME="$1" \
    RLOCK_URL="$RLOCK_URL" RLOCKTEST_MARK="$RLOCKTEST_MARK" sh "$2/script.sh" "$2/rlock"' _ "$home" "$other"
  local squatted
  squatted=$(ls -A "$squat")
  rm -rf "$squat" "$other"
  assert_success
  assert_line --regexp '^[0-9a-f]{16}\.keeper$'
  assert_line released
  assert_equal "$squatted" ""
  assert lock_free k
}

@test "20 keepalive acquire/release cycles leave no keeper, descriptor or state file behind" {
  local before after cycles
  cycles=$(scaled 20)
  before=$(ls /proc/$$/fd | wc -l)
  run bash -ec 'for i in $(seq 1 "$0"); do tok=$(rlock acquire k --keepalive -t 5s); RLOCK_TOKEN=$tok rlock release k; done; echo done' "$cycles"
  assert_success
  assert_output done
  wait_until no_keeper || fail "keepers left: $(keepers)"
  assert_equal "$(state_files)" 0
  after=$(ls /proc/$$/fd | wc -l)
  assert_equal "$after" "$before"
  assert lock_free k
  # Nothing stays connected to Redis either.
  wait_until -t 5 eval '[[ $(rcli info clients | tr -d "\r" | sed -n "s/^connected_clients://p") -le 1 ]]' ||
    fail "connections left: $(rcli client list)"
}

@test "the watched process is the script's shell, past the subshell of \$(...) but not past a shell of its own" {
  # Inside $(...) with a redirection the shell forks a subshell that runs rlock: the script's
  # shell is watched, so the lock lives on after the subshell.
  cat >"$T/inner.sh" <<'INNER'
tok=$(rlock acquire k --keepalive <&-)
echo "$tok" > "$TOKFILE"
sleep 0.5
redis-cli -p "$REDIS_PORT" exists 'rlock:{k}' > "$TOKFILE.held"
INNER
  # A shell started with the same command line as its parent (bash < inner.sh under bash <
  # outer.sh) is a shell of its own, not a subshell: when it ends, the hold ends.
  printf 'bash < "%s"\nsleep 3\n' "$T/inner.sh" >"$T/outer.sh"
  TOKFILE=$T/tok bg outer bash -c 'exec bash < "$0"' "$T/outer.sh"
  wait_until -t 10 test -s "$T/tok.held" || fail "the inner script did not run: $(bg_err outer)"
  assert_equal "$(cat "$T/tok.held")" 1
  wait_until -t 2 lock_free k || fail "the lock outlived the inner script (its parent shell was watched)"
  wait_until no_keeper
}
