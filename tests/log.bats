#!/usr/bin/env bats
# rlock log: the history of a lock, written by the lock scripts into a capped stream per key
# (PREFIX{KEY}:log): acquired, busy, released, returned (given back unused), lost, superseded,
# preempted, expired; oldest first, the same from every host; -n, --json, --follow; several keys merged by time; --log-length caps
# it (0: none); never a token or a password; read-only commands write nothing. On Sentinel and
# Cluster too (one topology of each for the whole file).

load helpers/common
load helpers/servers
load faults/helpers/faults
load helpers/queue

BATS_TEST_TIMEOUT=120

# The fields the contract gives every --json event.
SPEC_FIELDS=(cmd event exit fence held_ms host pid time user waited_ms)

setup_file() {
  # Created while the rest is set up and the tests before the Cluster ones run.
  cluster_start_bg 3
  repl_start
  sentinels_start 3
}

teardown_file() {
  servers_teardown_file
}

setup() {
  queue_setup
}

teardown() {
  common_teardown
}

log_key() { echo "rlock:{$1}:log"; }

# stderr_has TEXT: the stderr of the last `run --separate-stderr` contains TEXT.
stderr_has() {
  [[ $stderr == *"$1"* ]] || fail "stderr does not contain '$1': '$stderr'"
}

# The events of `rlock log KEY --json`, one line, space separated.
event_kinds() {
  rlock log "$@" --json | jq -r .event | xargs
}

# $T/on_host NAME CMD...: CMD in a UTS namespace of its own whose host name is NAME.
write_on_host() {
  cat >"$T/on_host" <<'ON_HOST'
#!/bin/sh
exec unshare -u sh -c 'hostname "$1" && shift && exec "$@"' sh "$@"
ON_HOST
  chmod +x "$T/on_host"
}

# assert_bg_status NAME CODE [SECONDS]: the background command NAME ends (within SECONDS,
# default 30) with exit status CODE; else the test fails with its stderr.
assert_bg_status() {
  bg_wait "$1" "${3:-30}"
  [[ $BG_STATUS == "$2" ]] || fail "$1 exited $BG_STATUS, not $2; stderr: $(bg_err "$1")"
}

# every_event KEY: makes KEY's history hold, in this order: acquired busy released (acquire and
# release), acquired released (a run that exits 3), acquired lost, acquired superseded released
# acquired released (a holder, a superseded waiter, the one that superseded it), acquired
# preempted acquired released (a preemptible holder and its preemptor), acquired expired
# acquired released (a holder SIGKILLed, its lease run out, then taken by another).
every_event() {
  local k=$1 key
  key=$(lock_key "$k")
  acquire_token "$k"
  run --separate-stderr rlock run "$k" -n -- true
  assert_failure 75
  RLOCK_TOKEN=$TOKEN rlock release "$k"
  run --separate-stderr rlock run "$k" -- sh -c 'sleep 0.2; exit 3'
  assert_failure 3
  # lost: the lock is taken away from a running holder.
  bg lost rlock run "$k" -t 1500ms -- sleep 30
  wait_until -t 10 lock_held "$k" || fail "the holder did not take $k: $(bg_err lost)"
  rcli del "$key" >/dev/null
  assert_bg_status lost 76 20
  # superseded
  bg holder rlock run "$k" -- sh -c 'while [ ! -e "$0" ]; do sleep 0.05; done' "$T/go"
  wait_until -t 10 lock_held "$k" || fail "the holder did not take $k: $(bg_err holder)"
  enqueue w1 "$k" 1 rlock run "$k" --wait 60s --supersede -- true
  bg w2 rlock run "$k" --wait 60s --supersede -- true
  assert_bg_status w1 79 10
  touch "$T/go"
  assert_bg_status holder 0
  assert_bg_status w2 0
  # preempted
  bg victim rlock run "$k" --preemptible -- sleep 30
  wait_until -t 10 lock_held "$k" || fail "the preemptible holder did not take $k: $(bg_err victim)"
  run --separate-stderr rlock run "$k" --preempt -w 30s -- true
  assert_success
  assert_bg_status victim 80 15
  # expired: the holder dies (SIGKILL, no release); its lease ends; another takes the lock.
  bg dead rlock run "$k" -t 1s -- sleep 30
  wait_until -t 10 lock_held "$k" || fail "the holder did not take $k: $(bg_err dead)"
  kill -KILL "$dead_pid"
  wait_until -t 10 lock_free "$k" || fail "the dead holder's lease did not end"
  run --separate-stderr rlock run "$k" -n -- true
  assert_success
}

EVERY_EVENT="acquired busy released acquired released acquired lost acquired superseded released acquired released acquired preempted acquired released acquired expired acquired released"

@test "log lists acquired, busy, released, lost, superseded, preempted and expired, oldest first; --json: one object a line with the contract's fields and types" {
  redis_start
  every_event k
  assert_equal "$(event_kinds k)" "$EVERY_EVENT"
  run --separate-stderr rlock log k
  assert_success
  assert_equal "$stderr" ""
  assert_equal "${#lines[@]}" 20
  local host user i
  host=$(hostname)
  user=${USER:-$(id -un)}
  # Every line: time, event, host, pid, user, and per event its fence, waited, held and exit.
  for i in "${!lines[@]}"; do
    [[ ${lines[i]} =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\ ([a-z]+)\ ([^ ]+)\ pid\ ([0-9]+)\ user\ ([^ :]+) ]] ||
      fail "line $i has not time, event, host, pid and user: ${lines[i]}"
    assert_equal "${BASH_REMATCH[2]}" "$host"
    assert_equal "${BASH_REMATCH[4]}" "$user"
  done
  assert_equal "$(printf '%s\n' "${lines[@]}" | awk '{ print $2 }' | xargs)" "$EVERY_EVENT"
  [[ ${lines[0]} =~ \ fence\ [0-9]+\ waited\ [0-9.]+m?s ]] || fail "acquired without fence and waited: ${lines[0]}"
  [[ ${lines[4]} =~ \ fence\ [0-9]+\ held\ [0-9.]+m?s\ exit\ 3: ]] || fail "released without held and exit: ${lines[4]}"
  [[ ${lines[6]} =~ \ lost\ .*\ exit\ [0-9]+ ]] || fail "lost without the exit status: ${lines[6]}"
  [[ ${lines[13]} =~ \ preempted\ .*\ held\ .*\ by\ .*pid\ [0-9]+ ]] || fail "preempted without held and by: ${lines[13]}"
  [[ ${lines[17]} =~ \ expired\ .*pid\ $dead_pid\ .*held ]] || fail "expired does not name the dead holder: ${lines[17]}"
  # Oldest first.
  rlock log k --json | jq -r .time_ms | sort -c -n || fail "the events are not in time order"
  # -n 2: the last two.
  run --separate-stderr rlock log k -n 2
  assert_success
  assert_equal "${#lines[@]}" 2
  assert_equal "$(printf '%s\n' "${lines[@]}")" "$(rlock log k | tail -n 2)"
  # --json, of the same events.
  run --separate-stderr rlock log k --json
  assert_success
  assert_equal "${#lines[@]}" 20
  # Each line one JSON object (read a line at a time) with the contract's fields, and more that
  # the code adds: time_ms (the time as a number), key (which lock, for the merged log of every
  # key), by (who superseded or preempted), holder (who held the lock when a request was busy),
  # outcome (how a hold ended), tick and period_ms, job and note (the CI job and --note of the
  # holder's record). The lines that are not print.
  local fields bad
  fields=$(printf '%s\n' "${SPEC_FIELDS[@]}" by holder job key note outcome period_ms tick time_ms | sort | xargs)
  bad=$(printf '%s\n' "${lines[@]}" | jq -R -r --arg fields "$fields" '
    . as $line | try (fromjson | if type == "object" and (keys | join(" ")) == $fields then empty else $line end)
      catch $line') || fail "jq failed on: $output"
  [[ -z $bad ]] || fail "not one JSON object with the fields $fields: $bad"
  # Types and values.
  run jq -e -s '
    all(.[]; (.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$")) and (.pid | type == "number") and
      (.host | type == "string") and (.user | type == "string") and (.event | type == "string"))
    and (.[0].event == "acquired" and (.[0].fence | type == "number") and .[0].waited_ms == 0)
    and (.[4].event == "released" and .[4].exit == 3 and .[4].outcome == "failed" and .[4].held_ms >= 150
      and .[4].cmd == "sh -c '"'"'sleep 0.2; exit 3'"'"'")
    and (.[1].event == "busy" and .[1].exit == null and (.[1].holder.pid | type == "number")
      and .[1].holder.cmd == "rlock acquire k" and .[1].holder.lingering == false)
    and all(.[]; .event == "busy" or .holder == null)
    and (.[13].event == "preempted" and (.[13].by.pid | type == "number") and .[13].held_ms > 0
      and .[13].outcome == "preempted")
    and (.[8].event == "superseded" and (.[8].by.pid | type == "number"))' <<<"$output"
  assert_success
}

@test "a hold given back before it was used is logged as returned, not released" {
  redis_start
  # run: --wait-replicas 1 on a server without replicas takes the lock, then gives it back (69)
  # without starting the command.
  run --separate-stderr rlock run k -n --wait-replicas 1 --wait-timeout 200ms -- touch "$T/ran"
  assert_failure 69
  assert_file_not_exists "$T/ran"
  # acquire: a token that cannot be written is never handed out.
  run --separate-stderr rlock acquire k --token-file "$T/no/such/dir/token"
  assert_failure 71
  # A hold that was used ends as released.
  rlock run k -- true
  assert_equal "$(event_kinds k)" "acquired returned acquired returned acquired released"
  run --separate-stderr rlock log k
  assert_success
  [[ ${lines[1]} =~ \ returned\ [^[:space:]]+\ pid\ [0-9]+\ user\ .*\ fence\ [0-9]+\ held\ [0-9.]+m?s:\ touch ]] ||
    fail "returned without host, pid, fence, held and command: ${lines[1]}"
  run --separate-stderr rlock log k --json
  assert_success
  assert_equal "$(jq -r 'select(.event == "returned") | .exit' <<<"$output" | xargs)" "null null"
}

@test "the log reads the same from every host, and --log-length caps it" {
  unshare -u sh -c 'hostname probe' 2>/dev/null || fail "unshare -u does not work here"
  redis_start
  write_on_host
  "$T/on_host" h1 rlock run k -- true
  "$T/on_host" h2 rlock run k -- true
  run "$T/on_host" h2 rlock run k -n -- true
  assert_success
  local from1 from2
  from1=$("$T/on_host" h1 rlock log k)
  from2=$("$T/on_host" h2 rlock log k --json)
  assert_equal "$(jq -r .host <<<"$from2" | xargs)" "h1 h1 h2 h2 h2 h2"
  assert_equal "$(awk '{ print $3 }' <<<"$from1" | xargs)" "h1 h1 h2 h2 h2 h2"
  assert_equal "$("$T/on_host" h2 rlock log k)" "$from1"
  # Capped: 20 runs (40 events) with --log-length 5 keep at least 5, trimmed in whole stream nodes
  # (XADD MAXLEN ~): with nodes of 4 entries, at most 5 + 4.
  rcli config set stream-node-max-entries 4 >/dev/null
  local i n
  for i in $(seq 1 20); do
    rlock run capped --log-length 5 -- true || fail "run $i failed"
  done
  n=$(rcli xlen "$(log_key capped)")
  ((n >= 5 && n <= 9)) || fail "the capped history holds $n events, not 5 to 9"
  run --separate-stderr rlock log capped
  assert_success
  assert_equal "${#lines[@]}" "$n"
  # The last five: the 18th release, then the 19th and 20th runs.
  assert_equal "$(awk '{ print $2 }' <<<"$output" | tail -n 5 | xargs)" "released acquired released acquired released"
}

@test "--log-length 0 writes no history" {
  redis_start
  export RLOCK_LOG_LENGTH=0
  rlock run k -- true
  acquire_token k
  run --separate-stderr rlock run k -n -- true
  assert_failure 75
  RLOCK_TOKEN=$TOKEN rlock release k
  rlock run k --log-length 0 -- true
  key_missing "$(log_key k)"
  run --separate-stderr rlock log k
  assert_failure 1
  assert_output ""
  assert_equal "$stderr" "rlock: no history for k"
  unset RLOCK_LOG_LENGTH
  rlock run k -- true
  key_exists "$(log_key k)"
}

@test "log without KEY merges the events of every key by time" {
  redis_start
  rlock run alpha -- true
  rlock run bravo -- true
  rlock run alpha -- true
  rlock run charlie -- true
  run --separate-stderr rlock log --json
  assert_success
  assert_equal "$(jq -r .key <<<"$output" | xargs)" "alpha alpha bravo bravo alpha alpha charlie charlie"
  jq -r .time_ms <<<"$output" | sort -c -n || fail "not in time order: $output"
  run --separate-stderr rlock log
  assert_success
  assert_equal "$(awk '{ print $2, $3 }' <<<"$output" | xargs)" \
    "alpha acquired alpha released bravo acquired bravo released alpha acquired alpha released charlie acquired charlie released"
  run --separate-stderr rlock log -n 2
  assert_success
  assert_equal "$(awk '{ print $2, $3 }' <<<"$output" | xargs)" "charlie acquired charlie released"
}

follow_released_twice() {
  [[ $(awk '$2 == "released"' "$T/follow.out" | wc -l) -ge 2 ]]
}

# follow_test SIGNAL CODE: `rlock log k --follow` prints the history, then a run that happens
# after it started, and ends on SIGNAL with CODE, nothing on stderr, whole lines on stdout.
follow_test() {
  rlock run k -- sh -c 'exit 0'
  bg follow rlock log k --follow
  wait_until -t 10 grep -q 'released' "$T/follow.out" || fail "--follow did not print the history: $(bg_err follow)"
  run rlock run k -- sh -c 'exit 4'
  assert_failure 4
  # The release of the new run (its acquisition names the command, `exit 4` included).
  wait_until -t 10 follow_released_twice || fail "--follow did not print the new release: $(bg_out follow)"
  ! bg_done follow || fail "--follow ended by itself: $(bg_err follow)"
  kill "-$1" "$follow_pid"
  bg_wait follow 10
  assert_equal "$BG_STATUS" "$2"
  assert_equal "$(bg_err follow)" ""
  assert_equal "$(awk '{ print $2 }' "$T/follow.out" | xargs)" "acquired released acquired released"
  [[ $(tail -c 1 "$T/follow.out" | od -An -c | tr -d ' ') == '\n' ]] || fail "the output ends in the middle of a line"
}

@test "log --follow prints new events and stops on SIGINT" {
  redis_start
  follow_test INT 130
}

@test "log --follow stops on SIGTERM" {
  redis_start
  follow_test TERM 143
}

@test "the log never holds a token or a password" {
  redis_start_auth 'pw-Sekrit-42'
  local url="redis://:pw-Sekrit-42@127.0.0.1:$REDIS_PORT" tok run_tok
  tok=$(rlock acquire k -u "$url" 2>/dev/null) || fail "acquire failed"
  [[ $tok =~ $TOKEN_RE ]] || fail "acquire printed '$tok'"
  rlock run k -u "$url" -n -- true 2>/dev/null && fail "the held lock was taken"
  RLOCK_TOKEN=$tok rlock release k -u "$url" 2>/dev/null
  run_tok=$(rlock run k -u "$url" -- sh -c 'echo "$RLOCK_TOKEN"' 2>/dev/null)
  [[ $run_tok =~ $TOKEN_RE ]] || fail "run's child saw the token '$run_tok'"
  RLOCK_PASSWORD='pw-Sekrit-42' rlock run k -- true
  local raw
  raw=$(rcli xrange "$(log_key k)" - +)
  [[ $(grep -c -x 'acquired' <<<"$raw") == 3 ]] || fail "the log does not hold the three acquisitions: $raw"
  [[ $raw != *pw-Sekrit-42* ]] || fail "the log holds the password: $raw"
  [[ $raw != *Sekrit* ]] || fail "the log holds part of the password: $raw"
  # Neither token, nor its secret part (the first 16 characters are the contender's public id).
  local t
  for t in "$tok" "$run_tok"; do
    [[ $raw != *"$t"* ]] || fail "the log holds the token $t: $raw"
    [[ $raw != *"${t:16}"* ]] || fail "the log holds the secret part of the token $t: $raw"
  done
  run --separate-stderr rlock log k --json
  [[ $output != *"${tok:16}"* && $output != *Sekrit* ]] || fail "rlock log prints a secret: $output"
}

@test "status, list and log record nothing" {
  redis_start
  acquire_token k
  rlock run other -- true
  local before after
  before=$(rcli xrange "$(log_key k)" - +; rcli xrange "$(log_key other)" - +)
  rlock status k >/dev/null
  rlock status k --json >/dev/null
  rlock status >/dev/null
  rlock list >/dev/null
  rlock list --json >/dev/null
  rlock log >/dev/null
  rlock log k --json >/dev/null
  rlock log other -n 1 >/dev/null
  rlock status free-one >/dev/null || true
  rlock log free-one >/dev/null 2>&1 || true
  after=$(rcli xrange "$(log_key k)" - +; rcli xrange "$(log_key other)" - +)
  assert_equal "$after" "$before"
  key_missing "$(log_key free-one)"
  assert_equal "$(rcli --scan --pattern '*:log' | sort | xargs)" "$(log_key k) $(log_key other)"
}

@test "a busy event names the holder, and says when it was only lingering" {
  redis_start
  acquire_token k
  run --separate-stderr rlock run k -n -- echo second
  assert_failure 75
  run --separate-stderr rlock log k -n 1
  assert_success
  [[ $output =~ \ busy\ [^\ ]+\ pid\ [0-9]+\ user\ [^\ ]+\ held\ by\ $(hostname)\ pid\ [0-9]+\ \(rlock\ acquire\ k\):\ echo\ second$ ]] ||
    fail "the busy event does not name the holder: $output"
  [[ $output != *lingering* ]] || fail "a holder that runs is not lingering: $output"
  RLOCK_TOKEN=$TOKEN rlock release k
  # Lingering: a run with --min-hold has ended, its lock stays taken.
  rlock run k --min-hold 30s -- true
  run --separate-stderr rlock run k -n -- true
  assert_failure 75
  run --separate-stderr rlock log k -n 1
  assert_success
  [[ $output =~ \ busy\ .*\ held\ by\ .*\ pid\ [0-9]+\ \(true\),\ only\ lingering\ \(--min-hold\):\ true$ ]] ||
    fail "the busy event does not say that the holder was only lingering: $output"
  run --separate-stderr rlock log k -n 1 --json
  assert_success
  jq -e '.event == "busy" and .holder.lingering == true and .holder.cmd == "true" and (.holder.pid | type == "number")
    and .holder.host != null' <<<"$output" >/dev/null || fail "the --json busy event: $output"
}

@test "log --since and --until: a duration ago, an RFC 3339 time or a time of day, filtered by the server" {
  redis_start
  rlock run k -- echo one
  # Over 1s: --since 1s, read after the second run, leaves the first one out.
  sleep 1.1
  rlock run k -- echo two
  local times t_first_released t_second_acquired
  times=$(rlock log k --json | jq -r .time_ms | xargs)
  read -r _ t_first_released t_second_acquired _ <<<"$times"
  run --separate-stderr rlock log k --since 1s
  assert_success
  assert_equal "$(awk '{ print $2 }' <<<"$output" | xargs)" "acquired released"
  [[ $output == *"echo two"* && $output != *"echo one"* ]] || fail "--since 1s: $output"
  # An RFC 3339 time in UTC, and the same instant with an offset: the first run's events.
  local until_z until_offset
  until_z=$(date -u -d "@$((t_first_released / 1000)).$(printf '%03d' $((t_first_released % 1000)))" +%Y-%m-%dT%H:%M:%S.%3NZ)
  until_offset=$(TZ=UTC-2 date -d "@$((t_first_released / 1000)).$(printf '%03d' $((t_first_released % 1000)))" +%Y-%m-%dT%H:%M:%S.%3N+02:00)
  run --separate-stderr rlock log k --until "$until_z"
  assert_success
  assert_equal "$(awk '{ print $2 }' <<<"$output" | xargs)" "acquired released"
  [[ $output == *"echo one"* && $output != *"echo two"* ]] || fail "--until $until_z: $output"
  assert_equal "$(rlock log k --until "$until_offset")" "$output"
  # A time of day alone is today's, in UTC (unless the day changed since the run).
  local stamp="@$((t_first_released / 1000)).$(printf '%03d' $((t_first_released % 1000)))"
  if [[ $(date -u -d "$stamp" +%F) == $(date -u +%F) ]]; then
    assert_equal "$(rlock log k --until "$(date -u -d "$stamp" +%H:%M:%S.%3N)")" "$output"
  fi
  # Both: a window holding the first release and the second acquisition only.
  run --separate-stderr rlock log k --json --since "$until_z" --until "$(date -u -d "@$((t_second_acquired / 1000)).$(printf '%03d' $((t_second_acquired % 1000)))" +%Y-%m-%dT%H:%M:%S.%3NZ)"
  assert_success
  assert_equal "$(jq -r .time_ms <<<"$output" | xargs)" "$t_first_released $t_second_acquired"
  # A window with no event: nothing, exit 0 (the key has a history).
  run --separate-stderr rlock log k --until 2001-01-01
  assert_success
  assert_output ""
  # -n counts within the window.
  assert_equal "$(rlock log k --since 1h -n 1 | awk '{ print $2 }')" "released"
  run --separate-stderr rlock log k --since yesterday
  assert_failure 64
  [[ $stderr == "rlock: error: --since: 'yesterday' is neither a duration"* ]] || fail "$stderr"
  run --separate-stderr rlock log k --until 1m -f
  assert_failure 64
}

@test "log KEY may be a glob pattern; an unknown KEY or a pattern that matches nothing exits 1" {
  redis_start
  rlock run deploy-a -- true
  rlock run deploy-b -- true
  rlock run other -- true
  run --separate-stderr rlock log 'deploy-*'
  assert_success
  assert_equal "$(awk '{ print $2 }' <<<"$output" | sort -u | xargs)" "deploy-a deploy-b"
  assert_equal "${#lines[@]}" 4
  run --separate-stderr rlock log 'deploy-[b]' other --json
  assert_success
  assert_equal "$(jq -r .key <<<"$output" | xargs)" "deploy-b deploy-b other other"
  run --separate-stderr rlock log nothing-here
  assert_failure 1
  assert_output ""
  assert_equal "$stderr" "rlock: no history for nothing-here"
  run --separate-stderr rlock log 'zz-*'
  assert_failure 1
  assert_equal "$stderr" "rlock: no history for zz-*"
  # Known and unknown: the known one's events, and exit 1.
  run --separate-stderr rlock log other nothing-here
  assert_failure 1
  assert_equal "${#lines[@]}" 2
  assert_equal "$stderr" "rlock: no history for nothing-here"
  # The prefix's glob characters match only themselves.
  rlock run --prefix 'p*[x]:' deploy-c -- true
  rlock run --prefix 'pz[x]:' deploy-d -- true
  rlock run --prefix 'pzx:' deploy-e -- true
  assert_equal "$(rlock log --prefix 'p*[x]:' 'deploy-*' --json | jq -r .key | sort -u | xargs)" "deploy-c"
  assert_equal "$(rlock log --prefix 'p*[x]:' --json | jq -r .key | sort -u | xargs)" "deploy-c"
}

@test "times are UTC with a Z in status, log and the messages, whatever the local zone" {
  redis_start
  export TZ=XYZ+05
  rlock run k -- true
  local hour_utc
  hour_utc=$(date -u +%H)
  [[ $(TZ=XYZ+05 date +%H) != "$hour_utc" ]] || fail "TZ=XYZ+05 is not 5 hours from UTC here"
  # log, and its --json.
  run --separate-stderr rlock log k
  assert_success
  [[ ${lines[0]} =~ ^[0-9-]{10}T([0-9]{2}):[0-9]{2}:[0-9.]{6}Z\  ]] || fail "log: ${lines[0]}"
  [[ ${BASH_REMATCH[1]} == "$hour_utc" || ${BASH_REMATCH[1]} == "$(date -u +%H)" ]] || fail "log is not in UTC: ${lines[0]}"
  [[ $(rlock log k --json | jq -r .time | head -n 1) == *Z ]] || fail "log --json is not in UTC"
  # status: the holder's since.
  bg holder rlock run k -- sleep 30
  wait_until -t 10 lock_held k || fail "the holder did not take k"
  [[ $(rlock status k --json | jq -r .since) =~ T($hour_utc|$(date -u +%H)):.*Z$ ]] || fail "status --json: $(rlock status k --json)"
  # -v's clock.
  run --separate-stderr rlock -v run other -- true
  assert_success
  [[ ${stderr%%$'\n'*} =~ ^rlock:\ ([0-9]{2}):[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\  ]] || fail "-v's clock has no Z: $stderr"
  [[ ${BASH_REMATCH[1]} == "$hour_utc" || ${BASH_REMATCH[1]} == "$(date -u +%H)" ]] || fail "-v's clock is not UTC: $stderr"
  kill "$holder_pid"
  bg_wait holder 10
  # The message of a lingering lock: when it is free again.
  rlock run m --min-hold 1h -- true
  run --separate-stderr rlock run m -n -- true
  assert_failure 75
  [[ $stderr =~ until\ [0-9-]{10}T[0-9:]{8}Z ]] || fail "the lingering message: $stderr"
}

@test "status KEY of a free lock shows its last run from the summary; a held or unused one does not" {
  redis_start
  rlock run k -- sh -c 'sleep 0.2; exit 3' || true
  run --separate-stderr rlock status k
  assert_failure 1
  assert_equal "${#lines[@]}" 3
  [[ ${lines[2]} =~ ^k\ last:\ released\ [0-9-]{10}T[0-9:.]{12}Z\ by\ $(uname -n)\ after\ [0-9]+ms,\ exit\ 3$ ]] ||
    fail "status k: $output"
  run --separate-stderr rlock status k --json
  assert_failure 1
  jq -e '.last | .event == "released" and .exit == 3 and .outcome == "failed" and .held_ms >= 200
    and (.time | endswith("Z")) and .host != null' <<<"$output" >/dev/null || fail "status --json: $output"
  # Why rlock ended it, in log's words.
  rlock run m --max-hold 200ms -- sleep 5 2>/dev/null || true
  [[ $(rlock status m | tail -n 1) == "m last: released "*" (stopped at --max-hold)" ]] || fail "status m: $(rlock status m)"
  # Held: the holder, not the last run; never used: nothing more than the row.
  bg holder rlock run k -- sleep 30
  wait_until -t 10 lock_held k || fail "the holder did not take k"
  run --separate-stderr rlock status k
  assert_success
  assert_equal "${#lines[@]}" 2
  assert_equal "$(rlock status k --json | jq -c .last)" null
  kill "$holder_pid"
  bg_wait holder 10
  run --separate-stderr rlock status unused
  assert_failure 1
  assert_equal "${#lines[@]}" 2
  assert_equal "$(rlock status unused --json | jq -c .last)" null
}

# commands_since_reset [PORT...]: the calls the servers on PORT... (default: the test server)
# counted since CONFIG RESETSTAT, by command ("xread=3 scan=2"), without the test's own CONFIG,
# INFO and CLIENT.
commands_since_reset() {
  local p
  for p in "${@:-$REDIS_PORT}"; do
    srv_cli "$p" info commandstats | tr -d '\r'
  done | awk -F'[:=,]' '/^cmdstat_/ && $1 !~ /^cmdstat_(config|info|client)([|]|$)/ { sub("cmdstat_", "", $1); n[$1] += $3 }
    END { for (c in n) printf "%s=%s ", c, n[c] }'
}

# xreads_blocked N [PORT...]: whether N clients of the servers on PORT... (default: the test
# server) wait in a blocking XREAD, no more, no less.
xreads_blocked() {
  local want=$1 p
  shift
  [[ $(for p in "${@:-$REDIS_PORT}"; do srv_cli "$p" client list; done |
    awk '/ flags=[A-Za-z]*b[A-Za-z]* / && / cmd=xread / { n++ } END { print n + 0 }') == "$want" ]]
}

@test "log --follow blocks on the server (XREAD BLOCK) instead of polling each key" {
  redis_start
  local k
  for k in $(seq 1 12); do rlock run "key-$k" -- true; done
  bg follow rlock log -f 'key-*'
  wait_until -t 10 eval '(($(grep -c released "$T/follow.out") >= 12))' || fail "--follow did not print the history: $(bg_err follow)"
  # One XREAD BLOCK over the 12 keys, on the server.
  wait_until -t 10 xreads_blocked 1 || fail "the follower does not block in XREAD: $(rcli client list)"
  rcli config resetstat >/dev/null
  # Idle for 1.5s, more than a poll of each key once a second would leave out.
  sleep 1.5
  local counted total
  counted=$(commands_since_reset)
  total=$(tr ' ' '\n' <<<"$counted" | awk -F= '{ s += $2 } END { print s + 0 }')
  # A few: an XREAD again and a SCAN at each rescan of the pattern (every 2s), never a read of
  # each key (12 keys polled 4 times a second would make 72 commands).
  ((total <= 10)) || fail "an idle follower of 12 keys ran $total commands in 1.5s: $counted"
  [[ $counted != *xrange* && $counted != *xrevrange* ]] || fail "the follower polls: $counted"
  wait_until -t 10 xreads_blocked 1 || fail "the follower no longer blocks in XREAD: $(rcli client list)"
  # An event is shown at once, and a history created after -f started within the rescan time.
  rlock run key-7 -- echo seven
  wait_until -t 5 grep -q 'echo seven' "$T/follow.out" || fail "the new event of key-7 was not shown"
  rlock run key-new -- echo new
  wait_until -t 8 grep -q 'key-new released' "$T/follow.out" || fail "the new history key-new was not picked up: $(bg_out follow)"
  rlock run no-match -- true
  kill -TERM "$follow_pid"
  bg_wait follow 10
  [[ $(bg_out follow) != *no-match* ]] || fail "--follow 'key-*' showed another key"
  assert_equal "$(bg_err follow)" ""
}

@test "log --follow on a KEY without a history yet waits for its first events" {
  redis_start
  bg follow rlock log -f later
  sleep 0.5
  ! bg_done follow || fail "--follow on a KEY without history ended: $(bg_err follow)"
  rlock run later -- true
  wait_until -t 10 grep -q 'released' "$T/follow.out" || fail "the first events were not shown: $(bg_err follow)"
  kill -TERM "$follow_pid"
  bg_wait follow 10
}

@test "log --follow goes on across a Redis restart, from the last event seen, and says so once" {
  redis_start
  rlock run k -- echo before
  bg follow rlock log -f k
  wait_until -t 10 grep -q 'echo before' "$T/follow.out" || fail "--follow did not print the history: $(bg_err follow)"
  redis_restart
  # Said when it is back, not after the next blocking read (10s).
  wait_until -t 8 grep -q reconnected "$T/follow.err" || fail "no word of the reconnection: $(bg_err follow)"
  rlock run k -- echo after
  wait_until -t 20 grep -q 'echo after' "$T/follow.out" || fail "--follow did not follow across the restart: $(bg_err follow)"
  ! bg_done follow || fail "--follow ended: $(bg_err follow)"
  rlock run k -- echo again
  wait_until -t 10 grep -q 'echo again' "$T/follow.out" || fail "--follow stopped after the restart"
  kill -TERM "$follow_pid"
  bg_wait follow 10
  assert_equal "$(grep -c 'reconnected to redis://127.0.0.1:' "$T/follow.err")" 1
  assert_equal "$(grep -c 'rlock: warning: ' "$T/follow.err")" 1
  assert_equal "$(wc -l <"$T/follow.err")" 2
  assert_equal "$(awk '{ print $2 }' "$T/follow.out" | xargs)" "acquired released acquired released acquired released"
  assert_equal "$(grep -c 'echo before' "$T/follow.out")" 2
}

@test "Sentinel: the same log through the sentinels" {
  srv_cli "$MASTER_PORT" flushall >/dev/null
  export RLOCK_URL=$SENTINEL_URL
  rlock run k -- true
  run --separate-stderr rlock run k -- sh -c 'exit 2'
  assert_failure 2
  local tok
  tok=$(rlock acquire k) || fail "acquire failed"
  run --separate-stderr rlock run k -n -- true
  assert_failure 75
  RLOCK_TOKEN=$tok rlock release k
  assert_equal "$(event_kinds k)" "acquired released acquired released acquired busy released"
  assert_equal "$(rlock log k --json | jq -r .exit | xargs)" "null 0 null 2 null null null"
  # It is the master's stream, and the replica has it too.
  assert_equal "$(srv_cli "$MASTER_PORT" xlen "$(log_key k)" | tr -d '\r')" 7
  wait_until -t 5 eval '[[ $(srv_cli "$REPLICA_PORT" xlen "$(log_key k)" | tr -d "\r") == 7 ]]' ||
    fail "the replica does not have the log"
  assert_equal "$(rlock log k -u "redis://127.0.0.1:$MASTER_PORT")" "$(rlock log k)"
}

@test "Cluster: the same log through any node, and merged over the masters" {
  cluster_wait
  cluster_flush
  read -r P1 P2 P3 <<<"$CLUSTER_PORTS"
  local k
  for k in alpha bravo charlie delta echo foxtrot; do
    rlock run "$k" -u "redis://127.0.0.1:$P1" -- true
  done
  # The log of a key lives with its lock (same hash slot).
  [[ $(cluster_port_of "$(log_key alpha)") == $(cluster_port_of "$(lock_key alpha)") ]] ||
    fail "the log of alpha is not on its lock's node"
  local a b c
  a=$(rlock log alpha -u "redis://127.0.0.1:$P1")
  b=$(rlock log alpha -u "redis://127.0.0.1:$P2")
  c=$(rlock log alpha -u "redis://127.0.0.1:$P3")
  assert_equal "$(awk '{ print $2 }' <<<"$a" | xargs)" "acquired released"
  assert_equal "$b" "$a"
  assert_equal "$c" "$a"
  # Without KEY: every master's streams, merged by time.
  run --separate-stderr rlock log --json -u "redis://127.0.0.1:$P2"
  assert_success
  assert_equal "$(jq -r .key <<<"$output" | uniq | xargs)" "alpha bravo charlie delta echo foxtrot"
  local nodes
  nodes=$(for k in alpha bravo charlie delta echo foxtrot; do cluster_port_of "$(log_key "$k")"; done | sort -u | wc -l)
  ((nodes >= 2)) || fail "the six logs are all on one master: the merge is not tested"
}

@test "Cluster: log --follow over keys in several slots, and over one key" {
  cluster_wait
  cluster_flush
  read -r P1 P2 P3 <<<"$CLUSTER_PORTS"
  export RLOCK_URL="redis://127.0.0.1:$P1"
  local k
  for k in alpha bravo charlie; do rlock run "$k" -- true; done
  bg all rlock log -f
  bg one rlock log -f bravo
  wait_until -t 10 eval '(($(grep -c released "$T/all.out") >= 3))' || fail "-f did not print the history: $(bg_err all)"
  wait_until -t 10 grep -q released "$T/one.out" || fail "-f bravo did not print the history: $(bg_err one)"
  # Idle: one XREAD BLOCK per slot, on the node that serves it (alpha, bravo and charlie for -f,
  # bravo for -f bravo), and a SCAN of each master every 2s; no key read in turn (each key once
  # a second made 3 XRANGE in 1.5s).
  local slots
  slots=$(for k in alpha bravo charlie; do ccli cluster keyslot "$k"; done | sort -u | wc -l)
  assert_equal "$slots" 3
  wait_until -t 10 xreads_blocked 4 $P1 $P2 $P3 || fail "not one blocking XREAD per slot: $(for k in $P1 $P2 $P3; do srv_cli "$k" client list; done)"
  local p counted
  for p in $P1 $P2 $P3; do srv_cli "$p" config resetstat >/dev/null; done
  sleep 1.5
  counted=$(commands_since_reset $P1 $P2 $P3)
  [[ $counted != *xrange* ]] || fail "the follower reads each key in turn: $counted"
  wait_until -t 10 xreads_blocked 4 $P1 $P2 $P3 || fail "the followers no longer block in XREAD"
  for k in alpha bravo charlie delta; do rlock run "$k" -- echo "new $k"; done
  for k in alpha bravo charlie delta; do
    wait_until -t 10 grep -q "new $k" "$T/all.out" || fail "-f did not show the new event of $k: $(bg_out all) $(bg_err all)"
  done
  wait_until -t 10 grep -q "new bravo" "$T/one.out" || fail "-f bravo did not show its new event"
  kill -TERM "$all_pid" "$one_pid"
  bg_wait all 10
  bg_wait one 10
  assert_equal "$(bg_err all)" ""
  assert_equal "$(bg_err one)" ""
  assert_equal "$(awk '{ print $2 }' "$T/one.out" | sort -u | xargs)" "acquired released"
}

