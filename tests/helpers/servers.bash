# Server set-ups with more than one redis-server, or servers that need more than common.bash's
# redis_start: TLS servers, a master with replicas and sentinels, a Redis Cluster.
# Load it after helpers/common:
#
#   load helpers/common
#   load helpers/servers
#
# Every server listens on 127.0.0.1 only, on a random free port, in its own directory.
#
# Servers started inside a test (setup or the test body) are recorded in the test's .bg_pids and
# carry the test's RLOCKTEST_MARK, so common_teardown kills them even when the test failed.
# Servers started in setup_file (for a whole file, e.g. a cluster) are recorded in the file's
# list; call servers_teardown_file from teardown_file to kill them. A watchdog kills them too
# when the bats process of the file goes away without running teardown_file (killed by a CI
# time-out, say), so no server outlives its suite.

# ---------------------------------------------------------------------------------------------
# Bookkeeping

# The directory under which servers of the current scope keep their files.
_srv_root() {
  if [[ -n ${BATS_TEST_TMPDIR:-} ]]; then
    echo "$BATS_TEST_TMPDIR/srv"
  else
    echo "$BATS_FILE_TMPDIR/srv"
  fi
}

# Records server pid $1 for the current scope (a test, or the file).
_srv_record() {
  if [[ -n ${BATS_TEST_TMPDIR:-} ]]; then
    echo "$1" >>"$BATS_TEST_TMPDIR/.bg_pids"
  else
    echo "$1" >>"$BATS_FILE_TMPDIR/.server_pids"
    _srv_watchdog
  fi
}

# Starts (once per file) a process that kills the file's servers when the bats process that ran
# setup_file ($$ there) is gone.
_srv_watchdog() {
  [[ -s $BATS_FILE_TMPDIR/.watchdog_pid ]] && return 0
  perl -e '
    my ($watch, $list) = @ARGV;
    $0 = "rlock-test-watchdog";
    while (kill(0, $watch)) { select(undef, undef, undef, 0.5); }
    if (open(my $f, "<", $list)) {
      my @pids = grep { /^\d+$/ } map { chomp; $_ } <$f>;
      kill("KILL", @pids) if @pids;
    }
  ' "$$" "$BATS_FILE_TMPDIR/.server_pids" </dev/null >/dev/null 2>&1 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/.watchdog_pid"
  disown $! 2>/dev/null || true
}

# servers_teardown_file: kills every server started in setup_file, and the watchdog.
servers_teardown_file() {
  local pids=() p
  [[ -f $BATS_FILE_TMPDIR/.server_pids ]] && mapfile -t pids <"$BATS_FILE_TMPDIR/.server_pids"
  for p in "${pids[@]}"; do
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait_until -t 5 pid_gone "$p" || true
  done
  rm -f "$BATS_FILE_TMPDIR/.server_pids"
  if [[ -s $BATS_FILE_TMPDIR/.watchdog_pid ]]; then
    p=$(cat "$BATS_FILE_TMPDIR/.watchdog_pid")
    kill -KILL "$p" 2>/dev/null || true
    rm -f "$BATS_FILE_TMPDIR/.watchdog_pid"
  fi
  rm -rf "$BATS_FILE_TMPDIR/srv"
  return 0
}

# ---------------------------------------------------------------------------------------------
# One plain redis-server for a whole file

# shared_redis_start: in setup_file, one redis-server for the tests of the file that do not
# stop, restart or reconfigure it beyond what shared_redis sets. Exports SHARED_PORT.
shared_redis_start() {
  srv_start shared || return 1
  export SHARED_PORT=$SRV_PORT
}

# shared_redis [MAXMEMORY POLICY]: in a test (or setup), the file's server as the test's own
# (REDIS_PORT, RLOCK_URL, as redis_start exports them), emptied, with that maxmemory and
# maxmemory-policy (default: none, noeviction) and its statistics reset: one redis-cli.
shared_redis() {
  [[ -n ${SHARED_PORT:-} ]] || fail "shared_redis: no shared_redis_start in setup_file"
  export REDIS_PORT=$SHARED_PORT
  export RLOCK_URL="redis://127.0.0.1:$REDIS_PORT"
  local out
  out=$(printf '%s\n' flushall "config set maxmemory ${1:-0}" "config set maxmemory-policy ${2:-noeviction}" \
    "config resetstat" | rcli)
  [[ $out == $'OK\nOK\nOK\nOK' ]] || fail "could not set up the shared redis-server: $out"
}

# ---------------------------------------------------------------------------------------------
# Ports

# srv_free_port [BUS]: a port in 20000-54999 on which nothing listens; with BUS=1 the cluster bus
# port (port + 10000) is free too.
srv_free_port() {
  local bus=${1:-0} p
  while :; do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 35000))
    port_in_use "$p" && continue
    ((bus)) && port_in_use $((p + 10000)) && continue
    break
  done
  echo "$p"
}

# ---------------------------------------------------------------------------------------------
# Starting one server

# redis-cli flags for the TLS servers of tls_setup_file (verification off: the tests check
# rlock's verification, not redis-cli's; the client certificate is sent for the servers that
# require one).
SRV_TLS_CLI=()

# srv_cli PORT [REDIS-CLI ARGS...]: redis-cli on 127.0.0.1:PORT. SRV_PASS (when set) is the
# password; SRV_CLI_TLS=1 talks TLS (with SRV_TLS_CLI).
srv_cli() {
  local port=$1
  shift
  local pre=() tls=()
  [[ -n ${SRV_PASS:-} ]] && pre=(env "REDISCLI_AUTH=$SRV_PASS")
  [[ ${SRV_CLI_TLS:-0} == 1 ]] && tls=(--tls "${SRV_TLS_CLI[@]}")
  "${pre[@]}" redis-cli "${tls[@]}" -h 127.0.0.1 -p "$port" "$@"
}

# Whether the server on PORT answers and is the process PID (not one of another suite).
_srv_is() {
  local port=$1 pid=$2 info
  info=$(srv_cli "$port" info server 2>/dev/null | tr -d '\r')
  [[ $info == *"process_id:$pid"* ]]
}

# srv_start NAME [--tls] [--bus] [--sentinel CONF] [REDIS ARGS...]
# Starts a redis-server called NAME (its directory is $(_srv_root)/NAME, its log redis.log there)
# on a free port and waits (10s at most) until it answers. Sets SRV_PORT and SRV_PID.
#   --tls            listen with TLS only (--port 0 --tls-port PORT); pass the --tls-* options
#                    in REDIS ARGS; the readiness check uses SRV_TLS_CLI
#   --bus            the port + 10000 must be free too (Redis Cluster bus)
#   --sentinel CONF  a sentinel: CONF is copied into the directory (sentinels rewrite it)
# Returns 1 (after trying 20 ports) when it does not come up.
srv_start() {
  local name=$1
  shift
  local use_tls=0 bus=0 sentinel_conf=""
  while (($#)); do
    case $1 in
      --tls) use_tls=1 ;;
      --bus) bus=1 ;;
      --sentinel)
        sentinel_conf=$2
        shift
        ;;
      *) break ;;
    esac
    shift
  done
  local dir
  dir=$(_srv_root)/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  local port pid cmd deadline up _
  for _ in $(seq 1 20); do
    port=$(srv_free_port "$bus")
    if [[ -n $sentinel_conf ]]; then
      cp "$sentinel_conf" "$dir/sentinel.conf"
      cmd=(redis-server "$dir/sentinel.conf" --sentinel --port "$port" --bind 127.0.0.1 --dir "$dir"
        --daemonize no --logfile "$dir/redis.log")
    elif ((use_tls)); then
      cmd=(redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir"
        --daemonize no --logfile "$dir/redis.log")
    else
      cmd=(redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir"
        --daemonize no --logfile "$dir/redis.log")
    fi
    "${cmd[@]}" "$@" </dev/null >>"$dir/stdout.log" 2>&1 3>&- &
    pid=$!
    disown "$pid" 2>/dev/null || true
    _srv_record "$pid"
    deadline=$(($(now_ms) + 10000))
    up=0
    while (($(now_ms) < deadline)); do
      pid_gone "$pid" && break
      if SRV_CLI_TLS=$use_tls _srv_is "$port" "$pid"; then
        up=1
        break
      fi
      nap 0.02
    done
    if ((up)); then
      SRV_PORT=$port
      SRV_PID=$pid
      return 0
    fi
    kill -KILL "$pid" 2>/dev/null || true
    wait_until -t 2 pid_gone "$pid" || true
    # Not a port clash: the server refuses its configuration; trying more ports will not help.
    grep -q -i 'address already in use' "$dir/redis.log" "$dir/stdout.log" 2>/dev/null || break
  done
  echo "could not start $name; log:" >&2
  tail -n 20 "$dir/redis.log" "$dir/stdout.log" >&2 2>/dev/null
  return 1
}

# srv_kill PID: kills one server at once and waits until it is gone.
srv_kill() {
  kill -KILL "$1" 2>/dev/null || true
  wait_until -t 5 pid_gone "$1" || true
}

# ---------------------------------------------------------------------------------------------
# TLS

# tls_make_certs DIR: writes test certificates into DIR (call from setup_file):
#   ca.pem, ca.key            the test CA
#   ca2.pem                   an unrelated CA
#   server.pem, server.key    for localhost and 127.0.0.1, signed by ca
#   wronghost.pem/.key        for wrong.example.invalid only, signed by ca
#   expired.pem/.key          for localhost and 127.0.0.1, valid 2020-01-01 to 2020-01-02, by ca
#   client.pem, client.key    a client certificate signed by ca
#   client2.pem, client2.key  a client certificate signed by ca2
#   bundle.pem                ca2 and ca in one file
tls_make_certs() {
  local d=$1
  mkdir -p "$d"
  (
    set -e
    cd "$d"
    cat >openssl.cnf <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = rlock test
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
[wronghost_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:wrong.example.invalid
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
[ca]
default_ca = test_ca
[test_ca]
dir = .
database = ./index.txt
new_certs_dir = ./newcerts
certificate = ./ca.pem
private_key = ./ca.key
serial = ./serial
default_md = sha256
policy = any_policy
unique_subject = no
copy_extensions = none
email_in_dn = no
[any_policy]
commonName = supplied
CNF
    local key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -config openssl.cnf -x509 "${key[@]}" -keyout ca.key -out ca.pem -days 3650 \
      -subj "/CN=rlock test CA" -extensions ca_ext 2>/dev/null
    openssl req -config openssl.cnf -x509 "${key[@]}" -keyout ca2.key -out ca2.pem -days 3650 \
      -subj "/CN=rlock unrelated CA" -extensions ca_ext 2>/dev/null
    # sign NAME CN EXT CA: NAME.key and NAME.pem, signed by CA for `days` days
    sign() {
      openssl req -config openssl.cnf -new "${key[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA "$4.pem" -CAkey "$4.key" -CAcreateserial -days 3650 \
        -extfile openssl.cnf -extensions "$3" -out "$1.pem" 2>/dev/null
    }
    sign server localhost server_ext ca
    sign wronghost wrong.example.invalid wronghost_ext ca
    sign client rlock-client client_ext ca
    sign client2 rlock-client client_ext ca2
    # An expired certificate: `openssl ca` takes explicit validity dates.
    mkdir -p newcerts
    : >index.txt
    echo 1000 >serial
    openssl req -config openssl.cnf -new "${key[@]}" -keyout expired.key -out expired.csr -subj "/CN=localhost" 2>/dev/null
    openssl ca -config openssl.cnf -batch -notext -startdate 20200101000000Z -enddate 20200102000000Z \
      -extensions server_ext -in expired.csr -out expired.pem 2>/dev/null
    cat ca2.pem ca.pem >bundle.pem
    chmod 644 ./*.pem ./*.key
  )
  local f
  for f in ca.pem ca2.pem server.pem server.key wronghost.pem expired.pem client.pem client.key client2.pem bundle.pem; do
    [[ -s $d/$f ]] || {
      echo "tls_make_certs: $f was not made" >&2
      return 1
    }
  done
  # The expired one must be expired, the others valid: the tests rely on it.
  ! openssl x509 -in "$d/expired.pem" -noout -checkend 0 >/dev/null || return 1
  openssl verify -CAfile "$d/ca.pem" "$d/server.pem" >/dev/null || return 1
}

# tls_start CERTNAME [REDIS ARGS...]: a redis-server that speaks TLS only, with the certificate
# CERTNAME.pem/.key from $TLS_DIR and the test CA as the CA for client certificates (client
# certificates are not required unless REDIS ARGS say --tls-auth-clients yes). Exports
# TLS_PORT, TLS_PID, REDIS_PID and RLOCK_TLS_URL=rediss://127.0.0.1:PORT. Its name (and
# directory) is tls-CERTNAME, or TLS_NAME when set (two servers with one certificate).
tls_start() {
  local cert=$1
  shift
  SRV_TLS_CLI=(--insecure --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client.key")
  srv_start "${TLS_NAME:-tls-$cert}" --tls --tls-cert-file "$TLS_DIR/$cert.pem" --tls-key-file "$TLS_DIR/$cert.key" \
    --tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no "$@" || fail "could not start a TLS redis-server"
  export TLS_PORT=$SRV_PORT TLS_PID=$SRV_PID
  export RLOCK_TLS_URL="rediss://127.0.0.1:$TLS_PORT"
}

# tcli [REDIS-CLI ARGS...]: redis-cli on the TLS server of tls_start.
tcli() {
  SRV_CLI_TLS=1 srv_cli "$TLS_PORT" "$@"
}

# ---------------------------------------------------------------------------------------------
# Master, replica, sentinels

# repl_start [REDIS ARGS...]: a master and one replica of it (both get REDIS ARGS; with
# SRV_PASS set, both require it and the replica authenticates with it). Waits until the replica
# is in sync. Exports MASTER_PORT, MASTER_PID, REPLICA_PORT, REPLICA_PID.
repl_start() {
  local auth=()
  [[ -n ${SRV_PASS:-} ]] && auth=(--requirepass "$SRV_PASS" --masterauth "$SRV_PASS")
  # No delay before a full sync (the default waits 5s for more replicas).
  srv_start master --repl-diskless-sync-delay 0 "${auth[@]}" "$@" || fail "could not start the master"
  export MASTER_PORT=$SRV_PORT MASTER_PID=$SRV_PID
  srv_start replica --repl-diskless-sync-delay 0 --replicaof 127.0.0.1 "$MASTER_PORT" "${auth[@]}" "$@" ||
    fail "could not start the replica"
  export REPLICA_PORT=$SRV_PORT REPLICA_PID=$SRV_PID
  wait_until -t 10 replica_in_sync "$REPLICA_PORT" || fail "the replica did not sync with the master"
}

# Whether the replica on PORT has its link to the master up.
replica_in_sync() {
  srv_cli "$1" info replication 2>/dev/null | tr -d '\r' | grep -qx 'master_link_status:up'
}

# sentinels_start [N]: N (default 3) sentinels monitoring the master of repl_start as
# "mymaster" (quorum 2, down after 1s, failover timeout 5s). Each sends its hello and asks the
# others about the master every 500ms instead of every 2s and 1s (SENTINEL DEBUG, Redis 7), so
# that the sentinels find each other within a second and agree on a failover sooner. Waits until
# each knows the master and the replica. Exports SENTINEL_PORTS ("P1 P2 P3"), SENTINEL_PIDS and
# SENTINEL_URL=redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/mymaster.
sentinels_start() {
  local n=${1:-3} i conf ports=() pids=() hosts=()
  conf=$(_srv_root)/sentinel.conf.template
  mkdir -p "$(dirname "$conf")"
  {
    echo "sentinel monitor mymaster 127.0.0.1 $MASTER_PORT 2"
    echo "sentinel down-after-milliseconds mymaster 1000"
    echo "sentinel failover-timeout mymaster 5000"
    echo "sentinel parallel-syncs mymaster 1"
    [[ -n ${SRV_PASS:-} ]] && echo "sentinel auth-pass mymaster $SRV_PASS"
  } >"$conf"
  for i in $(seq 1 "$n"); do
    SRV_PASS='' srv_start "sentinel$i" --sentinel "$conf" || fail "could not start sentinel $i"
    scli "$SRV_PORT" sentinel debug publish-period 500 ask-period 500 >/dev/null 2>&1 || true
    ports+=("$SRV_PORT")
    pids+=("$SRV_PID")
    hosts+=("127.0.0.1:$SRV_PORT")
  done
  export SENTINEL_PORTS="${ports[*]}" SENTINEL_PIDS="${pids[*]}"
  local IFS=,
  export SENTINEL_URL="redis+sentinel://${hosts[*]}/mymaster"
  unset IFS
  local p
  for p in $SENTINEL_PORTS; do
    wait_until -t 10 sentinel_sees_replica "$p" || fail "sentinel on $p does not see the replica"
  done
}

# scli PORT [ARGS...]: redis-cli on a sentinel (no password: sentinels have none).
scli() {
  local port=$1
  shift
  redis-cli -h 127.0.0.1 -p "$port" "$@"
}

# The port of the master sentinel on PORT names for mymaster.
sentinel_master_port() {
  scli "$1" sentinel get-master-addr-by-name mymaster 2>/dev/null | tr -d '\r' | sed -n 2p
}

# Whether the sentinel on PORT lists a replica of mymaster that is up (usable for a failover).
sentinel_sees_replica() {
  local out
  out=$(scli "$1" sentinel replicas mymaster 2>/dev/null | tr -d '\r')
  [[ $out == *$'\nflags\nslave\n'* ]]
}

# Whether every sentinel knows the N-1 others (needed for all of them to follow a failover).
sentinels_know_each_other() {
  local p n want
  want=$(($(wc -w <<<"$SENTINEL_PORTS") - 1))
  for p in $SENTINEL_PORTS; do
    n=$(scli "$p" sentinel master mymaster 2>/dev/null | tr -d '\r' | sed -n '/^num-other-sentinels$/{n;p}')
    [[ $n == "$want" ]] || return 1
  done
}

# Whether every sentinel names port $1 as the master.
sentinels_agree_on() {
  local p
  for p in $SENTINEL_PORTS; do
    [[ $(sentinel_master_port "$p") == "$1" ]] || return 1
  done
}

# Whether the server on PORT has role ROLE (master or slave).
role_is() {
  srv_cli "$1" info replication 2>/dev/null | tr -d '\r' | grep -qx "role:$2"
}

# ---------------------------------------------------------------------------------------------
# Redis Cluster

# cluster_start [N]: N (default 3) masters without replicas, slots split evenly by
# `redis-cli --cluster create`; waits until every node says cluster_state:ok and agrees on the
# slot map. With SRV_PASS set, every node requires it. Exports CLUSTER_PORTS ("P1 P2 P3"),
# CLUSTER_PIDS and CLUSTER_URL (node 1).
cluster_start() {
  cluster_start_bg "$@"
  cluster_wait
}

# cluster_start_bg [N]: cluster_start without the wait: starts the nodes, then creates the
# cluster in the background while the caller goes on. A new master says cluster_state:ok no
# sooner than 2s after it started (Redis's own delay, whatever its options), time that a
# setup_file can leave to the tests that do not use the cluster. cluster_wait (in the tests that
# do) waits for it.
cluster_start_bg() {
  local n=${1:-3} i ports=() pids=() addrs=() auth=() cli_auth=()
  if [[ -n ${SRV_PASS:-} ]]; then
    auth=(--requirepass "$SRV_PASS" --masterauth "$SRV_PASS")
    cli_auth=(env "REDISCLI_AUTH=$SRV_PASS")
  fi
  for i in $(seq 1 "$n"); do
    srv_start "node$i" --bus --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 "${auth[@]}" || fail "could not start cluster node $i"
    ports+=("$SRV_PORT")
    pids+=("$SRV_PID")
    addrs+=("127.0.0.1:$SRV_PORT")
  done
  export CLUSTER_PORTS="${ports[*]}" CLUSTER_PIDS="${pids[*]}"
  export CLUSTER_URL="redis://127.0.0.1:${ports[0]}"
  export CLUSTER_LOG
  CLUSTER_LOG=$(_srv_root)/cluster-create.log
  rm -f "$CLUSTER_LOG.status"
  # The status file is written last: "0" once the cluster is ready, else why not in the log.
  # redis-cli and the subshell are recorded with the servers: a redis-cli still waiting for the
  # nodes to join when they are killed (the tests that wait for the cluster were filtered out)
  # would wait for ever, and keep bats waiting for its output.
  (
    rc=0
    "${cli_auth[@]}" redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes &
    _srv_record $!
    wait $! || rc=$?
    if ((rc == 0)) && ! wait_until -t 20 cluster_ready; then
      echo "the cluster did not reach cluster_state:ok"
      rc=1
    fi
    echo "$rc" >"$CLUSTER_LOG.status"
  ) </dev/null >"$CLUSTER_LOG" 2>&1 3>&- &
  _srv_record $!
  disown $! 2>/dev/null || true
}

# cluster_wait: waits until the cluster of cluster_start_bg is ready; fails the test if it is not.
cluster_wait() {
  wait_until -t 30 test -s "$CLUSTER_LOG.status" || fail "the cluster was not created within 30s: $(tail -n 5 "$CLUSTER_LOG")"
  [[ $(cat "$CLUSTER_LOG.status") == 0 ]] || fail "the cluster was not created: $(tail -n 5 "$CLUSTER_LOG")"
  cluster_ready || fail "the cluster is not ok"
}

# Whether every node says cluster_state:ok, knows all nodes, and all 16384 slots are covered.
cluster_ready() {
  local p info n
  n=$(wc -w <<<"$CLUSTER_PORTS")
  for p in $CLUSTER_PORTS; do
    info=$(srv_cli "$p" cluster info 2>/dev/null | tr -d '\r')
    [[ $info == *"cluster_state:ok"* && $info == *"cluster_slots_ok:16384"* && $info == *"cluster_known_nodes:$n"* ]] ||
      return 1
  done
}

# ccli [ARGS...]: redis-cli following redirections (-c), through node 1.
ccli() {
  local first=${CLUSTER_PORTS%% *}
  redis-cli -c -h 127.0.0.1 -p "$first" "$@"
}

# The port of the master that owns the slot of Redis key $1 (the node that answers a command on
# it instead of redirecting).
cluster_port_of() {
  local p out
  for p in $CLUSTER_PORTS; do
    out=$(srv_cli "$p" exists "$1" 2>&1 | tr -d '\r')
    if [[ $out =~ ^[0-9]+$ ]]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# cluster_flush: empties every master.
cluster_flush() {
  local p
  for p in $CLUSTER_PORTS; do
    srv_cli "$p" flushall >/dev/null || return 1
  done
}
