#!/usr/bin/env bats
# run --once-per: a job runs exactly once per tick across hosts whose cron fires apart, however
# long it runs (shorter than the hosts' spread, or longer), whatever their clocks say, and when
# the first host to take a tick fails before its command starts.
#
# "Hosts" are processes in their own UTS namespace (unshare --uts, as root) with their own host
# name, so rlock records them as different machines; a host whose clock is off runs under
# faketime (its wall clock only: FAKETIME_DONT_FAKE_MONOTONIC). The jobs witness themselves: each
# appends "start MS LABEL HOST" to $W when it starts, MS from the real clock.

load helpers/common

# Period 6s: 4 hosts fire 0.5s apart, 1.5s in all: one tick while their starts are held up by up
# to 1.5s (half the period, less the spread). That the tick after one that ran runs, once:
# tests/protocol/tick_test.cpp (TheTickThatRanIsRefusedToItsRunsAndToEarlierTicks,
# TicksAreHalfAPeriodAroundTheTickThatLastRan).
PERIOD_MS=6000
SPREAD_MS=500

setup() {
  common_setup
  export W=$T/witness
  : >"$W"
  cat >"$T/job.sh" <<'JOB'
#!/bin/sh
echo "start $(env -u LD_PRELOAD -u FAKETIME date +%s%3N) $1 $(hostname)" >>"$W"
sleep "$2"
JOB
  chmod +x "$T/job.sh"
  cat >"$T/on_host" <<'ON_HOST'
#!/bin/sh
exec unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "$@"
ON_HOST
  chmod +x "$T/on_host"
  # clock_off SECONDS COMMAND...: COMMAND with its wall clock SECONDS ahead (or behind: -S).
  cat >"$T/clock_off" <<'CLOCK_OFF'
#!/bin/sh
offset=$1
shift
FAKETIME_DONT_FAKE_MONOTONIC=1 exec faketime -f "$offset" "$@"
CLOCK_OFF
  chmod +x "$T/clock_off"
}

# faketime_works: skips unless faketime shifts the wall clock of a command here.
faketime_works() {
  command -v faketime >/dev/null || skip "no faketime"
  local real fake
  real=$(date +%s)
  fake=$("$T/clock_off" +100s date +%s) || skip "faketime does not run here"
  ((fake - real >= 90)) || skip "faketime does not shift the clock here"
}

teardown() {
  common_teardown
}

# sleep_until MS: sleeps until the wall clock reads MS (a now_ms value); at once if it has.
sleep_until() {
  local left=$(($1 - $(now_ms)))
  ((left > 0)) && sleep "$(awk -v m="$left" 'BEGIN { printf "%.3f", m / 1000 }')"
  return 0
}

@test "once-per: 4 hosts firing 0.5s apart, one with its clock 4s ahead, run a short job, and a job longer than their spread, once in the tick" {
  unshare --uts sh -c 'hostname rlock-probe && [ "$(hostname)" = rlock-probe ]' 2>/dev/null ||
    skip "unshare --uts does not work here (needs root): the test needs distinct host names"
  faketime_works
  redis_start
  # The first tick: a little ahead (ticks are counted from the one that last ran, not from the
  # epoch). Host h3's clock is 4s ahead, two thirds of the period (a clock 40s off under a job run
  # each minute): a tick taken from its own clock would be the next one.
  local t1 i key clock
  t1=$(($(now_ms) + 100))
  for i in 0 1 2 3; do
    sleep_until $((t1 + i * SPREAD_MS))
    clock=()
    [[ $i == 3 ]] && clock=("$T/clock_off" +4s)
    # short: 0.3s, over before the next host fires (on a quiet machine); long: 2s, half a second
    # past the last host (1.5s) and within the period.
    bg "short_h$i" "${clock[@]}" "$T/on_host" "h$i" rlock run short -n --once-per 6s -- "$T/job.sh" short 0.3
    bg "long_h$i" "${clock[@]}" "$T/on_host" "h$i" rlock run long -n --once-per 6s -- "$T/job.sh" long 2
  done
  local ran codes host
  for key in short long; do
    codes=()
    for i in 0 1 2 3; do
      bg_wait "${key}_h$i" 20
      codes+=("$BG_STATUS")
    done
    # The jobs' own lines: exactly one start.
    ran=$(awk -v l="$key" '$1 == "start" && $3 == l' "$W")
    [[ $(wc -l <<<"$ran") == 1 && -n $ran ]] || fail "$key: the job ran $(grep -c " $key " "$W") times: $(cat "$W")"
    host=$(awk '{ print $4 }' <<<"$ran")
    assert_equal "$(printf '%s\n' "${codes[@]}" | sort | xargs)" "0 75 75 75"
    # The others exit 75, quietly (the usual end under cron: no mail). A short job held up past
    # the next host's start (a loaded machine) is still running then: that host is told who holds
    # it.
    for i in 0 1 2 3; do
      [[ $i == "${host#h}" ]] && continue
      [[ ! -s $T/${key}_h$i.err ]] ||
        { [[ $key == short ]] && grep -q "^rlock: short is held by $host pid " "$T/${key}_h$i.err" &&
          [[ $(wc -l <"$T/${key}_h$i.err") == 1 ]]; } ||
        fail "$key, h$i: stderr is not quiet: $(bg_err "${key}_h$i")"
    done
  done
  # All four fired inside the tick's half period: the test means something only then.
  local first last
  first=$(awk '$1 == "start" { print $2 }' "$W" | sort -n | head -1)
  ((first - t1 < PERIOD_MS / 2)) || fail "the first job started $((first - t1))ms after its tick: too slow a machine"
  # The history: one acquisition and three refusals that say the tick was done.
  run --separate-stderr rlock log long --json
  assert_success
  assert_equal "$(jq -r 'select(.event == "acquired") | .host' <<<"$output" | wc -l)" 1
  assert_equal "$(jq -r 'select(.event == "busy" and .tick != null) | .host' <<<"$output" | wc -l)" 3
  # The tick's story: the run that took it and ended, the three that were refused.
  run --separate-stderr rlock log long --json --tick "$(date -u -d "@$((t1 / 1000))" +%FT%TZ)"
  assert_success
  assert_equal "$(jq -r .event <<<"$output" | sort | uniq -c | awk '{ print $2 $1 }' | xargs)" "acquired1 busy3 released1"
}

@test "once-per: a run that waits for a job longer than the period runs its own tick after it, once" {
  redis_start
  # A run of an earlier tick holds the lock (an acquire hold, as a long job would). The period is
  # a day, so that the runs of the test fall in one tick.
  local tok
  tok=$(rlock acquire k --ttl 30s) || fail "could not take k"
  bg w1 rlock run k --wait 20s --once-per 1d -- "$T/job.sh" w1 0
  bg w2 rlock run k --wait 20s --once-per 1d -- "$T/job.sh" w2 0
  wait_until -t 10 sh -c "rlock status k --json | jq -e '.queue_length == 2' >/dev/null" ||
    fail "the two runs do not wait: $(rlock status k --json)"
  RLOCK_TOKEN=$tok rlock release k
  bg_wait w1 10
  local c1=$BG_STATUS
  bg_wait w2 10
  local c2=$BG_STATUS
  assert_equal "$(printf '%s\n' "$c1" "$c2" | sort | xargs)" "0 75"
  assert_equal "$(grep -c '^start ' "$W")" 1
  run rlock log k --json
  assert_equal "$(jq -r 'select(.event == "busy" and .by != null) | .by' <<<"$output")" "$(hostname)"
}

@test "once-per: a run given back before its command started leaves the tick to the next run" {
  redis_start
  # --wait-replicas 1 on a server without replicas: the lock is taken, then given back (69). The
  # period is a day, so that the runs of the test fall in one tick.
  run --separate-stderr rlock run k -n --once-per 1d --wait-replicas 1 --wait-timeout 100ms -- "$T/job.sh" first 0
  assert_failure 69
  run --separate-stderr rlock run k -n --once-per 1d -- "$T/job.sh" second 0
  assert_success
  run --separate-stderr rlock -v run k -n --once-per 1d -- "$T/job.sh" third 0
  assert_failure 75
  [[ $stderr =~ "the tick of "[0-9-]+T[0-9:]+"Z already ran on $(hostname) at "[0-9-]+T[0-9:.]+Z ]] ||
    fail "with -v, it names the tick, the host that ran it and when: $stderr"
  assert_equal "$(awk '{ print $3 }' "$W" | xargs)" "second"
}

@test "once-per: a host that fires while the tick's first taker has not started waits, and runs the tick when that taker gives up" {
  redis_start
  # A takes the lock for the tick with --wait-replicas 1 on a server without replicas: it waits
  # 1.5s for them, then gives the lock back (69). B fires meanwhile, for the same tick, willing to
  # wait: it queues while A still holds the tick pending (a start of rlock and one call, a few
  # hundred ms on a loaded machine), and runs the tick.
  bg a rlock run k -n --once-per 1d --wait-replicas 1 --wait-timeout 1500ms -- "$T/job.sh" a 0
  wait_until lock_held k || fail "A did not take the lock: $(bg_err a)"
  run rlock status k --json
  assert_equal "$(jq -r '.holders[0].tick_state' <<<"$output")" pending
  bg b rlock run k -w 30s --once-per 1d -- "$T/job.sh" b 0
  local queued=0
  wait_until -t 2 eval '{ [[ $(rcli zcard "$(lock_key k):q") == 1 ]] && queued=1; } || bg_done a'
  ((queued)) || fail "B did not queue while A held the tick pending: $(bg_err b)"
  bg_wait a 20
  assert_equal "$BG_STATUS" 69
  bg_wait b 20
  assert_equal "$BG_STATUS" 0
  assert_equal "$(awk '{ print $3 }' "$W" | xargs)" "b"
  run rlock run k -n --once-per 1d -- "$T/job.sh" c 0
  assert_failure 75
  assert_equal "$(awk '{ print $3 }' "$W" | xargs)" "b"
}

# A taker killed between its grant and its start leaves the tick to a run of that tick waiting
# behind it once its lease lapses: tests/protocol/tick_test.cpp
# (AWaiterOfTheSameTickIsServedOnceAPendingHoldersLeaseLapses).

# Hosts of a daily job that fire seconds apart on either side of the day's boundary run it once:
# the tick comes from when each fired by the server's clock (the run sends how long ago it fired,
# never its wall clock), so tests/protocol/tick_test.cpp proves it
# (ADailyJobWhoseHostsFireSecondsApartRunsOnceWhereverTheEpochIs).

@test "once-per: a tick skipped because the run of the tick before still holds the lock is an overrun" {
  redis_start
  # The shortest period (1s): the next run fires a period later, in the next tick.
  bg long rlock run k -n --once-per 1s -- "$T/job.sh" long 5
  wait_until grep -q ' long ' "$W" || fail "the long job did not start: $(bg_err long)"
  nap 1.1
  run --separate-stderr rlock run k -n --once-per 1s -- "$T/job.sh" next 0
  assert_failure 75
  [[ $stderr == *"k is still held by the run of the tick of "*"this tick is skipped (overrun)"* ]] ||
    fail "stderr: $stderr"
  run rlock log k --json
  assert_equal "$(jq -r 'select(.event == "overrun") | .holder.host' <<<"$output")" "$(hostname)"
  # Shown: the long job need not run its 5s out.
  kill -TERM "$long_pid"
  bg_wait long 20
}

@test "once-per: not with --shared or --limit, and the period needs a unit" {
  run --separate-stderr rlock run k --once-per 5m --limit 2 -- true
  assert_usage_error
  run --separate-stderr rlock run k --once-per 5m -s -- true
  assert_usage_error
  run --separate-stderr rlock run k --once-per 5 -- true
  assert_usage_error
  [[ $stderr == *"--once-per: '5' needs a unit: 5s, 5m, 5h or 5d"* ]] || fail "stderr: $stderr"
}
