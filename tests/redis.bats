#!/usr/bin/env bats
# The Redis transport: scripts from the server's cache, logging in, timeouts, reconnecting.

load helpers/common

setup() {
  common_setup
}

teardown() {
  common_teardown
}

# calls of one command since the server started, from INFO commandstats
calls() {
  rcli info commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\).*/\1/p" | grep . || echo 0
}

@test "scripts run by FCALL from one function library, loaded once per server and again when it is gone" {
  redis_start
  run rlock run k -- true
  assert_success
  assert_equal "$(calls 'function|load')" 1
  (($(calls fcall) >= 2))
  assert_equal "$(calls evalsha)" 0
  assert_equal "$(calls eval)" 0
  rcli function list | grep -qE '^rlock_[0-9a-f]{12}$' || fail "no rlock library: $(rcli function list)"
  run rlock run k -- true
  assert_success
  assert_equal "$(calls 'function|load')" 1
  # A server that lost it (FUNCTION FLUSH, as after a restart without data): loaded again.
  rcli function flush >/dev/null
  run rlock run k -- true
  assert_success
  assert_equal "$(calls 'function|load')" 2
  assert_equal "$(calls evalsha)" 0
}

@test "an ACL user without +fcall and +function|load runs the scripts by EVALSHA" {
  redis_start
  rcli acl setuser old on '>pw' '~rlock:*' '+@all' '-fcall' '-function' >/dev/null
  run --separate-stderr rlock run k --url "redis://old:pw@127.0.0.1:$REDIS_PORT" -- true
  assert_success
  (($(calls evalsha) + $(calls eval) >= 2))
  assert_equal "$(calls 'function|load')" 0
}

@test "with RLOCK_FUNCTIONS=0, scripts run by EVALSHA from the server's cache, loaded with EVAL only when missing" {
  export RLOCK_FUNCTIONS=0
  redis_start
  rcli script flush >/dev/null
  run rlock run k -- true
  assert_success
  local eval_after_first
  eval_after_first=$(calls eval)
  ((eval_after_first >= 1))
  run rlock run k -- true
  assert_success
  run rlock run k -- true
  assert_success
  # The SHA1s computed at build time match the server's: no further EVAL.
  assert_equal "$(calls eval)" "$eval_after_first"
  (($(calls evalsha) >= 6))
}

@test "a server that needs a password and gets none is exit 77, not an internal error" {
  redis_start_auth s3cret
  run --separate-stderr rlock run k -- true
  assert_failure 77
  assert_equal "$(wc -l <<<"$stderr")" 1
  [[ $stderr == "rlock: error: "*"requires a password"* ]]
  run --separate-stderr rlock status k
  assert_failure 77
}

@test "the password comes from REDISCLI_AUTH or RLOCK_PASSWORD and never shows in errors" {
  redis_start_auth s3cret
  REDISCLI_AUTH=s3cret run rlock run k -- true
  assert_success
  RLOCK_PASSWORD=s3cret run rlock run k -- true
  assert_success
  run --separate-stderr rlock run k -u "redis://:wrongpass@127.0.0.1:$REDIS_PORT" -- true
  assert_failure 77
  [[ $stderr != *wrongpass* ]]
  [[ $stderr == *"password in a --url"* ]]
  [[ $stderr == *"redis://:***@127.0.0.1:$REDIS_PORT: authentication failed (password from the URL): WRONGPASS"* ]] ||
    fail "stderr: $stderr"
}

@test "a wrong password says where it came from, not as if it were in the URL" {
  redis_start_auth s3cret
  RLOCK_PASSWORD=wrong run --separate-stderr rlock status k
  assert_failure 77
  assert_equal "$stderr" "rlock: error: redis://127.0.0.1:$REDIS_PORT: authentication failed (password from RLOCK_PASSWORD): WRONGPASS invalid username-password pair or user is disabled."
  REDISCLI_AUTH=wrong run --separate-stderr rlock status k
  [[ $stderr == *"redis://127.0.0.1:$REDIS_PORT: authentication failed (password from REDISCLI_AUTH): "* ]] ||
    fail "stderr: $stderr"
  echo wrong >"$T/pw"
  run --separate-stderr rlock status k --password-file "$T/pw"
  [[ $stderr == *"redis://127.0.0.1:$REDIS_PORT: authentication failed (password from --password-file $T/pw): "* ]] ||
    fail "stderr: $stderr"
  RLOCK_PASSWORD_FILE=$T/pw run --separate-stderr rlock status k
  [[ $stderr == *"(password from RLOCK_PASSWORD_FILE $T/pw): "* ]] || fail "stderr: $stderr"
}

@test "a paused server (SIGSTOP) fails within --io-timeout with 69, never 75" {
  redis_start
  kill -STOP "$REDIS_PID"
  local start
  start=$(now_ms)
  run --separate-stderr rlock run k --io-timeout 500ms -- true
  local took
  took=$(elapsed_ms "$start")
  kill -CONT "$REDIS_PID"
  assert_failure 69
  [[ $stderr == *"no reply within 500ms"* ]]
  # Not before the 500ms, and well short of a hang: start-up and exit under a sanitizer on a
  # loaded machine take their share, so the upper bound leaves slack (exact figures: bench/).
  ((took >= 450 && took < 3000)) || fail "took ${took}ms"
}

@test "nothing listening is 69 for every command" {
  export RLOCK_URL="redis://127.0.0.1:$(free_port)"
  # (extend and release try again for --io-timeout, 2s by default: faults/server.bats shows it.)
  for cmd in "run k -- true" "acquire k" "status k" "list" "extend k --io-timeout 300ms" \
    "release k --force --io-timeout 300ms"; do
    RLOCK_TOKEN=0123456789abcdef0123456789abcdef run --separate-stderr rlock $cmd
    assert_failure 69
    [[ $stderr == "rlock: error: redis://127.0.0.1:"*"cannot connect"* ]]
  done
}

@test "a connection cut during run is re-established at the next renewal" {
  redis_start
  # (Without a new connection the lease would end 300ms before the child: the run would exit 76.)
  bg job rlock run k -t 900ms -v -- sh -c 'sleep 1.2; echo finished'
  wait_until lock_held k
  rcli client kill type normal >/dev/null
  bg_wait job 10
  assert_equal "$BG_STATUS" 0
  assert_equal "$(bg_out job)" finished
  lock_free k
}

# --wait-replicas with too few acknowledgements (WAIT): 69, the lock given back, the command not
# run, the message saying how many acknowledged: replicas.bats.

@test "list and status without keys skip another program's data under the prefix" {
  redis_start
  rcli hset "rlock:{foreign}" a b >/dev/null
  rlock acquire mine >/dev/null
  run --separate-stderr rlock list
  assert_success
  [[ $output == *mine* && $output != *foreign* ]]
  run --separate-stderr rlock status
  assert_success
  [[ $output == *mine* ]]
  run --separate-stderr rlock status foreign
  assert_failure 65
}

@test "an ACL user with exactly rlock's permissions can use every command" {
  redis_start
  rcli acl setuser locker on '>pw' '~rlock:*' -@all +evalsha +eval +get +set +del +exists +incr +hset +hget \
    +hmget +hgetall +hdel +hincrby +pexpire +pexpireat +pttl +type +time +zadd +zrem +zscore +zrank +zcard \
    +zcount +zrange +zrangebyscore +zrevrangebyscore +zpopmin +lpush +ltrim +blpop +xadd +xrange +xrevrange \
    +scan >/dev/null
  export RLOCK_URL="redis://locker@127.0.0.1:$REDIS_PORT" RLOCK_PASSWORD=pw
  run rlock run k -t 300ms -- sleep 0.5
  assert_success
  local tok
  tok=$(rlock acquire k)
  run rlock list
  assert_success
  assert_output --partial k
  run rlock status k
  assert_success
  RLOCK_TOKEN=$tok run rlock extend k
  assert_success
  RLOCK_TOKEN=$tok run rlock release k
  assert_success
  rcli acl setuser locker -set >/dev/null
  run --separate-stderr rlock run k -- true
  assert_failure 77
  [[ $stderr == *"may not run SET"* ]] || fail "$stderr"
}

@test "foreign data at the fence key fails without leaving the lock behind" {
  redis_start
  rcli set "rlock:{k}:fence" notanumber >/dev/null
  run --separate-stderr rlock run k -- true
  assert_failure 65
  lock_free k
}

@test "re-entrancy recognises the same server under another name" {
  redis_start
  run rlock run k -u "redis://127.0.0.1:$REDIS_PORT" -- rlock run k -n -u "redis://localhost:$REDIS_PORT" -- true
  assert_success
}

@test "extend with the token of an enclosing run leaves the supervised lease alone" {
  redis_start
  run rlock run k -t 30s -- sh -c 'rlock extend k -t 1s && redis-cli -p '"$REDIS_PORT"' pttl "rlock:{k}"'
  assert_success
  ((${lines[-1]} > 20000)) || fail "PTTL shrank to ${lines[-1]}"
}
