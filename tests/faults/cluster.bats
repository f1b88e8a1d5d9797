#!/usr/bin/env bats
# Redis Cluster with a dead master: the URL naming the dead node is "unavailable" (69, never
# busy), a URL naming a live node still serves the keys of the live masters, and a key whose
# slot lived on the dead master is 69 within the timeouts.
#
# The cluster (3 masters, no replicas) serves the slots it still covers
# (cluster-require-full-coverage no), as a cluster that lost a master without a replica does
# when so configured.

load ../helpers/common
load ../helpers/servers
load helpers/faults

BATS_TEST_TIMEOUT=90

setup() {
  faults_setup
}

teardown() {
  common_teardown
}

# key_on PORT: prints a key whose lock's slot ({key}) is owned by the master on PORT.
key_on() {
  local i
  for i in $(seq 1 200); do
    if [[ $(cluster_port_of "rlock:{key$i}") == "$1" ]]; then
      echo "key$i"
      return 0
    fi
  done
  return 1
}

@test "cluster, one master dead: its URL is 69, a live node serves live slots, its slots are 69" {
  cluster_start 3
  local p
  # (A node timeout of 1s: the live masters mark the dead one failed a second sooner.)
  for p in $CLUSTER_PORTS; do
    srv_cli "$p" config set cluster-require-full-coverage no cluster-node-timeout 1000 >/dev/null
  done
  local ports=($CLUSTER_PORTS) pids=($CLUSTER_PIDS)
  local live_port=${ports[0]} dead_port=${ports[2]} dead_pid=${pids[2]}
  local live_key dead_key
  live_key=$(key_on "$live_port") || fail "no key on the first master"
  dead_key=$(key_on "$dead_port") || fail "no key on the third master"
  # The cluster works through any node before the fault.
  run --separate-stderr rlock run "$dead_key" -n -u "redis://127.0.0.1:$live_port" -- echo ran
  assert_success
  assert_output ran

  srv_kill "$dead_pid"
  local t0 took
  t0=$(now_ms)
  run --separate-stderr timeout 20 rlock run "$live_key" -n --connect-timeout 500ms --io-timeout 1s \
    -u "redis://127.0.0.1:$dead_port" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  assert_file_not_exists "$T/ran"
  ((took < 5000)) || fail "the dead node's URL took ${took}ms"

  run --separate-stderr timeout 20 rlock run "$live_key" -n --connect-timeout 500ms --io-timeout 1s \
    -u "redis://127.0.0.1:$live_port" -- echo ran
  assert_success
  assert_output ran

  t0=$(now_ms)
  run --separate-stderr timeout 30 rlock run "$dead_key" -n --connect-timeout 500ms --io-timeout 1s \
    -u "redis://127.0.0.1:$live_port" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  assert_file_not_exists "$T/ran"
  ((took < 10000)) || fail "a key of the dead master's slots took ${took}ms"

  # Once the others have marked it failed, the same: 69 for its slots, live slots still served.
  wait_until -t 20 eval '[[ $(srv_cli "$live_port" cluster nodes 2>/dev/null | grep -c "fail[ ,]") -ge 1 ]]' ||
    fail "the live nodes did not mark the dead master as failed"
  run --separate-stderr timeout 30 rlock run "$dead_key" -n --connect-timeout 500ms --io-timeout 1s \
    -u "redis://127.0.0.1:$live_port" -- touch "$T/ran"
  assert_error_exit 69
  run --separate-stderr timeout 20 rlock run "$live_key" -n --connect-timeout 500ms --io-timeout 1s \
    -u "redis://127.0.0.1:$live_port" -- echo ran
  assert_success
  assert_output ran
}

# cluster_with_replicas: 3 masters and 3 replicas (cluster-node-timeout 1s, so a dead master's
# replica is promoted within a few seconds; no delay before a replica's full sync, which would
# otherwise wait 5s). Waits until every node knows the 3 replicas. Sets CLUSTER_PORTS,
# CLUSTER_PIDS.
cluster_with_replicas() {
  local i ports=() pids=() addrs=()
  for i in 1 2 3 4 5 6; do
    srv_start "node$i" --bus --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 1000 --repl-diskless-sync-delay 0 || fail "could not start cluster node $i"
    ports+=("$SRV_PORT")
    pids+=("$SRV_PID")
    addrs+=("127.0.0.1:$SRV_PORT")
  done
  export CLUSTER_PORTS="${ports[*]}" CLUSTER_PIDS="${pids[*]}"
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$T/create.log" 2>&1 ||
    fail "redis-cli --cluster create failed: $(tail -n 5 "$T/create.log")"
  wait_until -t 30 cluster_ready || fail "the cluster did not reach cluster_state:ok"
  wait_until -t 10 replicas_known || fail "the nodes do not all know the 3 replicas"
}

# Whether every node of CLUSTER_PORTS lists 3 replicas.
replicas_known() {
  local p
  for p in $CLUSTER_PORTS; do
    [[ $(srv_cli "$p" cluster nodes 2>/dev/null | awk '$3 ~ /slave/' | wc -l) == 3 ]] || return 1
  done
}

# replica_port_of MASTER_PORT OTHER_PORT: the port of the replica of the master on MASTER_PORT, as
# the node on OTHER_PORT knows it.
replica_port_of() {
  local master=$1 other=$2 id replica
  id=$(srv_cli "$other" cluster nodes | awk -v a="127.0.0.1:$master@" 'index($2, a) == 1 {print $1}')
  [[ -n $id ]] || return 1
  replica=$(srv_cli "$other" cluster nodes | awk -v m="$id" '$4 == m {split($2, a, "[:@]"); print a[2]}')
  [[ -n $replica ]] || return 1
  echo "$replica"
}

# replicated MASTER_PORT KEY: whether a replica of the master on MASTER_PORT has acknowledged
# every write made there so far (the lock of KEY, rlock's function library): a write in KEY's
# slot, then WAIT on the same connection (WAIT waits for the connection's own last write), for
# at most 10s. Replication is asynchronous: a master killed before its replica has the lock
# loses it, as rlock(7) says; the tests of rlock following a failover must not depend on that.
replicated() {
  local acked
  acked=$(printf 'SET rlock-test-sync{%s} 1\nWAIT 1 10000\n' "$2" | srv_cli "$1" | tail -n 1 | tr -d '\r')
  [[ $acked =~ ^[0-9]+$ ]] && ((acked >= 1))
}

# promote_replica_of REPLICA_PORT: after its master died, makes the replica on REPLICA_PORT master
# at once (CLUSTER FAILOVER TAKEOVER) rather than wait seconds for the cluster's own election,
# which on a loaded machine can miss its window and retry after seconds more. What is tested is
# rlock following the slot to the promoted replica, not the cluster's election.
promote_replica_of() {
  local replica=$1
  srv_cli "$replica" cluster failover takeover >/dev/null || fail "CLUSTER FAILOVER TAKEOVER failed on $replica"
  wait_until -t 10 eval '[[ $(srv_cli "$replica" role 2>/dev/null | head -n 1) == master ]]' ||
    fail "the replica on port $replica was not promoted"
}

# Whether the keeper's log shows a renewal after it asked another Cluster node for the slot.
keeper_renewed_after_failover() {
  sed -n '/asking Cluster node/,$p' "$T/keeper.log" | grep -q "renewed $KEEPER_KEY"
}

# Whether the run's stderr shows a renewal after it asked another Cluster node for the slot.
holder_renewed_after_failover() {
  sed -n '/asking Cluster node/,$p' "$T/holder.err" | grep -q "renewed k"
}

# One failover, two holders of locks on the master that dies: a run (lock k) and a keeper (a lock
# whose slot is on the same master), each through the master's own URL, so that after it dies
# they know the others only from the slot map they read at their first renewal. Their 6s leases
# are renewed every 2s; the replica is promoted at once, and the run's --kill-after of 1s leaves
# it nearly 3s of retries after its first renewal on the dead master.
@test "a Cluster master fails over under a run and a keeper: their renewals follow the slot, no lock is lost" {
  cluster_with_replicas
  local ports=($CLUSTER_PORTS) pids=($CLUSTER_PIDS) master="" pid="" other="" replica="" i
  master=$(cluster_port_of "$(lock_key k)") || fail "no node owns the slot of k"
  for i in "${!ports[@]}"; do
    if [[ ${ports[$i]} == "$master" ]]; then pid=${pids[$i]}; else other=${ports[$i]}; fi
  done
  replica=$(replica_port_of "$master" "$other") || fail "no replica of the master on port $master"
  KEEPER_KEY=$(key_on "$master") || fail "no other key on the master of k"
  bg holder rlock run k -v -t 6s --kill-after 1s -u "redis://127.0.0.1:$master" -- "$CS" "$WLOG" holder "until:$T/holder-go"
  # The keeper holds its lock for the shell that called acquire, which then sleeps (a script's
  # long step).
  bg script sh -c "rlock acquire $KEEPER_KEY --keepalive -t 6s -u redis://127.0.0.1:$master \
    --keeper-log '$T/keeper.log' >'$T/token' && exec sleep 60"
  wait_cs holder holder
  wait_until -t 10 grep -q "renewed k" "$T/holder.err" || fail "no renewal: $(bg_err holder)"
  wait_until -t 10 grep -q "renewed $KEEPER_KEY" "$T/keeper.log" || fail "no renewal: $(cat "$T/keeper.log")"
  replicated "$master" k || fail "no replica of $master acknowledged the lock"
  replicated "$master" "$KEEPER_KEY" || fail "no replica of $master acknowledged the keeper's lock"
  srv_kill "$pid"
  promote_replica_of "$replica"
  # The run holds on until its renewal went to the promoted replica; it then ends cleanly.
  wait_until -t 40 holder_renewed_after_failover || fail "no renewal on the promoted replica: $(bg_err holder)"
  touch "$T/holder-go"
  bg_wait holder 20
  [[ $BG_STATUS == 0 ]] || fail "expected 0 after the failover, got $BG_STATUS: $(bg_err holder)"
  assert_no_overlap
  wait_until -t 40 keeper_renewed_after_failover || fail "no renewal on the promoted replica: $(cat "$T/keeper.log")"
  run --separate-stderr rlock status "$KEEPER_KEY" -u "redis://127.0.0.1:$other"
  assert_success
  refute grep -q "lost" "$T/keeper.log"
  kill "$script_pid"
  wait_until -t 15 grep -q "released $KEEPER_KEY" "$T/keeper.log" || fail "the keeper did not release: $(cat "$T/keeper.log")"
}

# Whether N contenders wait in the queue of lock k on the node on PORT.
queue_on_is() { [[ $(srv_cli "$1" zcard 'rlock:{k}:q' 2>/dev/null | tr -d '\r') == "$2" ]]; }

# Whether the node on PORT names the node on OWNER as the owner of lock k's slot (MOVED there).
names_owner() { [[ $(srv_cli "$1" exists 'rlock:{k}' 2>&1 | tr -d '\r') == *":$2" ]]; }

# A waiter's wait step is left unread on a master that is stopped (the waiter, stopped a moment,
# is woken by a push and sends the step once the master is stopped; a long --io-timeout keeps it
# waiting). The master's replica is promoted (CLUSTER FAILOVER TAKEOVER), a new holder takes the
# lock there, then the old master is continued: it reads the step before it hears of the
# promotion, still owns the slot as it sees it, and grants the lock to the waiter (the first
# holder's lease ran out there). That grant must not start the waiter's command: the other
# masters name the promoted replica. The witness is independent: no two critical sections
# overlap, and the waiter's runs after the new holder's.
@test "a waiter granted the lock by a Cluster master whose replica was promoted does not run its command then" {
  cluster_with_replicas
  local ports=($CLUSTER_PORTS) pids=($CLUSTER_PIDS) master="" pid="" other="" replica="" i
  master=$(cluster_port_of "$(lock_key k)") || fail "no node owns the slot of k"
  for i in "${!ports[@]}"; do
    [[ ${ports[$i]} == "$master" ]] && pid=${pids[$i]}
  done
  for i in "${ports[@]}"; do
    [[ $i != "$master" ]] && other=$i && break
  done
  replica=$(replica_port_of "$master" "$other") || fail "no replica of $master"
  for i in "${ports[@]}"; do
    [[ $i != "$master" && $i != "$replica" ]] && other=$i && break
  done
  bg holder rlock run k -t 2s -u "redis://127.0.0.1:$master" -- "$CS" "$WLOG" holder "until:$T/holder-go"
  wait_cs holder holder
  bg waiter rlock run -v k -t 30s -w 90s --io-timeout 30s -u "redis://127.0.0.1:$master" -- "$CS" "$WLOG" waiter 1
  wait_until -t 10 queue_on_is "$master" 1 || fail "the waiter did not queue: $(bg_err waiter)"
  replicated "$master" k || fail "no replica of $master acknowledged the queue"
  local id
  id=$(srv_cli "$master" zrange 'rlock:{k}:q' 0 0 | tr -d '\r')
  [[ -n $id ]] || fail "no waiter in the queue"

  # The waiter's next step goes to the master once it is stopped.
  kill -STOP "$waiter_pid"
  srv_cli "$master" lpush "rlock:{k}:mb:$id" 1 >/dev/null
  kill -STOP "$pid"
  kill -CONT "$waiter_pid"
  srv_cli "$replica" cluster failover takeover >/dev/null || {
    kill -CONT "$pid"
    fail "CLUSTER FAILOVER TAKEOVER failed on $replica"
  }
  wait_until -t 10 names_owner "$other" "$replica" || {
    kill -CONT "$pid"
    fail "the other masters do not name the promoted replica $replica"
  }
  # The first holder follows the failover (or loses its lock); a new one takes the lock.
  stale_grant_is_refused "redis://127.0.0.1:$other" "$pid"
}
