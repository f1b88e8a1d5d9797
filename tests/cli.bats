#!/usr/bin/env bats
# The command line: usage errors, help and version, URLs, connection failures, exit codes of
# the child's exec, foreign data at a lock's name, and where settings come from.
#
# The tests share one redis-server (setup_file), emptied before each; a test that stops its
# server, or needs a password or a unix socket, starts its own.

load helpers/common
load helpers/servers

setup_file() {
  shared_redis_start
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
  shared_redis
}

teardown() {
  common_teardown
}

# --- usage errors: one "rlock: error:" line on stderr, exit 64 ---------------------------------

@test "an unknown option is a usage error" {
  run --separate-stderr rlock run k --no-such-option -- true
  assert_usage_error
  run --separate-stderr rlock acquire k --bogus
  assert_usage_error
  run --separate-stderr rlock --bogus
  assert_usage_error
  # A few letters off: the option meant.
  run --separate-stderr rlock run k --tll 3s -- true
  assert_usage_error
  assert_equal "$stderr" "rlock: error: rlock run has no option --tll; did you mean --ttl? (see rlock run --help)"
  run --separate-stderr rlock metrics --textfle f
  assert_equal "$stderr" \
    "rlock: error: rlock metrics has no option --textfle; did you mean --textfile? (see rlock metrics --help)"
  run --separate-stderr rlock status --verb
  [[ $stderr == *"did you mean --verbose?"* ]] || fail "stderr: $stderr"
  # Nothing close: no guess.
  run --separate-stderr rlock run k --no-such-option -- true
  [[ $stderr != *"did you mean"* ]] || fail "stderr: $stderr"
}

@test "an unknown command is a usage error" {
  run --separate-stderr rlock frobnicate k
  assert_usage_error
}

@test "no command at all is a usage error, in rlock's words" {
  run --separate-stderr rlock
  assert_usage_error
  assert_equal "$stderr" "rlock: error: no command given: use run, acquire, release, extend, status, list, log, check or metrics (see rlock --help)"
  run --separate-stderr rlock -v -u redis://127.0.0.1:1
  assert_usage_error
  assert_equal "$stderr" "rlock: error: no command given: use run, acquire, release, extend, status, list, log, check or metrics (see rlock --help)"
}

@test "an option that takes one value, given twice, is a usage error in rlock's words" {
  run --separate-stderr rlock run k -t 3s -t 4s -- true
  assert_usage_error
  assert_equal "$stderr" "rlock: error: --ttl given more than once (see rlock run --help)"
  run --separate-stderr rlock acquire k --wait 1s --wait 2s
  assert_usage_error
  assert_equal "$stderr" "rlock: error: --wait given more than once (see rlock acquire --help)"
}

@test "a missing KEY is a usage error" {
  run --separate-stderr rlock run
  assert_usage_error
  run --separate-stderr rlock acquire
  assert_usage_error
  run --separate-stderr rlock release
  assert_usage_error
  run --separate-stderr rlock extend
  assert_usage_error
}

@test "an empty KEY is a usage error" {
  run --separate-stderr rlock run '' -- true
  assert_usage_error
  run --separate-stderr rlock acquire ''
  assert_usage_error
  run --separate-stderr rlock status ''
  assert_usage_error
}

@test "a negative duration is a usage error" {
  run --separate-stderr rlock run k -t -5s -- true
  assert_usage_error
  run --separate-stderr rlock run k -w -1 -- true
  assert_usage_error
}

@test "a duration with an unknown unit is a usage error" {
  run --separate-stderr rlock run k -t 1x -- true
  assert_usage_error
  run --separate-stderr rlock acquire k --ttl 5minutes
  assert_usage_error
  run --separate-stderr rlock run k -w soon -- true
  assert_usage_error
}

@test "an empty duration is a usage error" {
  run --separate-stderr rlock run k -t '' -- true
  assert_usage_error
}

@test "a zero TTL is a usage error" {
  run --separate-stderr rlock run k -t 0 -- true
  assert_usage_error
  run --separate-stderr rlock acquire k -t 0s
  assert_usage_error
  run --separate-stderr rlock extend k -t 0ms
  assert_usage_error
}

@test "valid duration forms are accepted" {
  local d
  for d in 500ms 30s 5m 1h30m 1.5s 2d 10 0.25; do
    run --separate-stderr rlock acquire "dur-$d" -t "$d"
    assert_success
  done
  # 1h30m is 5,400,000ms
  run rcli pttl "$(lock_key dur-1h30m)"
  (( output > 5390000 && output <= 5400000 )) || fail "PTTL of -t 1h30m is $output"
  # A fraction of a second: what rlock asked for (the lock itself may be gone by now).
  run --separate-stderr rlock acquire dur-frac -t 0.25 --json
  assert_success
  [[ $output == *'"ttl_ms":250,'* ]] || fail "-t 0.25 gave $output"
}

@test "a conflict exit code outside 0-255 is a usage error" {
  run --separate-stderr rlock run k -E 300 -- true
  assert_usage_error
  run --separate-stderr rlock run k -E -1 -- true
  assert_usage_error
  run --separate-stderr rlock run k --lost-exit-code 256 -- true
  assert_usage_error
}

@test "run without a command is a usage error" {
  run --separate-stderr rlock run k
  assert_usage_error
  run --separate-stderr rlock run k --
  assert_usage_error
  assert lock_free k
}

@test "run with both -c and a command after -- is a usage error" {
  run --separate-stderr rlock run k -c 'true' -- true
  assert_usage_error
}

@test "an unknown signal name is a usage error" {
  run --separate-stderr rlock run k --signal NOPE -- true
  assert_usage_error
  run --separate-stderr rlock run k --signal 0 -- true
  assert_usage_error
}

@test "signal names with and without SIG and numbers are accepted" {
  local s
  for s in TERM SIGTERM INT 15 HUP; do
    run --separate-stderr rlock run k --signal "$s" -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{k}"'
    assert_success
    assert_output 1
  done
}

@test "usage errors are reported before touching Redis" {
  run --separate-stderr rlock run k -t -5s -- true
  assert_usage_error
  run rcli dbsize
  assert_output 0
}

# --- help and version --------------------------------------------------------------------------

@test "--help and -h exit 0 and describe the commands" {
  run rlock --help
  assert_success
  assert_output --partial run
  assert_output --partial acquire
  assert_output --partial release
  assert_output --partial status
  run rlock -h
  assert_success
}

@test "every command has --help" {
  local c
  for c in run acquire release extend status list; do
    run rlock "$c" --help
    assert_success
    [[ -n $output ]] || fail "rlock $c --help printed nothing"
  done
  run rlock run --help
  assert_output --partial --ttl
  assert_output --partial --kill-after
}

@test "an option is known however the line names it: in a cluster, with =, before or after the command" {
  # rlock registers with its parser only the options that the line may name: each of these
  # forms must still find its option, and a pair that excludes each other must still clash.
  run --separate-stderr rlock run k -nt5s -- true
  assert_success
  run --separate-stderr rlock run k --ttl=5s --no-wait -- true
  assert_success
  run --separate-stderr rlock -qu "$RLOCK_URL" run k -- true
  assert_success
  run --separate-stderr rlock run k -sx -- true
  assert_usage_error
  assert_equal "$stderr" "rlock: error: --shared and --exclusive exclude each other (see rlock run --help)"
  run --separate-stderr rlock run -x k --shared -- true
  assert_usage_error
  assert_equal "$stderr" "rlock: error: --shared and --exclusive exclude each other (see rlock run --help)"
  # One that the line does not name still comes from the environment.
  RLOCK_TTL=nonsense run --separate-stderr rlock run k -- true
  assert_usage_error
  [[ $stderr == *"RLOCK_TTL: 'nonsense' is not a duration"* ]] || fail "unexpected: $stderr"
  # A value left out: the next word is an option, or the end of the options, not a wrong value.
  run --separate-stderr rlock run k --once-per -- true
  assert_usage_error
  assert_equal "$stderr" \
    "rlock: error: --once-per: '--' is the end of the options, not a duration: give one before it (500ms, 30s, 1h30m)"
  run --separate-stderr rlock run k --ttl -n -- true
  assert_usage_error
  assert_equal "$stderr" "rlock: error: --ttl: '-n' is an option, not a duration: give one before it (500ms, 30s, 1h30m)"
  run --separate-stderr rlock run k --limit -- true
  assert_usage_error
  assert_equal "$stderr" "rlock: error: --limit: '--' is the end of the options, not a number of holders: give one before it"
  # --help lists every option of the command, whatever the line names.
  run rlock run k -nh
  assert_success
  assert_output --partial --kill-after
  assert_output --partial --connect-timeout
}

@test "--version and -V print the version (git describe, or the project's) and exit 0" {
  run rlock --version
  assert_success
  # A tag's "0.2.0-3-gabc1234", or with no tag the project's version and the commit; "-dirty"
  # when built from changed files.
  assert_output --regexp '^rlock [0-9]+\.[0-9]+\.[0-9]+((-[0-9]+-g|\+g)[0-9a-f]{7,})?(-dirty)?$'
  local version=${output#rlock }
  if [[ $version =~ g([0-9a-f]{7,}) ]] && [[ -d $RLOCK_SOURCE_DIR/.git || -f $RLOCK_SOURCE_DIR/.git ]]; then
    git -C "$RLOCK_SOURCE_DIR" cat-file -e "${BASH_REMATCH[1]}^{commit}" ||
      fail "the version names ${BASH_REMATCH[1]}, which is no commit of this checkout"
  fi
  run rlock -V
  assert_success
  assert_output "rlock $version"
}

# --- URLs and connections -----------------------------------------------------------------------

@test "several URLs make a Redlock quorum: -u repeated, or one list; a majority that does not answer is 69" {
  # Two masters, one of them down: no majority (2 needed), which is unavailable, never busy.
  run --separate-stderr rlock acquire k -u "redis://127.0.0.1:$REDIS_PORT,redis://127.0.0.1:1"
  assert_error_exit 69
  [[ $stderr == *"no majority"*"127.0.0.1:1"* ]] || fail "the failing master is not named: $stderr"
  RLOCK_URL="redis://127.0.0.1:$REDIS_PORT redis://127.0.0.1:1" run --separate-stderr rlock acquire k
  assert_error_exit 69
  run --separate-stderr rlock acquire k -u "redis://127.0.0.1:$REDIS_PORT" -u redis://127.0.0.1:1
  assert_error_exit 69
  lock_free k
  # A comma inside one URL (not before another URL) is a bad URL.
  run --separate-stderr rlock acquire k -u "redis://127.0.0.1:$REDIS_PORT,x"
  assert_error_line 78
}

@test "a malformed URL is a configuration error (78)" {
  local u
  for u in 'not a url' 'http://127.0.0.1:6379' 'redis://127.0.0.1:99999' 'redis://127.0.0.1:6379/notadb' \
    'redis://' 'unix://relative/path.sock'; do
    run --separate-stderr rlock acquire k -u "$u"
    if [[ $status -ne 78 ]]; then
      fail "URL '$u': expected exit 78, got $status ($stderr)"
    fi
    assert_error_line 78
  done
}

@test "a malformed RLOCK_URL is a configuration error (78)" {
  RLOCK_URL='gopher://x' run --separate-stderr rlock acquire k
  assert_error_line 78
}

@test "a password in a bad URL is not echoed" {
  run --separate-stderr rlock acquire k -u 'redis://user:s3cr3tpw@127.0.0.1:99999'
  assert_error_exit 78
  [[ $stderr != *s3cr3tpw* ]] || fail "the password appears in: $stderr"
}

@test "the database of the URL is used" {
  run rlock acquire k -u "redis://127.0.0.1:$REDIS_PORT/3"
  assert_success
  [[ $(rcli -n 3 exists "$(lock_key k)") == 1 ]]
  [[ $(rcli -n 0 exists "$(lock_key k)") == 0 ]]
}

@test "a unix socket URL works" {
  redis_start_unix
  run rlock run k -- sh -c 'echo "$RLOCK_TOKEN"'
  assert_success
  [[ $output =~ $TOKEN_RE ]] || fail "no token: $output"
  run rlock acquire k2 -u "unix://$REDIS_SOCKET?db=2"
  assert_success
  [[ $(rcli -n 2 exists "$(lock_key k2)") == 1 ]]
}

@test "Redis down is exit 69 for run, acquire and status, never 75" {
  local port
  port=$(free_port)
  export RLOCK_URL="redis://127.0.0.1:$port"
  run --separate-stderr rlock run k -- touch "$T/ran"
  assert_error_line 69
  assert_file_not_exists "$T/ran"
  run --separate-stderr rlock run k -n -- true
  assert_error_line 69
  run --separate-stderr rlock run k -w 1 -- true
  assert_error_line 69
  run --separate-stderr rlock acquire k
  assert_error_line 69
  run --separate-stderr rlock acquire k -n
  assert_error_line 69
  run --separate-stderr rlock status k
  assert_error_line 69
  [[ $stderr == *"$port"* ]] || fail "the error does not name the URL that failed: $stderr"
}

@test "Redis down is exit 69 for release, extend and list" {
  local port
  port=$(free_port)
  export RLOCK_URL="redis://127.0.0.1:$port"
  # release and extend try again for --io-timeout (default 2s; faults/server.bats shows it).
  RLOCK_TOKEN=0123456789abcdef0123456789abcdef run --separate-stderr rlock release k --io-timeout 300ms
  assert_error_line 69
  RLOCK_TOKEN=0123456789abcdef0123456789abcdef run --separate-stderr rlock extend k --io-timeout 300ms
  assert_error_line 69
  run --separate-stderr rlock list
  assert_error_line 69
}

@test "a server that does not answer is exit 69 after --io-timeout" {
  redis_start
  kill -STOP "$REDIS_PID"
  local t0
  t0=$(now_ms)
  run --separate-stderr rlock acquire k --io-timeout 500ms
  local took
  took=$(elapsed_ms "$t0")
  kill -CONT "$REDIS_PID"
  assert_error_line 69
  ((took >= 400 && took < 4000)) || fail "gave up after ${took}ms with --io-timeout 500ms"
}

@test "a wrong password is exit 77" {
  redis_start_auth s3cret-right
  run --separate-stderr rlock acquire k
  assert_error_line 77
  RLOCK_PASSWORD=wrong-pass run --separate-stderr rlock acquire k
  assert_error_line 77
  run --separate-stderr rlock run k -u "redis://:wrong-pass2@127.0.0.1:$REDIS_PORT" -- true
  assert_error_exit 77
  [[ $stderr != *wrong-pass2* ]] || fail "the password appears in: $stderr"
  run --separate-stderr rlock status k -u "redis://:wrong-pass3@127.0.0.1:$REDIS_PORT"
  assert_error_exit 77
  assert lock_free k
}

@test "the right password from RLOCK_PASSWORD, REDISCLI_AUTH or the URL works" {
  redis_start_auth s3cret-right
  RLOCK_PASSWORD=s3cret-right run rlock acquire k1
  assert_success
  REDISCLI_AUTH=s3cret-right run rlock acquire k2
  assert_success
  run rlock acquire k3 -u "redis://:s3cret-right@127.0.0.1:$REDIS_PORT"
  assert_success
  assert lock_held k1
  assert lock_held k2
  assert lock_held k3
}

@test "an ACL denial is exit 77" {
  rcli acl setuser limited on '>limited-pw' '~other:*' '+@all' >/dev/null
  run --separate-stderr rlock acquire k -u "redis://limited:limited-pw@127.0.0.1:$REDIS_PORT"
  assert_error_exit 77
  run --separate-stderr rlock acquire k -u "redis://limited:bad-pw@127.0.0.1:$REDIS_PORT"
  assert_error_exit 77
  assert lock_free k
}

# --- the child's exec -------------------------------------------------------------------------

@test "a command that does not exist is exit 127" {
  run -127 --separate-stderr rlock run k -- no-such-command-rlock-test
  assert_error_line 127
  run -127 --separate-stderr rlock run k -- "$T/no/such/file"
  assert_error_line 127
  assert lock_free k
}

@test "a command that is not executable is exit 126" {
  printf '#!/bin/sh\nexit 0\n' >"$T/not-exec"
  chmod 0644 "$T/not-exec"
  run --separate-stderr rlock run k -- "$T/not-exec"
  assert_error_line 126
  mkdir "$T/a-dir"
  run --separate-stderr rlock run k -- "$T/a-dir"
  assert_error_line 126
  assert lock_free k
}

@test "-c runs through /bin/sh, whose not-found is 127" {
  run -127 rlock run k -c 'no-such-command-rlock-test'
  assert_failure 127
}

# --- foreign data at the lock's name ------------------------------------------------------------

@test "a key of another type at the lock's name is an error, not busy, not success" {
  rcli hset "$(lock_key k)" a b >/dev/null
  run --separate-stderr rlock run k -- touch "$T/ran"
  [[ $status -ne 0 && $status -ne 64 && $status -ne 75 ]] || fail "run exited $status"
  [[ ${stderr_lines[0]} == "rlock: error: "* ]] || fail "no error message: $stderr"
  assert_file_not_exists "$T/ran"
  run --separate-stderr rlock run k -n -- true
  [[ $status -ne 0 && $status -ne 75 ]] || fail "run -n exited $status"
  run --separate-stderr rlock acquire k
  [[ $status -ne 0 && $status -ne 64 && $status -ne 75 ]] || fail "acquire exited $status"
  [[ ${stderr_lines[0]} == "rlock: error: "* ]] || fail "no error message: $stderr"
  assert_equal "$output" ""
  # The foreign data is left alone.
  assert_equal "$(rcli type "$(lock_key k)")" hash
  assert_equal "$(rcli hget "$(lock_key k)" a)" b
}

# foreign_65 CMD...: CMD exits 65 at once, saying that the lock's key of k holds another program's data.
foreign_65() {
  local t0
  t0=$(now_ms)
  run --separate-stderr timeout 20 "$@"
  assert_equal "$status" 65
  [[ $stderr == *"rlock:{k} holds data that is not rlock's"* ]] || fail "$*: '$stderr'"
  (($(elapsed_ms "$t0") < 5000)) || fail "$* took $(elapsed_ms "$t0")ms to say so"
}

@test "a string that rlock did not write at the lock's name is 65 for every command, not a lock held for ever" {
  local tok=0123456789abcdef0123456789abcdef0123456789abcdef mine=fedcba9876543210fedcba9876543210fedcba9876543210 value
  # A token of rlock's shape without an expiry: not rlock's (its tokens and lingering marks always
  # expire). (Every shape, a word with or without an expiry, another type, is refused by every
  # script: tests/protocol/foreign_test.cpp. Here: each command makes the refusal exit 65.)
  rcli set "$(lock_key k)" "$tok" >/dev/null
  foreign_65 rlock run k -- touch "$T/ran"
  foreign_65 rlock run k -n -- touch "$T/ran"
  foreign_65 rlock acquire k -w 10s
  foreign_65 rlock acquire k -n
  RLOCK_TOKEN=$mine foreign_65 rlock release k
  RLOCK_TOKEN=$mine foreign_65 rlock extend k
  foreign_65 rlock release k --force
  foreign_65 rlock status k
  # Scans skip it, as they skip a foreign type.
  rlock acquire mine >/dev/null
  run --separate-stderr rlock status
  assert_success
  [[ $output == *mine* ]] && ! grep -qE '^k( |$)' <<<"$output" || fail "status: $output"
  run --separate-stderr rlock list --json
  assert_success
  assert_equal "$(jq -r '[.[].key] | join(" ")' <<<"$output")" mine
  assert_file_not_exists "$T/ran"
  # The foreign data is left alone.
  assert_equal "$(rcli get "$(lock_key k)")" "$tok"
  assert_equal "$(rcli pttl "$(lock_key k)")" -1
}

# --- where settings come from: argv > RLOCK_* > config file ---------------------------------------

@test "the config file given by --config sets prefix and ttl" {
  printf 'prefix = "cfg:"\nttl = "40s"\n' >"$T/rlock.toml"
  run rlock acquire k --config "$T/rlock.toml"
  assert_success
  assert key_exists "cfg:{k}"
  assert key_missing "$(lock_key k)"
  run rcli pttl "cfg:{k}"
  ((output > 35000 && output <= 40000)) || fail "PTTL $output, config said 40s"
}

@test "the environment beats the config file" {
  printf 'prefix = "cfg:"\nttl = "40s"\n' >"$T/rlock.toml"
  RLOCK_PREFIX=env: RLOCK_TTL=50s run rlock acquire k --config "$T/rlock.toml"
  assert_success
  assert key_exists "env:{k}"
  assert key_missing "cfg:{k}"
  run rcli pttl "env:{k}"
  ((output > 45000 && output <= 50000)) || fail "PTTL $output, RLOCK_TTL said 50s"
}

@test "the command line beats the environment and the config file" {
  printf 'prefix = "cfg:"\nttl = "40s"\n' >"$T/rlock.toml"
  RLOCK_PREFIX=env: RLOCK_TTL=50s run rlock acquire k --config "$T/rlock.toml" --prefix arg: -t 60s
  assert_success
  assert key_exists "arg:{k}"
  assert key_missing "env:{k}"
  assert key_missing "cfg:{k}"
  run rcli pttl "arg:{k}"
  ((output > 55000 && output <= 60000)) || fail "PTTL $output, -t said 60s"
}

@test "RLOCK_CONFIG names the config file" {
  printf 'prefix = "viaenv:"\n' >"$T/other.toml"
  RLOCK_CONFIG=$T/other.toml run rlock acquire k
  assert_success
  assert key_exists "viaenv:{k}"
}

@test "the config file under XDG_CONFIG_HOME is read by default" {
  mkdir -p "$XDG_CONFIG_HOME/rlock"
  printf 'prefix = "xdg:"\nttl = "45s"\n' >"$XDG_CONFIG_HOME/rlock/config.toml"
  run rlock acquire k
  assert_success
  assert key_exists "xdg:{k}"
  run rcli pttl "xdg:{k}"
  ((output > 40000 && output <= 45000)) || fail "PTTL $output, config said 45s"
}

@test "the URL comes from the config file, RLOCK_URL beats it and -u beats both" {
  local dead
  dead=$(free_port)
  printf 'url = "%s"\n' "$RLOCK_URL" >"$T/good.toml"
  printf 'url = "redis://127.0.0.1:%s"\n' "$dead" >"$T/dead.toml"
  local good=$RLOCK_URL
  unset RLOCK_URL
  run rlock acquire k1 --config "$T/good.toml"
  assert_success
  assert lock_held k1
  RLOCK_URL=$good run rlock acquire k2 --config "$T/dead.toml"
  assert_success
  assert lock_held k2
  RLOCK_URL="redis://127.0.0.1:$dead" run rlock acquire k3 -u "$good"
  assert_success
  assert lock_held k3
  RLOCK_URL="redis://127.0.0.1:$dead" run --separate-stderr rlock acquire k4 --config "$T/good.toml"
  assert_error_line 69
}

@test "REDIS_URL is used when RLOCK_URL is not set, RLOCK_URL wins over it" {
  local good=$RLOCK_URL dead
  dead=$(free_port)
  unset RLOCK_URL
  REDIS_URL=$good run rlock acquire k1
  assert_success
  assert lock_held k1
  REDIS_URL=$good RLOCK_URL="redis://127.0.0.1:$dead" run --separate-stderr rlock acquire k2
  assert_error_line 69
}

@test "a missing, malformed or unknown-setting config file is exit 78" {
  run --separate-stderr rlock acquire k --config "$T/missing.toml"
  assert_error_line 78
  printf 'this is = = not toml [\n' >"$T/bad.toml"
  run --separate-stderr rlock acquire k --config "$T/bad.toml"
  assert_error_line 78
  printf 'no_such_setting = "x"\n' >"$T/unknown.toml"
  run --separate-stderr rlock acquire k --config "$T/unknown.toml"
  assert_error_line 78
  printf 'ttl = "banana"\n' >"$T/badvalue.toml"
  run --separate-stderr rlock acquire k --config "$T/badvalue.toml"
  assert_error_line 78
  assert lock_free k
}
