# Helpers of the Redlock suite (tests/redlock.bats): N independent masters m1..mN, each a
# redis-server of servers.bash's srv_start on its own free loopback port, that a test can kill,
# restart empty on the same port, stop (SIGSTOP) and resume. Load it after helpers/common and
# helpers/servers.
#
#   masters_start N    starts m1..mN; sets M_PORT[i], M_PID[i] and U (the -u URL arguments)
#   m_url I            redis://127.0.0.1:PORT of master I
#   mcli I ARGS...     redis-cli on master I
#   m_kill I           SIGKILL, and wait until it is gone
#   m_restart I        kill, then a fresh empty server on the same port
#   m_stop I / m_cont I  SIGSTOP / SIGCONT (connections are accepted, nothing is answered)

M_PORT=()
M_PID=()
M_STOPPED=()
U=()

masters_start() {
  local n=$1 i
  for i in $(seq 1 "$n"); do
    # With appendonly, a master counts at once: one started less than a TTL ago without it does
    # not (it may have lost a lock in a restart). m_restart starts them again without it.
    srv_start "m$i" --appendonly yes --appendfsync no || fail "could not start master m$i"
    M_PORT[i]=$SRV_PORT
    M_PID[i]=$SRV_PID
  done
  masters_urls
}

# masters_urls: U=(-u URL1 -u URL2 ...) for every master started.
masters_urls() {
  local i
  U=()
  for i in "${!M_PORT[@]}"; do
    U+=(-u "$(m_url "$i")")
  done
}

# The masters' URLs as one text, separated by $1 (default a space), as RLOCK_URL takes them.
m_url_list() {
  local sep=${1:- } i out=""
  for i in "${!M_PORT[@]}"; do
    out+="${out:+$sep}$(m_url "$i")"
  done
  echo "$out"
}

m_url() { echo "redis://127.0.0.1:${M_PORT[$1]}"; }

mcli() {
  local i=$1
  shift
  srv_cli "${M_PORT[i]}" "$@"
}

m_kill() {
  [[ -n ${M_PID[$1]:-} ]] || return 0
  srv_kill "${M_PID[$1]}"
  M_PID[$1]=
}

m_stop() {
  kill -STOP "${M_PID[$1]}"
  M_STOPPED[$1]=1
}
m_cont() {
  kill -CONT "${M_PID[$1]}"
  M_STOPPED[$1]=
}

# m_restart I: master I killed and started again on its port with nothing in it (no
# persistence), as after a crash of a server without AOF or RDB.
m_restart() {
  local i=$1 port=${M_PORT[$1]} dir pid attempt
  m_kill "$i"
  for attempt in $(seq 1 50); do
    dir=$(_srv_root)/m$i.$attempt.$RANDOM
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
      --daemonize no --logfile "$dir/redis.log" </dev/null >>"$dir/stdout.log" 2>&1 3>&- &
    pid=$!
    disown "$pid" 2>/dev/null || true
    _srv_record "$pid"
    if wait_until -t 10 _m_up_or_gone "$port" "$pid" && pid_alive "$pid"; then
      M_PID[i]=$pid
      return 0
    fi
    kill -KILL "$pid" 2>/dev/null || true
    nap 0.1
  done
  fail "could not restart master m$i on port $port"
}
_m_up_or_gone() { pid_gone "$2" || _srv_is "$1" "$2"; }

# The masters on which lock KEY (default prefix) exists (of those running and not stopped).
held_on() {
  local key=$1 i out=()
  for i in "${!M_PORT[@]}"; do
    [[ -n ${M_PID[i]:-} && -z ${M_STOPPED[i]:-} ]] || continue
    [[ $(mcli "$i" exists "rlock:{$key}" 2>/dev/null) == 1 ]] && out+=("$i")
  done
  echo "${out[@]}"
}

# How many masters hold lock KEY.
held_count() {
  local on
  on=$(held_on "$1")
  wc -w <<<"$on" | tr -d ' '
}

# Whether lock KEY is on no master / on every live master.
# (After a run's release, or a keeper's, wait for it: that release reads the masters' answers only
# until they decide, and a master still to answer runs it a moment later.)
free_everywhere() { [[ $(held_count "$1") == 0 ]]; }
held_everywhere() {
  local i n=0
  for i in "${!M_PORT[@]}"; do [[ -n ${M_PID[i]:-} && -z ${M_STOPPED[i]:-} ]] && n=$((n + 1)); done
  [[ $(held_count "$1") == "$n" ]]
}

# fences_increase FILE: every line (a fence) is larger than the one before; prints the first
# offender.
fences_increase() {
  awk 'NR > 1 && $1 + 0 <= prev + 0 { print "line " NR ": " $1 " after " prev; bad = 1; exit } { prev = $1 } END { exit bad }' "$1"
}
