#!/usr/bin/env bats
# run --once-per: a job runs exactly once per tick across hosts whose cron fires apart, however
# long it runs (shorter than the hosts' spread, or longer).
#
# "Hosts" are processes in their own UTS namespace (unshare --uts, as root) with their own host
# name, so rlock records them as different machines. The jobs witness themselves: each appends
# "start MS LABEL HOST" to $W when it starts.

load helpers/common

# Period 6s: 4 hosts fire 0.5s apart at each of 3 ticks, 1.5s in all: each host rounds its
# clock to the tick even when its start is held up by up to 1.5s (half the period, less the spread).
PERIOD_MS=6000
SPREAD_MS=500

setup() {
  common_setup
  export W=$T/witness
  : >"$W"
  cat >"$T/job.sh" <<'JOB'
#!/bin/sh
echo "start $(date +%s%3N) $1 $(hostname)" >>"$W"
sleep "$2"
JOB
  chmod +x "$T/job.sh"
  cat >"$T/on_host" <<'ON_HOST'
#!/bin/sh
exec unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "$@"
ON_HOST
  chmod +x "$T/on_host"
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

@test "once-per: 4 hosts firing 0.5s apart over 3 ticks run a short job, and a job longer than their spread, once per tick" {
  unshare --uts sh -c 'hostname rlock-probe && [ "$(hostname)" = rlock-probe ]' 2>/dev/null ||
    skip "unshare --uts does not work here (needs root): the test needs distinct host names"
  redis_start
  # The first tick: the next multiple of the period, a little ahead (rlock rounds to it).
  local now t1 tick i key
  now=$(now_ms)
  t1=$(((now + 500 + PERIOD_MS - 1) / PERIOD_MS * PERIOD_MS))
  for tick in 1 2 3; do
    for i in 0 1 2 3; do
      sleep_until $((t1 + (tick - 1) * PERIOD_MS + i * SPREAD_MS))
      # short: 0.3s, over before the next host fires (on a quiet machine); long: 3.5s, past the
      # last host (1.5s) but within the period.
      bg "short${tick}_h$i" "$T/on_host" "h$i" rlock run short -n --once-per 6s -- "$T/job.sh" "short$tick" 0.3
      bg "long${tick}_h$i" "$T/on_host" "h$i" rlock run long -n --once-per 6s -- "$T/job.sh" "long$tick" 3.5
    done
  done
  local ran codes host
  for key in short long; do
    for tick in 1 2 3; do
      codes=()
      for i in 0 1 2 3; do
        bg_wait "${key}${tick}_h$i" 20
        codes+=("$BG_STATUS")
      done
      # The jobs' own lines: exactly one start per tick.
      ran=$(awk -v l="$key$tick" '$1 == "start" && $3 == l' "$W")
      [[ $(wc -l <<<"$ran") == 1 && -n $ran ]] || fail "$key, tick $tick: the job ran $(grep -c " $key$tick " "$W") times: $(cat "$W")"
      host=$(awk '{ print $4 }' <<<"$ran")
      assert_equal "$(printf '%s\n' "${codes[@]}" | sort | xargs)" "0 75 75 75"
      # The others exit 75 naming the host that ran it, and when (UTC, with its Z). A short job held
      # up past the next host's start (a loaded machine) is still running then: that host is told
      # who holds it instead.
      for i in 0 1 2 3; do
        [[ $i == "${host#h}" ]] && continue
        grep -qE "already ran on $host at [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z" "$T/${key}${tick}_h$i.err" ||
          { [[ $key == short ]] && grep -q "^rlock: short is held by $host pid " "$T/${key}${tick}_h$i.err"; } ||
          fail "$key, tick $tick, h$i: stderr does not name $host and when: $(bg_err "${key}${tick}_h$i")"
        [[ $(wc -l <"$T/${key}${tick}_h$i.err") == 1 ]] || fail "not one line: $(bg_err "${key}${tick}_h$i")"
      done
    done
  done
  # All four fired inside each tick's half period: the test means something only then.
  local first last
  first=$(awk '$1 == "start" { print $2 }' "$W" | sort -n | head -1)
  ((first - t1 < PERIOD_MS / 2)) || fail "the first job started $((first - t1))ms after its tick: too slow a machine"
  # The history: one acquisition and three refusals that say the tick was done, per tick.
  run --separate-stderr rlock log long --json
  assert_success
  assert_equal "$(jq -r 'select(.event == "acquired") | .host' <<<"$output" | wc -l)" 3
  assert_equal "$(jq -r 'select(.event == "busy" and .tick != null) | .host' <<<"$output" | wc -l)" 9
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
  cat "$T/w1.err" "$T/w2.err" | grep -q 'already ran on ' || fail "no run says the tick was run: $(bg_err w1) $(bg_err w2)"
}

@test "once-per: a run given back before its command started leaves the tick to the next run" {
  redis_start
  # --wait-replicas 1 on a server without replicas: the lock is taken, then given back (69). The
  # period is a day, so that the runs of the test fall in one tick.
  run --separate-stderr rlock run k -n --once-per 1d --wait-replicas 1 --wait-timeout 100ms -- "$T/job.sh" first 0
  assert_failure 69
  run --separate-stderr rlock run k -n --once-per 1d -- "$T/job.sh" second 0
  assert_success
  run --separate-stderr rlock run k -n --once-per 1d -- "$T/job.sh" third 0
  assert_failure 75
  [[ $stderr == *"already ran on $(hostname) at "* ]] || fail "stderr: $stderr"
  assert_equal "$(awk '{ print $3 }' "$W" | xargs)" "second"
}

@test "once-per: not with --shared or --limit" {
  run --separate-stderr rlock run k --once-per 5m --limit 2 -- true
  assert_usage_error
  run --separate-stderr rlock run k --once-per 5m -s -- true
  assert_usage_error
}
