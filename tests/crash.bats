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

# Two holders killed at once (the same wait: their 1.5s TTL): k's lock and child, and a waiter on j.
@test "SIGKILL of run: the key is gone within TTL + 1s and the child is gone too; after the TTL another run gets the lock" {
  bg holder rlock run -t 1500ms k -- sleep 100
  bg crashed rlock run j -t 1500ms -- sleep 100
  wait_until lock_held k || fail "the lock was not taken: $(bg_err holder)"
  wait_until lock_held j || fail "the lock was not taken: $(bg_err crashed)"
  local guard="" child="" first
  # rlock -> its guard -> the command
  wait_until child_of "$holder_pid" || fail "rlock started no guard"
  guard=$(child_of "$holder_pid")
  wait_until child_of "$guard" || fail "rlock started no child"
  child=$(child_of "$guard")
  [[ $(cat "/proc/$child/comm") == sleep ]] || fail "the child is $(cat "/proc/$child/comm")"
  first=$(rcli get "$(lock_key j):fence")
  local t0 took
  t0=$(now_ms)
  kill -KILL "$holder_pid" "$crashed_pid"
  bg waiter rlock run j -w 10 -- sh -c 'echo "$RLOCK_FENCE"'
  wait_until -t 2 pid_gone "$child" || fail "the child outlived rlock"
  wait_until -t 5 lock_free k || fail "the lock outlived its TTL by more than 3.5s"
  took=$(elapsed_ms "$t0")
  ((took <= 2500)) || fail "the lock was gone ${took}ms after the crash (TTL 1.5s)"
  bg_wait holder
  assert_equal "$BG_STATUS" 137
  # Another run got j after its TTL.
  bg_wait waiter 10
  took=$(elapsed_ms "$t0")
  assert_equal "$BG_STATUS" 0
  assert_equal "$(bg_out waiter)" $((first + 1))
  ((took <= 2500)) || fail "waited ${took}ms for a lock with a 1.5s TTL"
}
