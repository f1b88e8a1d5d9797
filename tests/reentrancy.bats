#!/usr/bin/env bats
# Re-entrancy: a run or acquire of a key inside a process tree that already holds it proceeds
# at once and does not release the outer hold.

load helpers/common

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

@test "run A inside run A proceeds at once" {
  local t0 took
  t0=$(now_ms)
  run rlock run A -- rlock run A -n -- sh -c 'redis-cli -p "$REDIS_PORT" exists "rlock:{A}"'
  took=$(elapsed_ms "$t0")
  assert_success
  assert_output 1
  ((took < 3000)) || fail "took ${took}ms"
  # Without -n too (a broken re-entry would wait for ever: bounded here).
  run timeout 10 rlock run A -- rlock run A -- sh -c 'exit 5'
  assert_failure 5
  assert lock_free A
}

@test "the inner run does not release the outer hold" {
  run rlock run A -- sh -c '
    echo "$RLOCK_TOKEN" > "$0/outer"
    rlock run A -n -- sh -c "echo inner-ran" > "$0/inner.out"
    echo $? > "$0/inner.rc"
    redis-cli -p "$REDIS_PORT" get "rlock:{A}" > "$0/after"
    redis-cli -p "$REDIS_PORT" pttl "rlock:{A}" > "$0/after.pttl"
  ' "$T"
  assert_success
  assert_equal "$(cat "$T/inner.rc")" 0
  assert_equal "$(cat "$T/inner.out")" inner-ran
  local outer
  outer=$(cat "$T/outer")
  [[ $outer =~ $TOKEN_RE ]] || fail "outer token '$outer'"
  assert_equal "$(cat "$T/after")" "$outer"
  (($(cat "$T/after.pttl") > 0)) || fail "the outer lock lost its TTL: $(cat "$T/after.pttl")"
  assert lock_free A
}

@test "the outer hold stays exclusive while the inner one runs and after it" {
  bg outer rlock run A -- sh -c '
    rlock run A -n -- true
    touch "$0/inner-done"
    while [ ! -e "$0/go" ]; do sleep 0.05; done
  ' "$T"
  wait_until test -e "$T/inner-done" || fail "the inner run did not finish: $(bg_err outer)"
  # A process outside the tree still finds A busy.
  run rlock run A -n -- true
  assert_failure 75
  touch "$T/go"
  bg_wait outer
  assert_equal "$BG_STATUS" 0
  assert lock_free A
}

@test "A inside B inside A proceeds at once and keeps both holds" {
  run timeout 10 rlock run A -- rlock run B -n -- rlock run A -n -- sh -c '
    redis-cli -p "$REDIS_PORT" exists "rlock:{A}" "rlock:{B}"
    echo "$RLOCK_KEY"
  '
  assert_success
  assert_line --index 0 2
  assert_line --index 1 A
  assert lock_free A
  assert lock_free B
}

@test "after the innermost A ends, B and the outer A are still held" {
  run timeout 10 rlock run A -- sh -c '
    rlock run B -n -- sh -c "
      rlock run A -n -- true || exit 90
      redis-cli -p \"\$REDIS_PORT\" exists \"rlock:{A}\" \"rlock:{B}\"
    "
    redis-cli -p "$REDIS_PORT" exists "rlock:{A}" "rlock:{B}"
  '
  assert_success
  assert_equal "${lines[0]}" 2
  assert_equal "${lines[1]}" 1
  assert lock_free A
  assert lock_free B
}

@test "acquire of A inside run A proceeds at once" {
  run timeout 10 rlock run A -- sh -c '
    rlock acquire A -n > "$0/acquired"
    echo $? > "$0/acquire.rc"
    echo "$RLOCK_TOKEN" > "$0/outer"
    redis-cli -p "$REDIS_PORT" get "rlock:{A}" > "$0/after"
  ' "$T"
  assert_success
  assert_equal "$(cat "$T/acquire.rc")" 0
  assert_equal "$(cat "$T/after")" "$(cat "$T/outer")"
}

@test "a copied RLOCK_HELD does not let another process in after the hold ended" {
  run rlock run A -- sh -c 'printf "%s" "$RLOCK_HELD" > "$0/held"' "$T"
  assert_success
  [[ -s $T/held ]] || fail "run did not set RLOCK_HELD for its child"
  acquire_token A
  local token=$TOKEN
  RLOCK_HELD=$(cat "$T/held") run rlock run A -n -- touch "$T/ran"
  assert_failure 75
  assert_file_not_exists "$T/ran"
  assert_equal "$(rcli get "$(lock_key A)")" "$token"
}

@test "re-entry is per key: B inside A still conflicts with another holder of B" {
  acquire_token B
  run rlock run A -- rlock run B -n -- true
  assert_failure 75
}

@test "re-entry is per server: the same key on another database is a different lock" {
  cat >"$T/inner.sh" <<'EOF2'
redis-cli -p "$REDIS_PORT" -n 1 get "rlock:{A}"
echo "$RLOCK_TOKEN"
EOF2
  run timeout 10 rlock run A -- rlock run A -n -u "redis://127.0.0.1:$REDIS_PORT/1" -- sh "$T/inner.sh"
  assert_success
  # The inner run took a lock of its own on db 1.
  [[ ${lines[0]} =~ $TOKEN_RE ]] || fail "no lock on db 1: $output"
  assert_equal "${lines[0]}" "${lines[1]}"
  assert lock_free A
  [[ $(rcli -n 1 exists "$(lock_key A)") == 0 ]]
}
