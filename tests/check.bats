#!/usr/bin/env bats
# rlock check (a Nagios plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, one status line) and
# rlock metrics (the Prometheus text exposition, checked by promtool), both read from the summary
# that the lock scripts keep per key (PREFIX{KEY}:sum), also without a history; the values against
# a scripted history; --textfile's atomic write; rlock(1)'s alert rules.

load helpers/common
load helpers/servers
load helpers/redlock

setup_file() {
  # For the Cluster test, created while the tests before it run.
  cluster_start_bg 3
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# yq_rule FILE ALERT: the expression of the alert rule ALERT in a rules file, on one line.
yq_rule() {
  python3 -c '
import sys, yaml
for g in yaml.safe_load(open(sys.argv[1]))["groups"]:
    for r in g["rules"]:
        if r.get("alert") == sys.argv[2]:
            print(" ".join(r["expr"].split()), r.get("for", ""))
' "$1" "$2"
}

require_promtool() {
  command -v promtool >/dev/null || skip "promtool is not installed (Debian package prometheus; scripts/setup installs it)"
}

# metric NAME LABELS: the value of the sample NAME{LABELS} in $T/metrics (fails when absent).
metric() {
  local line
  line=$(grep -F -- "$1{$2} " "$T/metrics") || fail "no sample $1{$2} in: $(cat "$T/metrics")"
  echo "${line##* }"
}

# hold KEY: a background `rlock run KEY` whose child sleeps until the test ends.
hold() {
  bg holder rlock run "$1" -- sh -c 'touch "$0"; exec sleep 100' "$T/started"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
}

# A history with known outcomes: two successes (a run exiting 0, and an acquire given back by
# release), a run exiting 3, a busy -n, and a hold lost (its lock deleted under it).
scripted_history() {
  rlock run job -- true || fail "a run of true failed"
  local tok
  tok=$(rlock acquire job) || fail "acquire failed"
  RLOCK_TOKEN=$tok rlock release job || fail "release failed"
  run rlock run job -- sh -c 'exit 3'
  assert_equal "$status" 3
  hold job
  run rlock run job -n -- true
  assert_equal "$status" 75
  kill "$holder_pid"
  bg_wait holder
  tok=$(rlock acquire job) || fail "acquire failed"
  rcli del "$(lock_key job)" >/dev/null
  RLOCK_TOKEN=$tok run rlock release job
  assert_equal "$status" 1
}

@test "check: OK with the last success in one line, and each limit as WARNING or CRITICAL" {
  rlock run nightly -- true
  sleep 0.05
  run --separate-stderr rlock check nightly --max-failures 0
  assert_success
  [[ ${lines[0]} =~ ^RLOCK\ OK\ -\ nightly:\ last\ success\ [0-9.]+m?s\ ago\ on\ $(uname -n)\ \(exit\ 0,\ [0-9.]+m?s\)\ \|\ \'nightly\ since_success\'=[0-9.]+s\;\;\;0 ]] ||
    fail "unexpected status line: $output"
  assert_equal "${#lines[@]}" 1

  run rlock check nightly --succeeded-within 1h
  assert_success
  run rlock check nightly --succeeded-within 1ms,1h
  assert_equal "$status" 1
  assert_output --partial "RLOCK WARNING - nightly: "
  assert_output --partial "no success within 1ms"
  assert_output --partial "'nightly since_success'="
  assert_output --partial "s;0.001;3600;0"
  run rlock check nightly --succeeded-within 1ms
  assert_equal "$status" 2
  assert_output --partial "RLOCK CRITICAL - nightly: "

  # Held: too long, and too many waiting.
  hold nightly
  sleep 0.05
  run rlock check nightly --max-held 1h
  assert_success
  assert_output --partial "held by $(uname -n) pid $holder_pid for "
  run rlock check nightly --max-held 1ms,1h
  assert_equal "$status" 1
  run rlock check nightly --max-held 1ms
  assert_equal "$status" 2
  assert_output --partial "held over 1ms"
  bg waiter rlock run nightly -w 30s -- true
  wait_until eval '[[ $(rcli zcard "$(lock_key nightly):q") == 1 ]]' || fail "the waiter did not queue"
  run rlock check nightly --max-waiting 1
  assert_success
  run rlock check nightly --max-waiting 0
  assert_equal "$status" 2
  assert_output --partial "1 waiting"
  assert_output --partial "more than 0 waiting"
}

@test "check: a lost hold counts until the next success; a failed run is no success" {
  rlock run k -- true
  rlock run k -- sh -c 'exit 4' || true
  run rlock check k --max-lost 0
  assert_success
  assert_output --partial "last end "
  assert_output --partial ": released (exit 4, "
  local tok
  tok=$(rlock acquire k)
  rcli del "$(lock_key k)" >/dev/null
  RLOCK_TOKEN=$tok rlock release k || true
  run rlock check k --max-lost 0
  assert_equal "$status" 2
  assert_output --partial "1 lost since the last success"
  run rlock check k --max-lost 0,1
  assert_equal "$status" 1
  rlock run k -- true
  run rlock check k --max-lost 0
  assert_success
}

@test "check: a run that rlock ended is no success, even when its command exited 0" {
  require_jq
  # --max-hold, and a command that exits 0 on TERM, as graceful shutdowns do: rlock exits 76.
  run --separate-stderr rlock run job --max-hold 500ms -- sh -c 'trap "exit 0" TERM; sleep 10 & wait'
  assert_equal "$status" 76
  run rlock check job --succeeded-within 1h
  assert_equal "$status" 2
  assert_output --partial "no success recorded; last end "
  assert_output --partial ": released (exit 0, "
  assert_output --partial ", stopped at --max-hold)"
  # The guard SIGKILLed while the command runs: rlock kills the command and exits 71.
  bg holder rlock run guarded -- sh -c 'echo "$PPID" >"$0"; exec sleep 100' "$T/guard"
  wait_until test -s "$T/guard" || fail "the command did not start: $(bg_err holder)"
  kill -KILL "$(cat "$T/guard")"
  bg_wait holder
  assert_equal "$BG_STATUS" 71
  run --separate-stderr rlock log guarded --json
  jq -e -s '.[-1].event == "released" and .[-1].outcome == "guard_killed"' <<<"$output" >/dev/null ||
    fail "history: $output"
  run rlock check guarded --succeeded-within 1h
  assert_equal "$status" 2
  assert_output --partial "no success recorded"
  assert_output --partial ", killed: its guard was killed)"
}

@test "check --max-failures: the runs in a row that ended without success; no limit at all is UNKNOWN" {
  rlock run job -- true
  run rlock check job --max-failures 0
  assert_success
  # A job whose only failures came after its success.
  run rlock run job -- sh -c 'exit 3'
  run rlock check job --max-failures 0
  assert_equal "$status" 2
  assert_output --partial "1 failed in a row"
  assert_output --partial "more than 0 failed in a row"
  assert_output --partial "'job failures'=1;;0;0"
  run rlock run job -- sh -c 'exit 4'
  run rlock check job --max-failures 1,2
  assert_equal "$status" 1
  assert_output --partial "2 failed in a row"
  run rlock check job --max-failures 2
  assert_success
  # A success starts the count over.
  rlock run job -- true
  run rlock check job --max-failures 0
  assert_success

  # Without a limit, check would say OK whatever happened: it says UNKNOWN, and why, with the
  # record (a job whose only run exited 3).
  rlock run other -- sh -c 'exit 3' || true
  run --separate-stderr rlock check other
  assert_equal "$status" 3
  assert_output --partial "RLOCK UNKNOWN - other: no success recorded; last end "
  assert_output --partial "no limit given: give --succeeded-within, --max-failures"
  run --separate-stderr rlock check other --max-failures 0 --json
  assert_equal "$status" 2
  require_jq
  jq -e '.keys[0].failed_since_success == 1' <<<"$output" >/dev/null || fail "$output"
}

@test "check: several keys, the worst state wins; a line per key, worst first" {
  rlock run good -- true
  rlock run bad -- sh -c 'exit 1' || true
  run rlock check good bad --succeeded-within 1h
  assert_equal "$status" 2
  assert_equal "${lines[0]%% |*}" "RLOCK CRITICAL - 2 locks: 1 critical (bad), 1 ok"
  [[ ${lines[1]} == "CRITICAL bad: no success recorded; last end "* ]] || fail "line 2: ${lines[1]}"
  [[ ${lines[2]} == "OK good: last success "* ]] || fail "line 3: ${lines[2]}"
  assert_equal "${#lines[@]}" 3
}

@test "check and metrics expand a glob as log does" {
  require_jq
  local log_keys
  rlock run chk-a -- true
  rlock run chk-b -- sh -c 'exit 1' || true
  rlock run other -- true
  run rlock check 'chk-*' --max-failures 0
  assert_equal "$status" 2
  assert_equal "${lines[0]%% |*}" "RLOCK CRITICAL - 2 locks: 1 critical (chk-b), 1 ok"
  run rlock check 'chk-[a]' --max-failures 0
  assert_success
  assert_output --partial "RLOCK OK - chk-a: "
  # A pattern that matches nothing says so (and a name given twice is checked once).
  run rlock check 'none-*' chk-a chk-a --max-failures 0
  assert_equal "$status" 3
  assert_equal "${lines[0]%% |*}" "RLOCK UNKNOWN - 2 locks: 1 unknown (none-*), 1 ok"
  assert_output --partial "UNKNOWN none-*: no lock under the prefix matches the pattern"
  log_keys=$(rlock log 'chk-*' --json | jq -r .key | sort -u | xargs)
  assert_equal "$log_keys" "chk-a chk-b"
  rlock metrics 'chk-*' >"$T/metrics"
  assert_equal "$(grep '^rlock_held{' "$T/metrics" | xargs)" 'rlock_held{key=chk-a} 0 rlock_held{key=chk-b} 0'
}

@test "check: UNKNOWN (3) for a key never used, an unreachable Redis and a bad option, on stdout too" {
  run --separate-stderr rlock check never-used
  assert_equal "$status" 3
  assert_output --partial "RLOCK UNKNOWN - never-used: no record"
  run --separate-stderr rlock check never-used --succeeded-within 25h
  assert_equal "$status" 2
  assert_output --partial "no success within 25h"

  # The reason once, on stdout: a monitoring system that shows stderr too shows it once.
  run --separate-stderr rlock check k --max-held soon
  assert_equal "$status" 3
  [[ $output == "RLOCK UNKNOWN - --max-held: 'soon' is not a duration: "* ]] || fail "stdout: $output"
  assert_equal "${#lines[@]}" 1
  assert_equal "$stderr" ""
  run --separate-stderr rlock check k --max-lost 2,1
  assert_equal "$status" 3
  run --separate-stderr rlock check
  assert_equal "$status" 3
  assert_output --partial "RLOCK UNKNOWN - missing KEY"

  local port
  port=$(free_port)
  run --separate-stderr rlock check k -u "redis://127.0.0.1:$port" --connect-timeout 500ms
  assert_equal "$status" 3
  assert_output --partial "RLOCK UNKNOWN - redis://127.0.0.1:$port: cannot connect"
  assert_equal "$stderr" ""
}

@test "check --json: the same state, exit status and data" {
  require_jq
  scripted_history
  run --separate-stderr rlock check job --json --max-lost 0
  assert_equal "$status" 2
  jq -e '.state == "CRITICAL" and .exit == 2 and (.keys | length) == 1' <<<"$output" >/dev/null || fail "$output"
  jq -e '.keys[0] | .key == "job" and .state == "CRITICAL" and .lost_since_success == 1 and .held == false' \
    <<<"$output" >/dev/null || fail "$output"
  jq -e '.keys[0].counts == {acquired: 5, busy: 1, released: 4, lost: 1, superseded: 0, preempted: 0, expired: 0,
    returned: 0, overrun: 0}' <<<"$output" >/dev/null || fail "counts: $output"
  jq -e '.keys[0].last_success | .exit == null and .event == "released"' <<<"$output" >/dev/null ||
    fail "the last success is the acquire given back: $output"
  jq -e '.keys[0].last_end | .event == "lost"' <<<"$output" >/dev/null || fail "$output"
}

@test "metrics: promtool accepts them, and the values follow a scripted history" {
  require_promtool
  scripted_history
  # The success, as the history has it: the release of the acquire hold.
  local success_ms
  success_ms=$(rlock log job --json | jq -r 'select(.event == "released" and .exit == null) | .time_ms' | tail -n 1)
  rlock metrics >"$T/metrics"
  promtool check metrics <"$T/metrics" || fail "promtool: $(promtool check metrics <"$T/metrics" 2>&1)"
  assert_equal "$(metric rlock_held 'key="job"')" 0
  assert_equal "$(metric rlock_holders 'key="job"')" 0
  assert_equal "$(metric rlock_waiters 'key="job"')" 0
  assert_equal "$(metric rlock_events_total 'key="job",event="acquired"')" 5
  assert_equal "$(metric rlock_events_total 'key="job",event="busy"')" 1
  assert_equal "$(metric rlock_events_total 'key="job",event="released"')" 4
  assert_equal "$(metric rlock_events_total 'key="job",event="lost"')" 1
  assert_equal "$(metric rlock_events_total 'key="job",event="superseded"')" 0
  assert_equal "$(metric rlock_events_total 'key="job",event="preempted"')" 0
  assert_equal "$(metric rlock_last_success_timestamp_seconds 'key="job"')" \
    "$(printf '%d.%03d' $((success_ms / 1000)) $((success_ms % 1000)))"
  # The last hold that ended was the lost acquire hold: no command, so no exit status.
  ! grep -q '^rlock_last_exit_code{key="job"}' "$T/metrics" || fail "an exit code for a hold without a command"
  assert_equal "$(metric rlock_lost_since_success 'key="job"')" 1
  # Since the acquire given back: the run that exited 3, the one killed (143), the hold lost.
  assert_equal "$(metric rlock_failed_since_success 'key="job"')" 3
  grep -q '^# TYPE rlock_events_total counter$' "$T/metrics" || fail "no counter TYPE line"

  # The exit status of the last run that ended, and a hold going on with a waiter.
  rlock run job -- sh -c 'exit 3' || true
  hold job
  bg waiter rlock run job -w 30s -- true
  wait_until eval '[[ $(rcli zcard "$(lock_key job):q") == 1 ]]' || fail "the waiter did not queue"
  sleep 0.2
  rlock metrics job >"$T/metrics"
  promtool check metrics <"$T/metrics" || fail "promtool: $(promtool check metrics <"$T/metrics" 2>&1)"
  assert_equal "$(metric rlock_last_exit_code 'key="job"')" 3
  assert_equal "$(metric rlock_held 'key="job"')" 1
  assert_equal "$(metric rlock_holders 'key="job"')" 1
  assert_equal "$(metric rlock_waiters 'key="job"')" 1
  local held
  held=$(metric rlock_held_seconds 'key="job"')
  [[ $(bc <<<"$held >= 0.2 && $held < 60") == 1 ]] || fail "held for $held s"
}

@test "metrics: the summary is kept with --log-length 0, and every lock under the prefix is shown" {
  require_promtool
  rlock run quiet --log-length 0 -- true
  rlock run --prefix other: elsewhere -- true
  [[ $(rcli exists "rlock:{quiet}:log") == 0 ]] || fail "a history was kept"
  rlock metrics >"$T/metrics"
  assert_equal "$(metric rlock_events_total 'key="quiet",event="acquired"')" 1
  ! grep -q elsewhere "$T/metrics" || fail "a lock under another prefix is shown"
  run rlock check quiet --max-failures 0
  assert_success
}

@test "metrics --expect: a job exported even if it never ran, from the option, the environment or the config file" {
  require_promtool
  rlock run ran -- true
  rlock metrics --expect never-ran --expect ran >"$T/metrics"
  promtool check metrics <"$T/metrics" || fail "promtool: $(promtool check metrics <"$T/metrics" 2>&1)"
  assert_equal "$(metric rlock_last_success_timestamp_seconds 'key="never-ran"')" 0.000
  assert_equal "$(metric rlock_held 'key="never-ran"')" 0
  assert_equal "$(metric rlock_events_total 'key="never-ran",event="acquired"')" 0
  assert_equal "$(grep -c '^rlock_held{key="ran"}' "$T/metrics")" 1
  RLOCK_EXPECT="from-env other" rlock metrics >"$T/metrics"
  assert_equal "$(metric rlock_held 'key="from-env"')" 0
  assert_equal "$(metric rlock_held 'key="other"')" 0
  printf 'expect = "from-config"\n' >"$T/config.toml"
  rlock metrics --config "$T/config.toml" >"$T/metrics"
  assert_equal "$(metric rlock_held 'key="from-config"')" 0
  # Named, not a pattern.
  run --separate-stderr rlock metrics --expect 'job-*'
  assert_usage_error
}

@test "metrics: when the figures were read, and a --textfile that says Redis did not answer" {
  require_promtool
  rlock run job -- true
  mkdir "$T/textfiles"
  local before
  before=$(date +%s)
  rlock metrics --textfile "$T/textfiles/rlock.prom"
  cp "$T/textfiles/rlock.prom" "$T/metrics"
  grep -qx 'rlock_up 1' "$T/metrics" || fail "no rlock_up 1: $(cat "$T/metrics")"
  local read_at
  read_at=$(sed -n 's/^rlock_read_timestamp_seconds //p' "$T/metrics")
  (($(bc <<<"$read_at >= $before && $read_at < $before + 60"))) || fail "read at $read_at (now $before)"
  # Redis gone: the file is written all the same, saying so; the exit status says it too.
  redis_stop
  run --separate-stderr rlock metrics --textfile "$T/textfiles/rlock.prom" --connect-timeout 500ms
  assert_error_exit 69
  assert_equal "$(ls -A "$T/textfiles")" rlock.prom
  promtool check metrics <"$T/textfiles/rlock.prom" || fail "promtool: $(promtool check metrics <"$T/textfiles/rlock.prom" 2>&1)"
  grep -qx 'rlock_up 0' "$T/textfiles/rlock.prom" || fail "no rlock_up 0: $(cat "$T/textfiles/rlock.prom")"
  ! grep -q 'key="job"' "$T/textfiles/rlock.prom" || fail "the last figures are served again"
  # A directory instead of a file: said so, before Redis is asked.
  run --separate-stderr rlock metrics --textfile "$T/textfiles/"
  assert_usage_error
  [[ $stderr == *"is a directory: give the file to write in it, such as $T/textfiles/rlock.prom"* ]] ||
    fail "stderr: $stderr"
}

@test "metrics: a key's label is escaped as the exposition format says" {
  require_promtool
  local key='a"b\c d'
  rlock run "$key" -- true
  rlock metrics >"$T/metrics"
  promtool check metrics <"$T/metrics" || fail "promtool: $(promtool check metrics <"$T/metrics" 2>&1)"
  assert_equal "$(metric rlock_events_total 'key="a\"b\\c d",event="acquired"')" 1
}

@test "metrics --textfile: written atomically (mode 0644, nothing left behind), as on stdout" {
  require_promtool
  rlock run job -- true
  mkdir "$T/textfiles"
  rlock metrics --textfile "$T/textfiles/rlock.prom"
  assert_equal "$(ls -A "$T/textfiles")" rlock.prom
  assert_equal "$(stat -c %a "$T/textfiles/rlock.prom")" 644
  rlock metrics >"$T/stdout.prom"
  diff <(grep -v _seconds "$T/stdout.prom") <(grep -v _seconds "$T/textfiles/rlock.prom") ||
    fail "the file differs from stdout"
  promtool check metrics <"$T/textfiles/rlock.prom"
  # A directory it cannot write to: 71, and the old file stays.
  run --separate-stderr rlock metrics --textfile "$T/missing/rlock.prom"
  assert_error_exit 71
  [[ $stderr == *"cannot write --textfile $T/missing/rlock.prom"* ]] || fail "stderr: $stderr"
}

@test "rlock(7)'s example alert rules are valid Prometheus rules, as in examples/prometheus-rules.yml" {
  require_promtool
  # The YAML block of EXAMPLES that starts with "groups:", its indentation removed.
  awk '/^\t```$/ { if (inblock) { if (rules) exit; inblock = 0 } else { inblock = 1 }; next }
       inblock && /^\tgroups:/ { rules = 1 }
       inblock && rules { sub(/^\t/, ""); print }' "$RLOCK_SOURCE_DIR/man/rlock.7.scd" >"$T/rules.yml"
  grep -q 'rlock_last_success_timestamp_seconds' "$T/rules.yml" || fail "no missed-run rule: $(cat "$T/rules.yml")"
  grep -q 'absent(rlock_last_success_timestamp_seconds' "$T/rules.yml" || fail "no absent() rule: $(cat "$T/rules.yml")"
  grep -q 'rlock_held_seconds' "$T/rules.yml" || fail "no held-too-long rule: $(cat "$T/rules.yml")"
  grep -q 'rlock_read_timestamp_seconds' "$T/rules.yml" || fail "no stale-export rule: $(cat "$T/rules.yml")"
  run promtool check rules "$T/rules.yml"
  assert_success
  assert_output --partial "SUCCESS: 3 rules found"
  # The same rules as examples/prometheus-rules.yml's, which tests/examples.bats tests.
  local rule
  for rule in RlockMissedRun RlockHeldTooLong RlockMetricsStale; do
    diff <(yq_rule "$T/rules.yml" "$rule") <(yq_rule "$RLOCK_SOURCE_DIR/examples/prometheus-rules.yml" "$rule") ||
      fail "$rule differs from examples/prometheus-rules.yml's"
  done
}

@test "Cluster: metrics shows the locks of every master; check reads each on its own" {
  require_promtool
  cluster_wait
  export RLOCK_URL=$CLUSTER_URL
  local k
  for k in a b c d e f g h; do
    rlock run "$k" -- true || fail "run $k failed"
  done
  rlock metrics >"$T/metrics"
  promtool check metrics <"$T/metrics" || fail "promtool: $(promtool check metrics <"$T/metrics" 2>&1)"
  for k in a b c d e f g h; do
    assert_equal "$(metric rlock_events_total "key=\"$k\",event=\"acquired\"")" 1
  done
  run rlock check a b c d e f g h --succeeded-within 1h
  assert_success
  assert_output --partial "RLOCK OK - 8 locks: 8 ok"
}

@test "Redlock: each master keeps a summary; check and metrics merge them" {
  masters_start 3
  rlock "${U[@]}" run k -- true
  rlock "${U[@]}" run k -- sh -c 'exit 2' || true
  # One master lost its copy (a restart without persistence, say): the others still tell.
  mcli 1 del "rlock:{k}:sum" >/dev/null
  run rlock "${U[@]}" check k --succeeded-within 1h
  assert_success
  assert_output --partial "last end "
  assert_output --partial "released (exit 2, "
  rlock "${U[@]}" metrics k >"$T/metrics"
  assert_equal "$(metric rlock_events_total 'key="k",event="acquired"')" 2
  assert_equal "$(metric rlock_last_exit_code 'key="k"')" 2
}
