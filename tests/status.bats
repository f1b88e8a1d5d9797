#!/usr/bin/env bats
# rlock status and rlock list: who holds a lock, for people and for programs; never a token.

load helpers/common

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# hold KEY: a background `rlock run KEY` by user rlocktester whose child sleeps until the test
# ends; its fence is 41001 (the counter is set first). Sets holder_pid.
hold() {
  rcli set "$(lock_key "$1"):fence" 41000 >/dev/null
  USER=rlocktester bg holder rlock run "$1" -- sh -c 'touch "$0"; exec sleep 100' "$T/started"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
}

@test "status of a held lock exits 0 and shows host, pid, user, command, fence and TTL" {
  hold k
  local token
  token=$(rcli get "$(lock_key k)")
  run --separate-stderr rlock status k
  assert_success
  assert_output --partial "$(uname -n)"
  assert_output --partial "$holder_pid"
  assert_output --partial rlocktester
  assert_output --partial "sleep 100"
  assert_output --partial 41001
  [[ ${output,,} == *ttl* ]] || fail "no TTL shown: $output"
  refute_output --partial "$token"
  [[ $stderr != *"$token"* ]] || fail "the token is on stderr"
}

@test "status of a free lock exits 1" {
  run rlock status k
  assert_failure 1
  # Free after being held, too.
  acquire_token k
  RLOCK_TOKEN=$TOKEN run rlock release k
  run rlock status k
  assert_failure 1
}

@test "status of several keys exits 1 when one is free and 0 when all are held" {
  acquire_token a
  acquire_token b
  run rlock status a b
  assert_success
  run rlock status a b c
  assert_failure 1
}

@test "status --json of a held lock follows the schema" {
  require_jq
  hold k
  local token
  token=$(rcli get "$(lock_key k)")
  run --separate-stderr rlock status k --json
  assert_success
  jq -e . <<<"$output" >/dev/null || fail "not JSON: $output"
  jq -e '
    type == "object"
    and (.key | type) == "string" and .key == "k"
    and .held == true
    and (.host | type) == "string"
    and (.pid | type) == "number"
    and (.user | type) == "string"
    and (.command | type) == "string"
    and (.since | type) == "string"
    and (.ttl_ms | type) == "number"
    and (.fence | type) == "number"
  ' <<<"$output" >/dev/null || fail "does not follow the schema: $output"
  assert_equal "$(jq -r .host <<<"$output")" "$(uname -n)"
  assert_equal "$(jq -r .pid <<<"$output")" "$holder_pid"
  assert_equal "$(jq -r .user <<<"$output")" rlocktester
  assert_equal "$(jq -r .fence <<<"$output")" 41001
  [[ $(jq -r .command <<<"$output") == *"sleep 100"* ]] || fail "command: $(jq -r .command <<<"$output")"
  local ttl
  ttl=$(jq -r .ttl_ms <<<"$output")
  ((ttl > 0 && ttl <= 30000)) || fail "ttl_ms $ttl"
  [[ -n $(jq -r .since <<<"$output") ]] || fail "empty since"
  refute_output --partial "$token"
  assert_equal "$(jq -r 'has("token")' <<<"$output")" false
}

@test "status names the CI job of the holder and of each waiter, and only in a CI" {
  require_jq
  GITHUB_SERVER_URL=https://github.example GITHUB_REPOSITORY=team/app GITHUB_RUN_ID=42 hold k
  CI_JOB_URL=$'https://gitlab.example/team/app/-/jobs/7\e[31m' bg waiter rlock run k -w 60s -- true
  wait_until eval '[[ $(rlock status k --json | jq -r .queue_length) == 1 ]]' || fail "no waiter: $(bg_err waiter)"
  run --separate-stderr rlock status k --json
  assert_equal "$(jq -r .job <<<"$output")" https://github.example/team/app/actions/runs/42
  assert_equal "$(jq -r '.holders[0].job' <<<"$output")" https://github.example/team/app/actions/runs/42
  assert_equal "$(jq -r '.waiters[0].job' <<<"$output")" $'https://gitlab.example/team/app/-/jobs/7\e[31m'
  run --separate-stderr rlock status k -v
  assert_output --partial "k held by pid $holder_pid on $(uname -n) in CI job https://github.example/team/app/actions/runs/42"
  [[ $output != *$'\e'* ]] || fail "an escape reached the terminal: $output"
  # Outside a CI: no job.
  rcli del "$(lock_key k)" >/dev/null
  run rlock acquire k2
  assert_success
  run --separate-stderr rlock status k2 --json
  assert_equal "$(jq -r .job <<<"$output")" null
}

@test "--note is kept with the hold and the wait: status and log show it, escapes and all made harmless" {
  require_jq
  bg holder rlock run k --note $'release 1.2 \e[31mred' -- sh -c 'touch "$0"; exec sleep 100' "$T/started"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  bg waiter rlock run k -w 60s --note "$(printf 'x%.0s' {1..300})" -- true
  wait_until eval '[[ $(rlock status k --json | jq -r .queue_length) == 1 ]]' || fail "no waiter: $(bg_err waiter)"
  run --separate-stderr rlock status k --json
  assert_equal "$(jq -r .note <<<"$output")" $'release 1.2 \e[31mred'
  assert_equal "$(jq -r '.waiters[0].note | length' <<<"$output")" 200
  run --separate-stderr rlock status k -v
  assert_output --partial "k held by pid"
  assert_output --partial "release 1.2"
  [[ $output != *$'\e'* ]] || fail "an escape reached the terminal: $output"
  run --separate-stderr rlock log k
  assert_output --partial "[release 1.2"
  [[ $output != *$'\e'* ]] || fail "an escape reached the terminal: $output"
  run --separate-stderr rlock log k --json
  assert_equal "$(jq -rs '.[0].note' <<<"$output")" $'release 1.2 \e[31mred'
}

@test "status --json of a free lock says held false and exits 1" {
  require_jq
  run --separate-stderr rlock status k --json
  assert_failure 1
  assert_equal "$(jq -r .key <<<"$output")" k
  assert_equal "$(jq -r .held <<<"$output")" false
}

@test "status --json of several keys is an array" {
  require_jq
  acquire_token a
  run --separate-stderr rlock status a b --json
  assert_failure 1
  assert_equal "$(jq -r 'type' <<<"$output")" array
  assert_equal "$(jq -r 'length' <<<"$output")" 2
  assert_equal "$(jq -r '[.[] | .key + "=" + (.held | tostring)] | join(" ")' <<<"$output")" "a=true b=false"
}

@test "status without a key shows every held lock" {
  acquire_token first-lock
  acquire_token second-lock
  run rlock status
  assert_success
  assert_output --partial first-lock
  assert_output --partial second-lock
}

@test "list shows the held locks, not released ones nor the fence and info keys" {
  acquire_token alpha-one
  acquire_token alpha-two
  acquire_token beta-one
  acquire_token gamma-free
  RLOCK_TOKEN=$TOKEN run rlock release gamma-free
  assert_success
  rcli set unrelated-key x >/dev/null
  run --separate-stderr rlock list
  assert_success
  assert_output --partial alpha-one
  assert_output --partial alpha-two
  assert_output --partial beta-one
  refute_output --partial gamma-free
  refute_output --partial unrelated-key
  refute_output --partial ":fence"
  refute_output --partial ":info"
}

@test "list with a pattern shows only the matching locks" {
  acquire_token alpha-one
  acquire_token alpha-two
  acquire_token beta-one
  run rlock list 'alpha-*'
  assert_success
  assert_output --partial alpha-one
  assert_output --partial alpha-two
  refute_output --partial beta-one
  run rlock list 'nothing-*'
  assert_success
  refute_output --partial alpha
}

@test "list --json is an array of the held locks" {
  require_jq
  acquire_token alpha-one
  acquire_token beta-one
  run --separate-stderr rlock list --json
  assert_success
  assert_equal "$(jq -r type <<<"$output")" array
  assert_equal "$(jq -r '[.[] | if type == "object" then .key else . end] | sort | join(" ")' <<<"$output")" \
    "alpha-one beta-one"
  run --separate-stderr rlock list 'beta*' --json
  assert_success
  assert_equal "$(jq -r '[.[] | if type == "object" then .key else . end] | join(" ")' <<<"$output")" beta-one
  run --separate-stderr rlock list 'none*' --json
  assert_success
  assert_equal "$(jq -r 'length' <<<"$output")" 0
}

@test "list and status never print a token" {
  hold k
  acquire_token other
  local t1 t2
  t1=$(rcli get "$(lock_key k)")
  t2=$(rcli get "$(lock_key other)")
  local cmd
  for cmd in "list" "list --json" "status" "status --json" "status k other"; do
    # shellcheck disable=SC2086
    run rlock $cmd
    refute_output --partial "$t1"
    refute_output --partial "$t2"
  done
}

@test "list and status use the prefix" {
  run rlock acquire mine --prefix team-a:
  acquire_token theirs
  run rlock list --prefix team-a:
  assert_success
  assert_output --partial mine
  refute_output --partial theirs
  run rlock status mine --prefix team-a:
  assert_success
  run rlock status mine
  assert_failure 1
}

@test "list finds locks among many keys (SCAN over several pages)" {
  local i
  for i in $(seq 1 300); do echo "SET filler:$i x"; done | rcli >/dev/null
  acquire_token needle
  run rlock list
  assert_success
  assert_output --partial needle
}
