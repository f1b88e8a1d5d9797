#!/usr/bin/env bats
# Logging in: Redis 6+ ACL users and passwords from the URL, REDISCLI_AUTH, RLOCK_PASSWORD and
# --password-file; ACL denials (exit 77, naming what is missing); passwords never on stderr.

load helpers/common
load helpers/servers

# Passwords that no other output contains by chance.
PW=Pw-7f3a9c1e
BAD=Bad-55e0d2b4

setup() {
  common_setup
  redis_start
  # The default user keeps working for rcli; the tests log in as other users.
  rcli acl setuser locker on ">$PW" '~rlock:*' '+@all' >/dev/null
}

teardown() {
  common_teardown
}

# A URL of the test's server with USER (and PASSWORD) in it.
url_as() {
  if (($# > 1)); then
    echo "redis://$1:$2@127.0.0.1:$REDIS_PORT"
  else
    echo "redis://$1@127.0.0.1:$REDIS_PORT"
  fi
}

# assert_no_secret: neither password shows in the last run's stdout or stderr.
assert_no_secret() {
  local s
  for s in "$PW" "$BAD"; do
    [[ $stderr != *"$s"* ]] || fail "a password shows on stderr: '$stderr'"
    [[ $output != *"$s"* ]] || fail "a password shows on stdout: '$output'"
  done
}

# Every command of the lock's life cycle, with the URL/options in "$@": exit 0 each.
life_cycle() {
  run --separate-stderr rlock run k "$@" -- sh -c 'echo "in $RLOCK_KEY"'
  assert_success
  assert_output "in k"
  run --separate-stderr rlock acquire k "$@" --token-file "$T/token"
  assert_success
  lock_held k
  run --separate-stderr rlock status k "$@"
  assert_success
  run --separate-stderr rlock list "$@"
  assert_success
  [[ $output == *k* ]]
  run --separate-stderr rlock extend k "$@" --token-file "$T/token"
  assert_success
  run --separate-stderr rlock release k "$@" --token-file "$T/token"
  assert_success
  lock_free k
}

@test "an ACL user with user and password in the URL can do everything (with the argv warning)" {
  life_cycle -u "$(url_as locker "$PW")"
  assert_no_secret
}

@test "a user in the URL and the password from REDISCLI_AUTH or RLOCK_PASSWORD" {
  REDISCLI_AUTH=$PW life_cycle -u "$(url_as locker)"
  assert_no_secret
  assert_equal "$stderr" ""
  RLOCK_PASSWORD=$PW life_cycle -u "$(url_as locker)"
  assert_no_secret
  assert_equal "$stderr" ""
  # RLOCK_PASSWORD is rlock's own and comes first.
  RLOCK_PASSWORD=$PW REDISCLI_AUTH=$BAD run --separate-stderr rlock run k -u "$(url_as locker)" -- true
  assert_success
  assert_no_secret
}

@test "--password-file: the first line is the password" {
  printf '%s\nsecond line is ignored\n' "$PW" >"$T/pw"
  chmod 600 "$T/pw"
  life_cycle -u "$(url_as locker)" --password-file "$T/pw"
  assert_equal "$stderr" ""
  # Without a final newline too.
  printf '%s' "$PW" >"$T/pw2"
  run --separate-stderr rlock run k -u "$(url_as locker)" --password-file "$T/pw2" -- true
  assert_success
  RLOCK_PASSWORD_FILE=$T/pw run --separate-stderr rlock run k -u "$(url_as locker)" -- true
  assert_success
  assert_no_secret
}

@test "--password-file in the config file, and the user in RLOCK_URL" {
  printf '%s\n' "$PW" >"$T/pw"
  printf 'password-file = "%s"\n' "$T/pw" >"$T/rlock.toml"
  RLOCK_URL=$(url_as locker) run --separate-stderr rlock run k --config "$T/rlock.toml" -- true
  assert_success
  assert_equal "$stderr" ""
}

@test "a password file for the default user of a requirepass server" {
  rcli config set requirepass "$PW" >/dev/null
  export REDIS_PASS=$PW
  printf '%s\n' "$PW" >"$T/pw"
  run --separate-stderr rlock run k --password-file "$T/pw" -- true
  assert_success
  run --separate-stderr rlock run k -- true
  assert_error_exit 77
}

@test "an unreadable --password-file is a configuration error (78) naming the file" {
  run --separate-stderr rlock run k -u "$(url_as locker)" --password-file "$T/no-such-file" -- touch "$T/ran"
  assert_error_exit 78
  [[ $stderr == *"$T/no-such-file"* ]] || fail "the error does not name the file: '$stderr'"
  assert_file_not_exist "$T/ran"
  # A directory is not a password file either.
  run --separate-stderr rlock status k -u "$(url_as locker)" --password-file "$T"
  assert_error_exit 78
  RLOCK_PASSWORD_FILE=$T/no-such-file run --separate-stderr rlock status k -u "$(url_as locker)"
  assert_error_exit 78
}

@test "a wrong password is exit 77, and neither password shows on stderr, even with -v" {
  local cmd
  for cmd in "run k -- true" "acquire k" "status k" "list k" "release k --force"; do
    REDISCLI_AUTH=$BAD run --separate-stderr rlock ${cmd%% *} -v -u "$(url_as locker)" ${cmd#* }
    assert_error_exit 77
    assert_no_secret
  done
  printf '%s\n' "$BAD" >"$T/pw"
  run --separate-stderr rlock run k -v -u "$(url_as locker)" --password-file "$T/pw" -- true
  assert_error_exit 77
  assert_no_secret
  run --separate-stderr rlock run k -v -u "$(url_as locker "$BAD")" -- true
  assert_error_exit 77
  assert_no_secret
  lock_free k
}

@test "an unknown user and a disabled user are exit 77" {
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -u "$(url_as nobody)" -- touch "$T/ran"
  assert_error_exit 77
  rcli acl setuser locker off >/dev/null
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -u "$(url_as locker)" -- touch "$T/ran"
  assert_error_exit 77
  assert_file_not_exist "$T/ran"
}

@test "the password never shows on stderr with -v, on success either" {
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -v -u "$(url_as locker)" -- true
  assert_success
  [[ -n $stderr ]] || fail "-v printed nothing"
  assert_no_secret
  run --separate-stderr rlock run k -v -u "$(url_as locker "$PW")" -- true
  assert_success
  assert_no_secret
  run --separate-stderr rlock status k -v -u "$(url_as locker "$PW")"
  assert_failure 1
  assert_no_secret
}

@test "a user without EVAL/EVALSHA (nor FCALL) gets 77 naming the missing command" {
  rcli acl setuser noscript on ">$PW" '~rlock:*' '+@all' -eval -evalsha -eval_ro -evalsha_ro -script -fcall -fcall_ro \
    -function >/dev/null
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -u "$(url_as noscript)" -- touch "$T/ran"
  assert_error_exit 77
  grep -qiE 'evalsha|eval' <<<"$stderr" || fail "the error does not name the command: '$stderr'"
  grep -qiE 'permission|noperm|acl' <<<"$stderr" || fail "the error does not say it is a permission: '$stderr'"
  assert_file_not_exist "$T/ran"
  lock_free k
  REDISCLI_AUTH=$PW run --separate-stderr rlock acquire k -u "$(url_as noscript)"
  assert_error_exit 77
  lock_free k
}

@test "a user without SCAN: list is 77 naming the command, status still works" {
  rcli acl setuser noscan on ">$PW" '~rlock:*' '+@all' -scan >/dev/null
  REDISCLI_AUTH=$PW run --separate-stderr rlock list -u "$(url_as noscan)"
  assert_error_exit 77
  grep -qi 'scan' <<<"$stderr" || fail "the error does not name SCAN: '$stderr'"
  REDISCLI_AUTH=$PW run --separate-stderr rlock status k -u "$(url_as noscan)"
  assert_failure 1
}

@test "a user limited to other key patterns gets 77 about the keys" {
  rcli acl setuser otherkeys on ">$PW" '~other:*' '+@all' >/dev/null
  local cmd
  for cmd in "run k -- touch $T/ran" "acquire k" "status k"; do
    REDISCLI_AUTH=$PW run --separate-stderr rlock ${cmd%% *} -u "$(url_as otherkeys)" ${cmd#* }
    assert_error_exit 77
    grep -qi 'key' <<<"$stderr" || fail "the error does not say it is about keys: '$stderr'"
  done
  assert_file_not_exist "$T/ran"
  lock_free k
  # With --prefix other: the same user may.
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k --prefix other: -u "$(url_as otherkeys)" -- true
  assert_success
}

@test "a read-only user: status works, run and acquire are 77" {
  rcli acl setuser reader on ">$PW" '~rlock:*' '+@read' '+@connection' '+time' >/dev/null
  REDISCLI_AUTH=$PW run --separate-stderr rlock status k -u "$(url_as reader)"
  assert_failure 1
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -u "$(url_as reader)" -- touch "$T/ran"
  assert_error_exit 77
  assert_file_not_exist "$T/ran"
  lock_free k
}

@test "a user without @admin and @dangerous commands can do everything" {
  rcli acl setuser ops on ">$PW" '~rlock:*' '+@all' '-@admin' '-@dangerous' >/dev/null
  REDISCLI_AUTH=$PW life_cycle -u "$(url_as ops)"
}

@test "a password in an argv URL gets a warning; from RLOCK_URL or the config file it does not" {
  run --separate-stderr rlock run k -u "$(url_as locker "$PW")" -- true
  assert_success
  grep -qi 'warning' <<<"$stderr" || fail "no warning about the password in argv: '$stderr'"
  assert_no_secret

  RLOCK_URL=$(url_as locker "$PW") run --separate-stderr rlock run k -- true
  assert_success
  assert_equal "$stderr" ""

  printf 'url = "%s"\n' "$(url_as locker "$PW")" >"$T/rlock.toml"
  chmod 600 "$T/rlock.toml"
  run --separate-stderr rlock run k --config "$T/rlock.toml" -- true
  assert_success
  assert_equal "$stderr" ""

  # A URL with a user but no password in argv is no secret: no warning.
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -u "$(url_as locker)" -- true
  assert_success
  assert_equal "$stderr" ""
}

@test "a %-escaped password in the URL is decoded" {
  rcli acl setuser odd on '>p@ss:w/rd%' '~rlock:*' '+@all' >/dev/null
  RLOCK_URL="redis://odd:p%40ss%3Aw%2Frd%25@127.0.0.1:$REDIS_PORT" run --separate-stderr rlock run k -- true
  assert_success
}

@test "a script command denied: 77 naming it, and listing the writer's commands of src/redis/acl.txt" {
  local writer
  writer=$(sed -n 's/^writer  *//p' "$BATS_TEST_DIRNAME/../src/redis/acl.txt")
  [[ -n $writer ]] || fail "src/redis/acl.txt has no writer line"
  rcli acl setuser noxadd on ">$PW" '~rlock:*' '+@all' -xadd >/dev/null
  REDISCLI_AUTH=$PW run --separate-stderr rlock run k -u "$(url_as noxadd)" -- touch "$T/ran"
  assert_error_exit 77
  [[ $stderr == *"may not run XADD"* ]] || fail "the error does not name XADD: '$stderr'"
  [[ $stderr == *"rlock needs $writer on its keys"* ]] || fail "the error does not list '$writer': '$stderr'"
  assert_file_not_exist "$T/ran"
}
