#!/usr/bin/env bats
# A holder that dies without releasing (SIGKILL): its lock expires within the TTL and its
# child dies with it.

load helpers/common

setup() {
  common_setup
  redis_start
}

teardown() {
  common_teardown
}

@test "SIGKILL of run: the key is gone within TTL + 1s and the child is gone too" {
  bg holder rlock run -t 2s k -- sleep 100
  wait_until lock_held k || fail "the lock was not taken: $(bg_err holder)"
  local guard="" child=""
  # rlock -> its guard -> the command
  wait_until child_of "$holder_pid" || fail "rlock started no guard"
  guard=$(child_of "$holder_pid")
  wait_until child_of "$guard" || fail "rlock started no child"
  child=$(child_of "$guard")
  [[ $(cat "/proc/$child/comm") == sleep ]] || fail "the child is $(cat "/proc/$child/comm")"
  local t0 took
  t0=$(now_ms)
  kill -KILL "$holder_pid"
  wait_until -t 2 pid_gone "$child" || fail "the child outlived rlock"
  wait_until -t 5 lock_free k || fail "the lock outlived its TTL by more than 3s"
  took=$(elapsed_ms "$t0")
  ((took <= 3000)) || fail "the lock was gone ${took}ms after the crash (TTL 2s)"
  bg_wait holder
  assert_equal "$BG_STATUS" 137
}

@test "after a crashed holder's TTL another run gets the lock" {
  bg holder rlock run k -t 2s -- sleep 100
  wait_until lock_held k || fail "the lock was not taken: $(bg_err holder)"
  local first
  first=$(rcli get "$(lock_key k):fence")
  kill -KILL "$holder_pid"
  local t0 took
  t0=$(now_ms)
  run rlock run k -w 10 -- sh -c 'echo "$RLOCK_FENCE"'
  took=$(elapsed_ms "$t0")
  assert_success
  assert_output $((first + 1))
  ((took <= 3000)) || fail "waited ${took}ms for a lock with a 2s TTL"
}
