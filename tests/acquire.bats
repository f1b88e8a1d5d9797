#!/usr/bin/env bats
# rlock acquire, release and extend: tokens between invocations, token files, stale tokens,
# --force, --json and fencing.

load helpers/common

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

# A well-formed token that no acquisition handed out.
OTHER_TOKEN=0123456789abcdef0123456789abcdef

@test "acquire prints a 128-bit token on one line and the lock holds it with the TTL" {
  run --separate-stderr rlock acquire k -t 10s
  assert_success
  assert_equal "${#lines[@]}" 1
  [[ $output =~ $TOKEN_RE ]] || fail "not a token of at least 128 bits: '$output'"
  assert_equal "$(rcli get "$(lock_key k)")" "$output"
  run rcli pttl "$(lock_key k)"
  ((output > 8000 && output <= 10000)) || fail "PTTL $output with -t 10s"
}

@test "acquire uses a 30s TTL by default" {
  acquire_token k
  run rcli pttl "$(lock_key k)"
  ((output > 25000 && output <= 30000)) || fail "PTTL $output, default TTL is 30s"
}

@test "acquire hands out a new token every time" {
  acquire_token k
  local first=$TOKEN
  RLOCK_TOKEN=$first run rlock release k
  assert_success
  acquire_token k
  assert_not_equal "$TOKEN" "$first"
}

@test "acquire of a held lock: -n exits 75, -w times out, -E changes the code" {
  acquire_token k
  local token=$TOKEN
  run --separate-stderr rlock acquire k -n
  assert_failure 75
  assert_equal "$output" ""
  run rlock acquire k -n -E 3
  assert_failure 3
  local t0 took
  t0=$(now_ms)
  run rlock acquire k -w 0.4
  took=$(elapsed_ms "$t0")
  assert_failure 75
  ((took >= 350 && took <= 2500)) || fail "-w 0.4 gave up after ${took}ms"
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
}

# --- token files --------------------------------------------------------------------------------

@test "--token-file writes the token with mode 0600 and prints nothing" {
  run --separate-stderr rlock acquire k --token-file "$T/token"
  assert_success
  assert_equal "$output" ""
  assert_file_exists "$T/token"
  assert_equal "$(stat -c %a "$T/token")" 600
  local token
  token=$(cat "$T/token")
  [[ $token =~ $TOKEN_RE ]] || fail "not a token: '$token'"
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
}

@test "--token-file is 0600 whatever the umask, and replaces an existing file" {
  printf 'old content\n' >"$T/token"
  chmod 0644 "$T/token"
  run bash -c 'umask 000; rlock acquire k --token-file "$1"' _ "$T/token"
  assert_success
  assert_equal "$(stat -c %a "$T/token")" 600
  assert_equal "$(cat "$T/token")" "$(rcli get "$(lock_key k)")"
  # Nothing is left beside it (the temporary file of the atomic write).
  assert_equal "$(ls -A "$T" | grep -c '^token')" 1
}

@test "--token-file refuses a symlink and writes nothing through it" {
  ln -s "$T/target" "$T/link"
  run --separate-stderr rlock acquire k --token-file "$T/link"
  assert_failure
  [[ $status -ne 64 && $status -ne 75 ]] || fail "exit $status: neither a usage error nor busy"
  assert_equal "$output" ""
  [[ $stderr == *"rlock: error: "* ]] || fail "no error message: $stderr"
  assert_file_not_exists "$T/target"
  assert_link_exists "$T/link"
  # No lock is left behind that nobody has the token of.
  assert lock_free k
}

@test "--token-file refuses a symlink to an existing file and leaves it alone" {
  printf 'precious\n' >"$T/target"
  ln -s "$T/target" "$T/link"
  run --separate-stderr rlock acquire k --token-file "$T/link"
  assert_failure
  [[ $status -ne 64 && $status -ne 75 ]] || fail "exit $status: neither a usage error nor busy"
  assert_equal "$(cat "$T/target")" precious
  assert_link_exists "$T/link"
  assert lock_free k
}

@test "--token-file in a directory that does not exist is an error and leaves no lock" {
  run --separate-stderr rlock acquire k --token-file "$T/no/such/dir/token"
  assert_failure
  [[ $status -ne 64 && $status -ne 75 ]] || fail "exit $status: neither a usage error nor busy"
  [[ $stderr == *"rlock: error: "* ]] || fail "no error message: $stderr"
  assert lock_free k
}

@test "acquire with standard output closed and no --token-file is a usage error and takes no lock" {
  run --separate-stderr bash -c 'rlock acquire k >&-'
  assert_failure 64
  [[ $stderr == *"rlock: error: standard output is closed: there is nowhere to print the token (use --token-file F)"* ]] ||
    fail "$stderr"
  assert lock_free k
}

# --- release ------------------------------------------------------------------------------------

@test "release with RLOCK_TOKEN frees the lock" {
  acquire_token k
  RLOCK_TOKEN=$TOKEN run --separate-stderr rlock release k
  assert_success
  assert lock_free k
  assert key_missing "$(lock_key k):info"
}

@test "release with --token-env reads another variable" {
  acquire_token k
  OTHER=$TOKEN RLOCK_TOKEN=$OTHER_TOKEN run rlock release k --token-env OTHER
  assert_success
  assert lock_free k
}

@test "RLOCK_TOKEN_ENV names the variable too" {
  acquire_token k
  MY_TOKEN=$TOKEN RLOCK_TOKEN_ENV=MY_TOKEN run rlock release k
  assert_success
  assert lock_free k
}

@test "release with --token-file frees the lock, and the file wins over the variable" {
  run rlock acquire k --token-file "$T/token"
  assert_success
  assert lock_held k
  RLOCK_TOKEN=$OTHER_TOKEN run rlock release k --token-file "$T/token"
  assert_success
  assert lock_free k
}

@test "release with a wrong token exits 1 and leaves the lock" {
  acquire_token k
  local token=$TOKEN
  RLOCK_TOKEN=$OTHER_TOKEN run rlock release k
  assert_failure 1
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
}

@test "release with a stale token exits 1 and leaves the new holder's lock" {
  acquire_token k
  local old=$TOKEN
  RLOCK_TOKEN=$old run rlock release k
  assert_success
  acquire_token k
  local new=$TOKEN
  RLOCK_TOKEN=$old run rlock release k
  assert_failure 1
  assert_equal "$(rcli get "$(lock_key k)")" "$new"
  RLOCK_TOKEN=$old run rlock extend k
  assert_failure 1
}

@test "release without any token is a usage error and leaves the lock" {
  acquire_token k
  run --separate-stderr rlock release k
  assert_usage_error
  assert lock_held k
}

@test "there is no option to pass a token in argv" {
  acquire_token k
  local token=$TOKEN
  run --separate-stderr rlock release k --token "$token"
  assert_usage_error
  run --separate-stderr rlock extend k --token "$token"
  assert_usage_error
  run --separate-stderr rlock release k "$token"
  assert_usage_error
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
}

@test "a garbled token file is exit 65 and leaves the lock" {
  acquire_token k
  printf 'this is not a token\n' >"$T/garbled"
  run --separate-stderr rlock release k --token-file "$T/garbled"
  assert_error_line 65
  : >"$T/empty"
  run --separate-stderr rlock release k --token-file "$T/empty"
  assert_error_line 65
  head -c 100000 /dev/zero | tr '\0' a >"$T/huge"
  run --separate-stderr rlock release k --token-file "$T/huge"
  assert_error_line 65
  run --separate-stderr rlock extend k --token-file "$T/garbled"
  assert_error_line 65
  assert lock_held k
}

@test "an unreadable token file is exit 65" {
  acquire_token k
  run --separate-stderr rlock release k --token-file "$T/missing"
  assert_error_line 65
  mkdir "$T/a-dir"
  run --separate-stderr rlock release k --token-file "$T/a-dir"
  assert_error_line 65
  run --separate-stderr rlock extend k --token-file "$T/missing"
  assert_error_line 65
  assert lock_held k
}

# --- extend ---------------------------------------------------------------------------------------

@test "extend resets the TTL" {
  acquire_token k -t 3s
  local token=$TOKEN
  run rcli pttl "$(lock_key k)"
  ((output <= 3000)) || fail "PTTL $output"
  RLOCK_TOKEN=$token run rlock extend k -t 20s
  assert_success
  run rcli pttl "$(lock_key k)"
  ((output > 15000 && output <= 20000)) || fail "PTTL $output after extend -t 20s"
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
}

@test "extend with the same TTL makes the PTTL grow again" {
  run rlock acquire k -t 3s --token-file "$T/token"
  # As if 1s had passed.
  rcli pexpire "$(lock_key k)" 2000 >/dev/null
  assert pttl_below "$(lock_key k)" 2001
  run rlock extend k -t 3s --token-file "$T/token"
  assert_success
  run rcli pttl "$(lock_key k)"
  ((output > 2500 && output <= 3000)) || fail "PTTL $output after extend -t 3s"
}

pttl_below() {
  local p
  p=$(rcli pttl "$1")
  ((p >= 0 && p < $2))
}

@test "extend without -t renews for the TTL the lock was taken with" {
  acquire_token k -t 10m
  rcli pexpire "$(lock_key k)" 5000 >/dev/null
  RLOCK_TOKEN=$TOKEN run rlock extend k
  assert_success
  run rcli pttl "$(lock_key k)"
  ((output > 590000 && output <= 600000)) || fail "PTTL $output after extend of a 10m lock"
  acquire_token j -t 3s
  RLOCK_TOKEN=$TOKEN run rlock extend j
  assert_success
  run rcli pttl "$(lock_key j)"
  ((output > 2000 && output <= 3000)) || fail "PTTL $output after extend of a 3s lock"
}

@test "extend with a stale token exits 1 and changes nothing" {
  acquire_token k -t 5s
  RLOCK_TOKEN=$OTHER_TOKEN run rlock extend k -t 60s
  assert_failure 1
  run rcli pttl "$(lock_key k)"
  ((output <= 5000)) || fail "PTTL $output: extended by a stale token"
}

# The token of a lease that ran out neither releases nor extends the lock, and extend does not
# bring it back: tests/protocol/acquire_test.cpp (AnExpiredLeaseNobodyTookIsNeitherExtendedNorReleased,
# ALeaseThatRunsOutFreesTheLockAndItsHolderLosesIt); that release and extend then exit 1: "release
# with a stale token exits 1" above.

# --- release --force ------------------------------------------------------------------------------

@test "release --force removes the lock and prints who held it, never the token" {
  bg holder rlock run k -- sh -c 'touch "$0"; exec sleep 100' "$T/started"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  local token
  token=$(rcli get "$(lock_key k)")
  run rlock release k --force
  assert_success
  assert lock_free k
  assert_output --partial "$(uname -n)"
  assert_output --partial "$holder_pid"
  refute_output --partial "$token"
}

# release --force keeps the fencing counter: tests/protocol/acquire_test.cpp
# (AForcedReleaseKeepsTheFenceCounter).

# --- --json and fencing -----------------------------------------------------------------------------

@test "acquire --json gives key, token, fence and ttl_ms" {
  require_jq
  run --separate-stderr rlock acquire k -t 15s --json
  assert_success
  jq -e . <<<"$output" >/dev/null || fail "not JSON: $output"
  assert_equal "$(jq -r '.key' <<<"$output")" k
  assert_equal "$(jq -r '.token | type' <<<"$output")" string
  assert_equal "$(jq -r '.fence | type' <<<"$output")" number
  assert_equal "$(jq -r '.ttl_ms | type' <<<"$output")" number
  assert_equal "$(jq -r '.ttl_ms' <<<"$output")" 15000
  local token
  token=$(jq -r .token <<<"$output")
  [[ $token =~ $TOKEN_RE ]] || fail "not a token: $token"
  assert_equal "$(rcli get "$(lock_key k)")" "$token"
  assert_equal "$(rcli get "$(lock_key k):fence")" "$(jq -r .fence <<<"$output")"
  RLOCK_TOKEN=$token run rlock release k
  assert_success
}

@test "the fence increases strictly across acquisitions by acquire and run" {
  require_jq
  local last=0 i fence token
  for i in 1 2 3; do
    run rlock acquire k --json
    assert_success
    fence=$(jq -r .fence <<<"$output")
    token=$(jq -r .token <<<"$output")
    ((fence > last)) || fail "fence $fence after $last"
    last=$fence
    RLOCK_TOKEN=$token run rlock release k
    assert_success
  done
  run rlock run k -- sh -c 'echo "$RLOCK_FENCE"'
  ((output > last)) || fail "run's fence $output after $last"
  last=$output
  # After an expiry too.
  run rlock acquire k -t 200ms --json
  wait_until lock_free k
  run rlock acquire k --json
  (($(jq -r .fence <<<"$output") > last + 1)) || fail "fence did not increase over an expiry: $output"
  # The counter expires only after 31 days without use (it resumes above its old values from the
  # server's clock: see below).
  local pttl
  pttl=$(rcli pttl "$(lock_key k):fence")
  ((pttl > 30 * 86400000 && pttl <= 31 * 86400000)) || fail "fence PTTL $pttl"
}

# The fence counter resumes above every value it gave out once lost, and is shared by every holder
# and outlives a release: tests/protocol/acquire_test.cpp (AFenceCounterLostResumesAboveEveryValueItGaveOut,
# TheFenceCounterIsSharedByEveryHolderAndOutlivesARelease).
