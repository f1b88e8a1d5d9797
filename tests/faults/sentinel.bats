#!/usr/bin/env bats
# Sentinel faults: a renewal only counts when a majority of the sentinels still name the master
# rlock renews on, so a holder cut off from most sentinels stops its child before its lease can
# end; and sentinels that require a password.
#
# Each test starts a master, a replica and 3 sentinels. rlock reaches the sentinels through
# pausable proxies (a paused proxy accepts connections but answers nothing, like a sentinel on
# a host that is cut off), and the master directly.

load ../helpers/common
load ../helpers/servers
load helpers/faults

setup() {
  faults_setup
}

teardown() {
  common_teardown
}

# topology_behind_proxies SET...: master, replica, 3 sentinels, and for each SET three proxies
# (SET1, SET2, SET3), one to each sentinel; exports SET_URL, the redis+sentinel URL through the
# set's proxies. Each holder of a test goes through a set of its own, so that the tests of what
# a cut off sentinel does share one deployment, and pause their proxies at once.
topology_behind_proxies() {
  repl_start
  sentinels_start 3
  local ports=($SENTINEL_PORTS) set i
  for set in "$@"; do
    for i in 1 2 3; do
      proxy_start "$set$i" "${ports[i - 1]}"
    done
    local p1=${set}1_PORT p2=${set}2_PORT p3=${set}3_PORT
    printf -v "${set}_URL" 'redis+sentinel://127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s/mymaster' "${!p1}" "${!p2}" "${!p3}"
  done
  unset RLOCK_URL
}

# second_holder KEY LOG LABEL: one `rlock run KEY -n` on the master itself, of a critical
# section witnessed in LOG; succeeds when it got the lock.
second_holder() {
  rlock run "$1" -n -u "redis://127.0.0.1:$MASTER_PORT" -- "$CS" "$2" "$3" 0 2>>"$T/second.err"
}

# holder_start NAME KEY URL SECONDS: a run of KEY with a 3s lease through URL, whose child is a
# critical section of SECONDS (label NAME, witnessed in $T/NAME.log); waits until it runs. Its
# renewals show in $T/NAME.err (-v).
holder_start() {
  bg "$1" rlock run -v "$2" -t 3s --kill-after 1s --connect-timeout 500ms --io-timeout 500ms -u "$3" -- \
    "$CS" "$T/$1.log" "$1" "$4"
  WLOG=$T/$1.log wait_cs "$1" "$1"
}

# cut_off_gone NAME...: whether the children of the holders NAME (holder_start) are all gone.
cut_off_gone() {
  local name
  for name in "$@"; do
    pid_alive "$(cs_pid "$name" "$T/$name.log")" && return 1
  done
  return 0
}

# holder_cut_off_check NAME KEY: the holder NAME (holder_start), cut off from a majority of its
# sentinels and its child gone, exits 76, and a second holder on the master sees no overlap.
holder_cut_off_check() {
  local name=$1 key=$2
  bg_wait "$name" 15
  [[ $BG_STATUS == 76 ]] || fail "$name: expected 76, got $BG_STATUS: $(bg_err "$name")"
  wait_until -t 10 second_holder "$key" "$T/$name.log" second ||
    fail "no second holder of $key on the master: $(cat "$T/second.err")"
  assert_no_overlap "$T/$name.log"
}

# Four holders on one deployment, each through proxies of its own, cut off at once: none (the
# proxied topology works), one sentinel of 3 (the majority still answers: the run goes on), 2
# of 3 (s2, s3) and all 3 (renewals without a majority do not count: the child is stopped, 76).
@test "renewals count only with a majority of the sentinels: 0 or 1 of 3 cut off goes on; 2 or 3 of 3 stop the child, 76" {
  topology_behind_proxies none one two all
  bg none rlock run k0 -t 3s -u "$none_URL" -- sh -c 'sleep 2.5; echo ran'
  holder_start one k1 "$one_URL" 5
  holder_start two k2 "$two_URL" 30
  holder_start all k3 "$all_URL" 30
  # Let a renewal go through each holder's proxies first.
  local name t0
  for name in one two all; do
    wait_until -t 5 grep -q "renewed" "$T/$name.err" || fail "$name did not renew through its proxies: $(bg_err "$name")"
  done
  for name in one two all; do
    pid_alive "$(cs_pid "$name" "$T/$name.log")" || fail "the child of $name stopped before the fault: $(bg_err "$name")"
  done
  t0=$(now_ms)
  for name in one1 two2 two3 all1 all2 all3; do
    proxy_pause "$name"
  done
  # The children of two and all must be gone within the TTL: their leases end at most 3s after
  # the last renewal that counted, which was before the pause.
  wait_until -t 3 cut_off_gone two all ||
    fail "a child still runs 3s after its sentinels stopped answering: the lease may have ended under it; $(bg_err two; bg_err all)"
  echo "# the children were stopped $(elapsed_ms "$t0")ms after the pause" >&3
  holder_cut_off_check two k2
  holder_cut_off_check all k3
  bg_wait one 20
  [[ $BG_STATUS == 0 ]] || fail "expected 0 with 2 of 3 sentinels answering, got $BG_STATUS: $(bg_err one)"
  assert cs_ended one "$T/one.log"
  bg_wait none 10
  [[ $BG_STATUS == 0 ]] || fail "expected 0 with nothing paused, got $BG_STATUS: $(bg_err none)"
  assert_equal "$(bg_out none)" ran
}

# --- a stale master's queue ---------------------------------------------------------------------------

# Whether N contenders wait in the queue of lock k on the server on PORT.
queue_on_is() { [[ $(srv_cli "$1" zcard 'rlock:{k}:q' 2>/dev/null | tr -d '\r') == "$2" ]]; }

# One failover of a stopped master, two tests of what the old master does once continued:
#
# A waiter queued on the master keeps its connection there through a SIGSTOP of the master (a
# long --io-timeout). The master is failed over, a new holder takes the lock on the new master,
# then the old master is continued: it is still a master, with its queue, until Sentinel
# converts it, and grants the lock to the waiter at once (the first holder's lease ran out there).
# That grant must not start the waiter's command: the sentinels name another master. The witness
# is independent: no two critical sections overlap, and the waiter's runs after the new holder's.
#
# A holder of lock r on the same master, whose lock did not reach the new master (asynchronous
# replication; here deleted there), ends its command once the old master is continued, before
# any renewal. The old master is still a master and still holds the lock, but the sentinels
# name the new one: the release is not clean there, and run exits 76, never 0.
@test "a master the sentinels no longer name: a waiter it grants the lock does not run its command then; a release there is not clean, 76" {
  repl_start
  sentinels_start 3
  wait_until -t 10 sentinels_know_each_other || fail "the sentinels did not find each other"
  unset RLOCK_URL
  bg holder rlock run k -t 2s -u "$SENTINEL_URL" -- "$CS" "$WLOG" holder "until:$T/holder-go"
  wait_cs holder holder
  bg waiter rlock run -v k -t 2s -w 90s --io-timeout 30s -u "$SENTINEL_URL" -- "$CS" "$WLOG" waiter 1
  bg rholder rlock run r -t 60s --io-timeout 30s -u "$SENTINEL_URL" -- "$CS" "$T/r.log" rholder "until:$T/rholder-go"
  wait_until -t 10 queue_on_is "$MASTER_PORT" 1 || fail "the waiter did not queue: $(bg_err waiter)"
  wait_until -t 10 queue_on_is "$REPLICA_PORT" 1 || fail "the replica did not get the queue"
  WLOG=$T/r.log wait_cs rholder rholder
  wait_until -t 10 eval '[[ $(srv_cli "$REPLICA_PORT" exists "rlock:{r}" | tr -d "\r") == 1 ]]' ||
    fail "the replica did not get the lock r"

  kill -STOP "$MASTER_PID"
  wait_until -t 30 sentinels_agree_on "$REPLICA_PORT" || {
    kill -CONT "$MASTER_PID"
    fail "the sentinels did not fail over to the replica"
  }
  wait_until -t 10 role_is "$REPLICA_PORT" master || fail "the replica was not promoted"
  srv_cli "$REPLICA_PORT" del 'rlock:{r}' 'rlock:{r}:info' >/dev/null
  # The first holder follows the failover (or loses its lock); a new one takes the lock; once the
  # old master is continued, the holder of r ends its command.
  stale_grant_is_refused "$SENTINEL_URL" "$MASTER_PID"
  bg_wait rholder 30
  if [[ ! -e $T/old-was-master ]]; then
    echo "# Sentinel converted the old master at once: the release there was not tested" >&3
    return 0
  fi
  [[ $BG_STATUS == 76 ]] || fail "the holder of r: expected 76, got $BG_STATUS: $(bg_err rholder)"
  grep -qi 'lost' <<<"$(bg_err rholder)" || fail "rlock did not say the lock r was lost: $(bg_err rholder)"
}

# old_master_continued: (stale_grant_is_refused) whether the old master is still one, then the
# holder of r ends its command.
old_master_continued() {
  role_is "$MASTER_PORT" master && touch "$T/old-was-master"
  touch "$T/rholder-go"
}

# --- waiters that follow a failover ------------------------------------------------------------

# cs_start_ns LABEL / cs_end_ns LABEL: when the critical section LABEL started / ended (ns, the
# witness's clock).
cs_start_ns() { awk -v l="$1" '$1 == "start" && $4 == l { print $2; exit }' "$WLOG"; }
cs_end_ns() {
  local pid
  pid=$(awk -v l="$1" '$1 == "start" && $4 == l { print $3; exit }' "$WLOG")
  awk -v p="$pid" '$1 == "end" && $3 == p { print $2; exit }' "$WLOG"
}
# The labels of the critical sections, in the order they started.
cs_order() { awk '$1 == "start" { printf "%s ", $4 }' "$WLOG"; }

# After a failover while the old master still answers as master (here Sentinel cannot convert it:
# its ACL refuses SLAVEOF and REPLICAOF, as a master cut off from the sentinels but not from its
# clients would stay), the holder follows the failover and releases on the new master. The
# waiters blocked on the old master ask the sentinels every few steps (at every step at the head)
# and move to the new master, joining its queue again in their order: here the failover lost the
# queue (deleted on the new master), and a fresh client has queued there since. The head starts
# within a second of the release, the waiters in their order, the fresh client after them, each
# within a second of the release before it.
@test "waiters blocked on an old master that still answers follow the failover, in their order" {
  repl_start
  sentinels_start 3
  wait_until -t 10 sentinels_know_each_other || fail "the sentinels did not find each other"
  unset RLOCK_URL
  bg holder rlock run -v k -t 3s -u "$SENTINEL_URL" -- "$CS" "$WLOG" holder "until:$T/holder-go"
  wait_cs holder holder
  local w
  for w in 1 2 3; do
    bg "w$w" rlock run -v k -t 3s -w 90s -u "$SENTINEL_URL" -- "$CS" "$WLOG" "w$w" 0.2
    wait_until -t 10 queue_on_is "$MASTER_PORT" "$w" || fail "w$w did not queue: $(bg_err "w$w")"
  done
  wait_until -t 10 queue_on_is "$REPLICA_PORT" 3 || fail "the replica did not get the queue"

  srv_cli "$MASTER_PORT" acl setuser default -slaveof -replicaof >/dev/null
  scli "${SENTINEL_PORTS%% *}" sentinel failover mymaster >/dev/null || fail "SENTINEL FAILOVER failed"
  wait_until -t 30 sentinels_agree_on "$REPLICA_PORT" || fail "the sentinels did not fail over to the replica"
  wait_until -t 10 role_is "$REPLICA_PORT" master || fail "the replica was not promoted"
  # The failover lost the queue; a fresh client queues on the new master.
  srv_cli "$REPLICA_PORT" del 'rlock:{k}:q' 'rlock:{k}:wl' 'rlock:{k}:w' >/dev/null
  bg fresh rlock run -v k -t 3s -w 90s -u "$SENTINEL_URL" -- "$CS" "$WLOG" fresh 0.2
  wait_until -t 10 grep -q 'waiting for k' "$T/fresh.err" || fail "the fresh client did not queue: $(bg_err fresh)"
  role_is "$MASTER_PORT" master || fail "the old master was converted: nothing to test"
  # The holder follows the failover at its next renewal; the waiters within two far heartbeats
  # (5s) behind others, while the holder's lease on the old master (3s, no longer renewed there)
  # may also run out and grant the lock there to w1, which it gives back.
  wait_until -t 10 grep -q 'following the failover' "$T/holder.err" || fail "the holder did not follow the failover: $(bg_err holder)"
  wait_until -t 15 queue_on_is "$REPLICA_PORT" 4 ||
    fail "the waiters are not all in the new master's queue: $(bg_err w1; bg_err w2; bg_err w3)"
  touch "$T/holder-go"
  for w in holder w1 w2 w3 fresh; do
    bg_wait "$w" 60
    [[ $BG_STATUS == 0 ]] || fail "$w exited $BG_STATUS: $(bg_err "$w")"
  done
  assert_no_overlap
  assert_equal "$(cs_order)" "holder w1 w2 w3 fresh "
  # Each starts within a second of the release before it (a waiter that moved is woken at its
  # grant, not at the end of the claim window).
  local gap prev=holder
  for w in w1 w2 w3 fresh; do
    gap=$((($(cs_start_ns "$w") - $(cs_end_ns "$prev")) / 1000000))
    echo "# $w started ${gap}ms after $prev's release" >&3
    ((gap < 1000)) || fail "$w started ${gap}ms after $prev's release"
    prev=$w
  done
}

# --- sentinels with a password --------------------------------------------------------------------

# sentinels_start_auth PASSWORD: like sentinels_start 3, but the sentinels require PASSWORD
# (requirepass) and use it between themselves (sentinel sentinel-pass). Exports SENTINEL_URL.
sentinels_start_auth() {
  local pass=$1 i conf ports=() hosts=()
  conf=$(_srv_root)/sentinel-auth.conf.template
  mkdir -p "$(dirname "$conf")"
  {
    echo "sentinel monitor mymaster 127.0.0.1 $MASTER_PORT 2"
    echo "sentinel down-after-milliseconds mymaster 1000"
    echo "sentinel failover-timeout mymaster 5000"
    echo "requirepass $pass"
    echo "sentinel sentinel-pass $pass"
  } >"$conf"
  for i in 1 2 3; do
    SRV_PASS=$pass srv_start "sentinel$i" --sentinel "$conf" || fail "could not start sentinel $i"
    ports+=("$SRV_PORT")
    hosts+=("127.0.0.1:$SRV_PORT")
  done
  export SENTINEL_PORTS="${ports[*]}"
  local IFS=,
  export SENTINEL_URL="redis+sentinel://${hosts[*]}/mymaster"
  unset IFS
  local p
  for p in "${ports[@]}"; do
    wait_until -t 10 eval '[[ $(REDISCLI_AUTH=$pass redis-cli -h 127.0.0.1 -p $p sentinel get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p) == "$MASTER_PORT" ]]' ||
      fail "sentinel on $p does not know the master"
  done
}

# One set-up of sentinels with a password for all the ways to give it (or not).
@test "sentinels with a password: --sentinel-password-file or RLOCK_SENTINEL_PASSWORD reaches the master; none given: 69 or 77, with a hint naming the sentinels' password" {
  repl_start
  sentinels_start_auth sentinel-s3cret
  # None given.
  run --separate-stderr rlock run k -u "$SENTINEL_URL" -- touch "$T/ran"
  [[ $status == 69 || $status == 77 ]] || fail "expected 69 or 77, got $status: '$stderr'"
  assert_error_exit "$status"
  # The hint that fixes it names the sentinels' password, not the master's.
  grep -qiE 'sentinel-password|SENTINEL_PASSWORD' <<<"$stderr" ||
    fail "the error does not point at --sentinel-password-file or RLOCK_SENTINEL_PASSWORD: '$stderr'"
  assert_file_not_exists "$T/ran"
  RLOCK_SENTINEL_PASSWORD=wrong-pass run --separate-stderr rlock run k -u "$SENTINEL_URL" -- touch "$T/ran"
  [[ $status == 69 || $status == 77 ]] || fail "wrong password: expected 69 or 77, got $status: '$stderr'"
  [[ $stderr != *wrong-pass* ]] || fail "the password shows on stderr: '$stderr'"
  assert_file_not_exists "$T/ran"
  # --sentinel-password-file.
  printf 'sentinel-s3cret\n' >"$T/sentinel.pass"
  chmod 600 "$T/sentinel.pass"
  run --separate-stderr rlock run k -u "$SENTINEL_URL" --sentinel-password-file "$T/sentinel.pass" -- \
    sh -c 'redis-cli -p "$0" exists "rlock:{k}"' "$MASTER_PORT"
  assert_success
  assert_output 1
  [[ $stderr != *sentinel-s3cret* ]] || fail "the password shows on stderr: '$stderr'"
  # RLOCK_SENTINEL_PASSWORD.
  RLOCK_SENTINEL_PASSWORD=sentinel-s3cret run --separate-stderr rlock run k -u "$SENTINEL_URL" -- \
    sh -c 'redis-cli -p "$0" exists "rlock:{k}"' "$MASTER_PORT"
  assert_success
  assert_output 1
}
