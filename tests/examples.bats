#!/usr/bin/env bats
# The recipes in examples/ and the command lines of README.md's code blocks: every rlock command
# in them documents its exit codes (the convention is in examples/README.md), and exits with
# those codes when run against a throwaway Redis. The commands rlock would run (make,
# ./report.sh...) are stubs; the Redis URL and password come from the environment, a CI
# platform's secrets or a Kubernetes Secret, as each recipe says. README.md's lines that name
# hosts and files (TLS, Sentinel, Cluster, Redlock...) run against servers of those kinds on
# 127.0.0.1, which the test starts, as DOC_MAP below says.

load helpers/common
load helpers/servers

: "${RLOCK_SOURCE_DIR:=$(cd "$BATS_TEST_DIRNAME/.." && pwd)}"
EXTRACT=$BATS_TEST_DIRNAME/helpers/examples-extract

# The commands that the recipes run under a lock, replaced by stubs (on PATH, and as ./NAME in
# the directory where the commands run). A recipe that runs another command adds it here.
STUBS=(make report.sh read-report.sh rebuild-cache.sh start-db-and-test.sh job.sh sync-reports
  nightly-backup nightly-report pg_dump psql)


# Once for the file: the records of examples-extract, and the stubs.
setup_file() {
  local dir=$BATS_FILE_TMPDIR name
  "$EXTRACT" "$RLOCK_SOURCE_DIR" >"$dir/records" || return 1
  mkdir -p "$dir/stubs"
  for name in "${STUBS[@]}"; do
    T=$dir make_stub "$name"
  done
  command -v jq >/dev/null || T=$dir make_stub jq
  # The password of every server of the file. README.md names a Redis Cluster (DOC_MAP): its nodes
  # require that password, and are created while the tests before README.md's run (a new master
  # says cluster_state:ok no sooner than 2s after it started).
  export EXAMPLES_FILE_PASSWORD=pw$RANDOM$RANDOM
  SRV_PASS=$EXAMPLES_FILE_PASSWORD cluster_start_bg 3
  # The `rlock` of the recipes: the binary, and a line "ID STATUS" in EXAMPLES_LOG for each
  # command of a recipe (not for the rlock commands that the binary's children run). ID is
  # EXAMPLES_ID, else FILE:LINE of the call (scripts read this file through BASH_ENV).
  cat >"$dir/wrapper.bash" <<'EOF'
rlock() {
  local id=${EXAMPLES_ID:-${BASH_SOURCE[1]}:${BASH_LINENO[0]}} rc=0
  EXAMPLES_NESTED=1 command rlock "$@" || rc=$?
  [[ -n ${EXAMPLES_NESTED:-} ]] || echo "$id $rc" >>"$EXAMPLES_LOG"
  return "$rc"
}
EOF
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
  cp -r "$BATS_FILE_TMPDIR/stubs" "$T/stubs"
  mkdir -p "$T/work" "$T/runs"
  ln -s "$T"/stubs/* "$T/work/"
  ln -s "$BATS_FILE_TMPDIR/records" "$BATS_FILE_TMPDIR/wrapper.bash" "$T/"
  export PATH="$T/stubs:$PATH"
  export EXAMPLES_LOG=$T/rlock.log EXAMPLES_STUB_LOG=$T/stubs.log
  : >"$EXAMPLES_LOG"
  : >"$EXAMPLES_STUB_LOG"
}

teardown() {
  common_teardown
}

# redis_up: the test's Redis, which requires a password, on a port and a unix socket. Sets URL,
# PASSWORD and SOCKET, and exports URL and PASSWORD as RLOCK_URL and RLOCK_PASSWORD, as a host's
# configuration would give them to rlock.
redis_up() {
  PASSWORD=$EXAMPLES_FILE_PASSWORD
  SOCKET=$T/redis.sock
  export REDIS_PASS=$PASSWORD
  redis_start --requirepass "$PASSWORD" --unixsocket "$SOCKET" --unixsocketperm 700
  URL=$RLOCK_URL
  export RLOCK_PASSWORD=$PASSWORD
  DOC_FLUSH=("REDISCLI_AUTH=\$EXAMPLES_PASSWORD redis-cli -p $REDIS_PORT flushall")
}

# ---------------------------------------------------------------------------------------------
# README.md's hosts and files

# Outside its Examples section, README.md's command lines name the servers and files of a real
# deployment (redis.internal, a Sentinel set, /etc/rlock/ca.pem...). The test runs them against
# throwaway servers of the same kind that it starts on 127.0.0.1, and files of its own: it
# rewrites each URL's host[:port] (each host of a Sentinel list) and each path as this table
# says. Keys: SCHEME://HOST[:PORT] as the URL writes it, unix://PATH for a socket, or a path
# that an rlock option takes. A README line that names a host, or an absolute path among rlock's
# own arguments, that the table does not list fails the test and is not run: the test never
# connects anywhere but the loopback addresses. The kinds:
#   plain         the test's Redis (password PASSWORD); every ACL user that a URL names
#                 (user@host) is created on it, with the URL's password or PASSWORD
#   socket        the unix socket of that same Redis
#   tls           a TLS-only Redis (password PASSWORD) that requires a client certificate; its
#                 certificate (for 127.0.0.1) is signed by the test CA
#   sentinel1..3  the 3 sentinels of a master "mymaster" (password PASSWORD) with one replica
#   cluster       a node of a Redis Cluster of 3 masters (password PASSWORD), made by setup_file
#   redlock1..3   3 independent Redis masters (password PASSWORD): a Redlock quorum
#   password      a file holding PASSWORD
#   ca, cert, key the test CA, and a client certificate and its key, signed by that CA
declare -gA DOC_MAP=(
  [redis://redis.internal]=plain
  [redis://redis.internal:6379]=plain
  [redis://10.0.0.5:6379]=plain
  [unix:///run/redis/redis.sock]=socket
  [rediss://redis.internal:6380]=tls
  [redis+sentinel://s1.internal]=sentinel1
  [redis+sentinel://s2.internal]=sentinel2
  [redis+sentinel://s3.internal]=sentinel3
  [redis://10.0.0.11:7000]=cluster
  [redis://r1.internal]=redlock1
  [redis://r2.internal]=redlock2
  [redis://r3.internal]=redlock3
  [/etc/rlock/password]=password
  [/etc/rlock/ca.pem]=ca
  [/etc/rlock/client.pem]=cert
  [/etc/rlock/client.key]=key
)

# What each kind stands for, once started (doc_start): HOST:PORT, or a path.
declare -gA DOC_TO=()
# Commands that empty the test's Redis and every server started for README.md (shell text).
DOC_FLUSH=()

# rlock's options that say where and how to connect: a lock taken for a "when busy" case must be
# taken where the command looks for it, so the hold gets these options of the command too (and
# the flag --insecure).
DOC_CONNECTION_OPTIONS=(-u --url --node-timeout --connect-timeout --io-timeout --prefix --password-file
  --cacert --cert --key --sentinel-user --sentinel-password-file --config)
DOC_OPTIONS_RE=$(IFS='|' && echo "${DOC_CONNECTION_OPTIONS[*]}")

# The helpers below set variables rather than print (no subshells: they run for every line).

# doc_urls TEXT: sets DOC_URLS to the URLs in TEXT (SCHEME://...).
DOC_URL_RE="[A-Za-z][A-Za-z0-9+.-]*://[^[:space:]\"'()<>]*"
doc_urls() {
  local rest=$1
  DOC_URLS=()
  while [[ $rest =~ $DOC_URL_RE ]]; do
    DOC_URLS+=("${BASH_REMATCH[0]}")
    rest=${rest#*"${BASH_REMATCH[0]}"}
  done
}

# doc_url_parts URL: sets U_SCHEME, U_USERINFO (with its @, or empty), U_HOSTS (an array) and
# U_REST (the path and query, from the first / after the hosts).
doc_url_parts() {
  local url=$1 authority
  U_SCHEME=${url%%://*}
  url=${url#*://}
  if [[ $U_SCHEME == unix ]]; then
    U_USERINFO='' U_HOSTS=() U_REST=$url
    return
  fi
  authority=${url%%[/?]*}
  U_REST=${url:${#authority}}
  U_USERINFO=''
  [[ $authority == *@* ]] && U_USERINFO=${authority%@*}@
  authority=${authority##*@}
  IFS=, read -r -a U_HOSTS <<<"$authority"
}

# doc_paths TEXT: sets DOC_PATHS to the absolute paths among rlock's own arguments in TEXT
# (before the command rlock runs, `--` or -c, and the next shell command), longest first; of an
# export line, in its value.
doc_paths() {
  local text=" $1 " w words i j
  text=${text%% -- *}
  text=${text%% -c *}
  text=${text%% --command *}
  text=${text%%[|;&]*}
  read -r -a words <<<"$text"
  DOC_PATHS=()
  for w in "${words[@]}"; do
    [[ $w == */* ]] || continue
    w=${w#--*=}
    w=${w#[A-Za-z_]*=}
    w=${w//[\"\']/}
    w=${w%%)*}
    [[ $w == /* && ! $w =~ (^|/)rlock$ ]] && DOC_PATHS+=("$w")
  done
  for ((i = 1; i < ${#DOC_PATHS[@]}; i++)); do
    for ((j = i; j > 0 && ${#DOC_PATHS[j - 1]} < ${#DOC_PATHS[j]}; j--)); do
      w=${DOC_PATHS[j]} DOC_PATHS[j]=${DOC_PATHS[j - 1]} DOC_PATHS[j - 1]=$w
    done
  done
  return 0
}

# doc_needs TEXT: sets DOC_NEEDS to what a README line needs, one item each: "kind KIND", "user
# KIND NAME PASSWORD" (an ACL user that a URL names; PASSWORD empty when the URL has none), or
# "error WHY".
doc_needs() {
  local url host key kind user path
  DOC_NEEDS=()
  doc_urls "$1"
  for url in "${DOC_URLS[@]}"; do
    doc_url_parts "$url"
    if [[ $U_SCHEME == unix ]]; then
      key=unix://${U_REST%%\?*}
      kind=${DOC_MAP[$key]:-}
      [[ -n $kind ]] && DOC_NEEDS+=("kind $kind") || DOC_NEEDS+=("error names $key, which DOC_MAP does not map")
      continue
    fi
    ((${#U_HOSTS[@]})) || DOC_NEEDS+=("error a URL without a host: $url")
    for host in "${U_HOSTS[@]}"; do
      key=$U_SCHEME://$host
      kind=${DOC_MAP[$key]:-}
      if [[ -z $kind ]]; then
        DOC_NEEDS+=("error names $key, which DOC_MAP does not map")
        continue
      fi
      DOC_NEEDS+=("kind $kind")
      [[ -n $U_USERINFO ]] || continue
      user=${U_USERINFO%@}
      [[ $kind == @(plain|socket) ]] ||
        DOC_NEEDS+=("error a user in a URL of the $kind server: the test makes ACL users on the plain one only")
      [[ $user == *:* ]] && DOC_NEEDS+=("user $kind ${user%%:*} ${user#*:}") || DOC_NEEDS+=("user $kind $user")
    done
  done
  doc_paths "$1"
  for path in "${DOC_PATHS[@]}"; do
    kind=${DOC_MAP[$path]:-}
    [[ -n $kind ]] && DOC_NEEDS+=("kind $kind") || DOC_NEEDS+=("error names $path, which DOC_MAP does not map")
  done
  return 0
}

# doc_certs: the test certificates (TLS_DIR), made once.
doc_certs() {
  [[ -n ${TLS_DIR:-} ]] && return 0
  export TLS_DIR=$T/certs
  tls_make_certs "$TLS_DIR" || fail "could not make the test certificates"
}

# doc_start KIND: starts what KIND stands for (once) and sets DOC_TO[KIND] (and the other kinds
# started with it). redis_up ran first.
doc_start() {
  [[ -z ${DOC_TO[$1]:-} ]] || return 0
  local i ports auth="REDISCLI_AUTH=${PASSWORD@Q}"
  case $1 in
    plain | socket) DOC_TO[plain]=127.0.0.1:$REDIS_PORT DOC_TO[socket]=$SOCKET ;;
    password)
      printf '%s\n' "$PASSWORD" >"$T/password"
      DOC_TO[password]=$T/password
      ;;
    ca | cert | key)
      doc_certs
      DOC_TO[ca]=$TLS_DIR/ca.pem DOC_TO[cert]=$TLS_DIR/client.pem DOC_TO[key]=$TLS_DIR/client.key
      ;;
    tls)
      doc_start ca
      SRV_PASS=$PASSWORD tls_start server --tls-auth-clients yes --requirepass "$PASSWORD"
      DOC_TO[tls]=127.0.0.1:$TLS_PORT
      DOC_FLUSH+=("$auth redis-cli --tls --insecure --cert ${TLS_DIR@Q}/client.pem --key ${TLS_DIR@Q}/client.key -h 127.0.0.1 -p $TLS_PORT flushall")
      ;;
    sentinel[123])
      SRV_PASS=$PASSWORD repl_start
      SRV_PASS=$PASSWORD sentinels_start 3
      read -r -a ports <<<"$SENTINEL_PORTS"
      for i in 1 2 3; do
        DOC_TO[sentinel$i]=127.0.0.1:${ports[i - 1]}
      done
      DOC_FLUSH+=("$auth redis-cli -p $MASTER_PORT flushall")
      ;;
    cluster)
      # Created by setup_file, with the same password.
      SRV_PASS=$PASSWORD cluster_wait
      DOC_TO[cluster]=127.0.0.1:${CLUSTER_PORTS%% *}
      for i in $CLUSTER_PORTS; do
        DOC_FLUSH+=("$auth redis-cli -p $i flushall")
      done
      ;;
    redlock[123])
      for i in 1 2 3; do
        SRV_PASS=$PASSWORD srv_start "redlock$i" --requirepass "$PASSWORD" --appendonly yes --appendfsync no || fail "could not start Redlock master $i"
        DOC_TO[redlock$i]=127.0.0.1:$SRV_PORT
        DOC_FLUSH+=("$auth redis-cli -p $SRV_PORT flushall")
      done
      ;;
    *) fail "DOC_MAP: no such kind of server or file: $1" ;;
  esac
}

# doc_prepare FILE: for each rlock and export line of FILE, what it needs: unmapped hosts and
# paths go to errors (the line is then not run: DOC_BAD[LINE]=1), the servers are started, the
# ACL users made.
doc_prepare() {
  local file=$1 kind path first rest item what a b c
  local -A kinds=()
  local -a users=()
  declare -gA DOC_BAD=()
  while IFS=$'\t' read -r kind path first _ _ rest; do
    [[ $path == "$file" ]] || continue
    [[ $kind == cmd ]] && rest=${rest##*$'\t'}
    doc_needs "$rest"
    for item in "${DOC_NEEDS[@]}"; do
      read -r what a b c <<<"$item"
      case $what in
        kind) kinds[$a]=1 ;;
        user) users+=("$b ${c:-$PASSWORD}") ;;
        error)
          errors+=("$path:$first: ${item#error }: $rest")
          DOC_BAD[$first]=1
          ;;
      esac
    done
  done < <(awk -F'\t' '$1 == "cmd" || $1 == "export"' "$T/records")
  doc_start_all "${!kinds[@]}"
  for item in "${users[@]}"; do
    read -r a b <<<"$item"
    rcli acl setuser "$a" on ">$b" '~*' '&*' '+@all' >/dev/null || fail "could not make ACL user $a"
  done
}

# doc_start_all KIND...: doc_start for each KIND. What takes seconds to come up (a sentinel
# set, a cluster, certificates...) starts at the same time, each set in a subshell that reports
# what it set up; a set that does not come up fails the test.
doc_start_all() {
  local kind set i n sets=() pids=()
  local -A start=()
  for kind in "$@"; do
    case $kind in
      sentinel? | redlock?) start[${kind%[0-9]}]=$kind ;;
      cluster) start[cluster]=cluster ;;
      tls | ca | cert | key) [[ ${start[tls]:-} == tls ]] || start[tls]=$kind ;;
      *) doc_start "$kind" ;;
    esac
  done
  for set in "${!start[@]}"; do
    n=${#DOC_FLUSH[@]}
    (
      doc_start "${start[$set]}"
      for kind in "${!DOC_TO[@]}"; do
        printf 'DOC_TO[%q]=%q\n' "$kind" "${DOC_TO[$kind]}"
      done
      for ((i = n; i < ${#DOC_FLUSH[@]}; i++)); do
        printf 'DOC_FLUSH+=(%q)\n' "${DOC_FLUSH[i]}"
      done
    ) >"$T/started.$set" 2>"$T/started.$set.err" &
    sets+=("$set") pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[i]}" || fail "could not start the ${sets[i]} servers: $(cat "$T/started.${sets[i]}.err")"
    # shellcheck source=/dev/null
    source "$T/started.${sets[i]}"
  done
}

# doc_rewrite TEXT: sets DOC_TEXT to TEXT with each URL host and path replaced by what stands
# for it (after doc_prepare, for a line without errors).
doc_rewrite() {
  local url new host path
  DOC_TEXT=$1
  doc_urls "$1"
  for url in "${DOC_URLS[@]}"; do
    doc_url_parts "$url"
    if [[ $U_SCHEME == unix ]]; then
      new=unix://${DOC_TO[${DOC_MAP[unix://${U_REST%%\?*}]}]}
      [[ $U_REST == *\?* ]] && new+="?${U_REST#*\?}"
    else
      new=''
      for host in "${U_HOSTS[@]}"; do
        new+=${new:+,}${DOC_TO[${DOC_MAP[$U_SCHEME://$host]}]}
      done
      new=$U_SCHEME://$U_USERINFO$new$U_REST
    fi
    DOC_TEXT=${DOC_TEXT//"$url"/"$new"}
  done
  # The longest paths first, so that none is replaced inside a longer one.
  doc_paths "$1"
  for path in "${DOC_PATHS[@]}"; do
    DOC_TEXT=${DOC_TEXT//"$path"/"${DOC_TO[${DOC_MAP[$path]}]}"}
  done
}

# doc_loopback TEXT: fails, with the URL in DOC_WHERE, when TEXT has a URL of a host that is not
# a loopback address.
doc_loopback() {
  local url host
  doc_urls "$1"
  for url in "${DOC_URLS[@]}"; do
    doc_url_parts "$url"
    for host in "${U_HOSTS[@]}"; do
      [[ $host =~ ^(127\.[0-9.]+|localhost|\[::1\])(:[0-9]+)?$ ]] || {
        DOC_WHERE=$url
        return 1
      }
    done
  done
}

# hold_options TEXT: sets HOLD to the words of DOC_CONNECTION_OPTIONS (with their values) among
# rlock's own arguments in TEXT, as shell text. (A regular expression per word rather than a loop
# over the options: bats runs a debug trap before every command of a test.)
hold_options() {
  local words i w value_re="^($DOC_OPTIONS_RE)\$" flag_re="^(--insecure|($DOC_OPTIONS_RE)=.*)\$"
  read -r -a words <<<"$1"
  HOLD=''
  for ((i = 0; i < ${#words[@]}; i++)); do
    w=${words[i]}
    if [[ $w =~ ^(--|-c|--command|[\|\;\&].*)$ ]]; then
      break
    elif [[ $w =~ $flag_re ]]; then
      HOLD+=" ${w@Q}"
    elif [[ $w =~ $value_re ]]; then
      HOLD+=" ${w@Q} ${words[i + 1]@Q}"
      i=$((i + 1))
    fi
  done
}

# make_stub NAME [SHELL]: a stub command NAME that appends "ID NAME ARGS" to EXAMPLES_STUB_LOG,
# runs SHELL if given, and exits 0 (or SHELL's status).
make_stub() {
  local file=$T/stubs/$1
  {
    echo '#!/bin/sh'
    echo 'echo "${EXAMPLES_ID:-script} ${0##*/} $*" >>"$EXAMPLES_STUB_LOG"'
    [[ -n ${2:-} ]] && echo "$2"
  } >"$file"
  chmod +x "$file"
  [[ ! -d $T/work ]] || ln -sf "$file" "$T/work/$1"
}

# The records of examples-extract (see there) of one kind.
records() { awk -F'\t' -v k="$1" '$1 == k' "$T/records"; }

# The files of TYPE (readme, markdown, crontab, systemd, github, gitlab, kubernetes, script).
files_of() { awk -F'\t' -v t="$1" '$1 == "file" && $3 == t { print $2 }' "$T/records"; }

# secret_value NAME: what the test's secret store holds under NAME.
secret_value() {
  case $1 in
    *URL*) echo "$URL" ;;
    *PASSWORD* | *AUTH*) echo "$PASSWORD" ;;
    *) return 1 ;;
  esac
}

# with_secrets FILE TEXT: TEXT with ${NAME} of each secret of FILE replaced by its value.
with_secrets() {
  local file=$1 text=$2 f name value
  while IFS=$'\t' read -r _ f name; do
    [[ $f == "$file" ]] || continue
    value=$(secret_value "$name") || return 1
    text=${text//"\${$name}"/$value}
  done < <(records secret)
  printf '%s' "$text"
}

# The environment that a recipe's commands get, as shell text.
#   default: rlock's settings come from the machine (RLOCK_URL or REDIS_URL, and RLOCK_PASSWORD,
#     as a config file would give them);
#   github, kubernetes: only what the file maps from secrets (env:, secretKeyRef);
#   gitlab: the project's CI/CD variables RLOCK_URL and RLOCK_PASSWORD, which the recipe asks for
#     and GitLab exports to every job, and the file's variables:.
environment_of() {
  local file=$1 type=$2 f name value
  case $type in
    github | kubernetes) echo 'unset RLOCK_URL RLOCK_PASSWORD REDIS_URL REDISCLI_AUTH' ;;
    gitlab) echo "export RLOCK_URL=${URL@Q} RLOCK_PASSWORD=${PASSWORD@Q}; unset REDIS_URL REDISCLI_AUTH" ;;
    *) echo "export RLOCK_URL=${URL@Q} REDIS_URL=${URL@Q} RLOCK_PASSWORD=${PASSWORD@Q}; unset REDISCLI_AUTH" ;;
  esac
  while IFS=$'\t' read -r _ f name value; do
    [[ $f == "$file" ]] || continue
    echo "export $name=\"$(with_secrets "$file" "$value")\""
  done < <(records env)
}

# run_recipes TYPE: runs every rlock command line of the files of TYPE, each in every state of
# the lock its comment documents, and checks each exit status. The lines of one file run in
# order in one shell (so that `tok=$(rlock acquire ...)` reaches the `release` after it); the
# lock is taken first for "when busy", and Redis is emptied between code blocks. Fails listing
# every line that exited otherwise. Sets RAN to the number of cases run.
run_recipes() {
  local type=$1 file files
  redis_up
  mapfile -t files < <(files_of "$type")
  ((${#files[@]})) || fail "no $type recipe found"
  RAN=0
  local -a errors=()
  for file in "${files[@]}"; do
    run_file "$file" "$type"
  done
  ((${#errors[@]} == 0)) || fail "$(printf '%s\n' "${errors[@]}")"
}

# run_file FILE TYPE: the work of run_recipes for one file; appends to its errors.
# README.md's hosts and paths are rewritten first (see DOC_MAP). Each code block starts from
# empty servers and the environment of environment_of; an export line of a block applies to the
# lines after it in that block.
run_file() {
  local file=$1 type=$2 prog=$T/program.bash n=0 spec=$T/spec
  local kind path first last block doc sub key limit cmd clause code state prev_block=''
  : >"$spec"
  : >"$EXAMPLES_LOG"
  : >"$EXAMPLES_STUB_LOG"
  [[ $type != readme ]] || doc_prepare "$file"
  {
    echo "source ${T@Q}/wrapper.bash"
    # Every server at once.
    echo '__flush() {'
    echo '  local pids=()'
    printf '  %s >/dev/null &\n  pids+=($!)\n' "${DOC_FLUSH[@]}"
    echo '  wait "${pids[@]}"'
    echo '}'
    echo '__environment() {'
    environment_of "$file" "$type" | sed 's/^/  /'
    echo '}'
    echo "__flush; __environment"
    echo "cd ${T@Q}/work"
    # __hold KEY LIMIT [OPTIONS...]: another holder takes KEY (LIMIT slots of a semaphore), where
    # the command's environment (else the test's Redis) and its connection OPTIONS point.
    cat <<'EOF'
__hold() {
  local key=$1 slots=$2 i tok limit=()
  shift 2
  ((slots > 1)) && limit=(--limit "$slots")
  __held=() __held_options=("$@")
  for ((i = 0; i < slots; i++)); do
    tok=$(RLOCK_URL=${RLOCK_URL:-$EXAMPLES_URL} RLOCK_PASSWORD=${RLOCK_PASSWORD:-$EXAMPLES_PASSWORD} \
      command rlock acquire "$key" -n -t 60s "${limit[@]}" "$@") ||
      echo "$EXAMPLES_ID hold-failed" >>"$EXAMPLES_LOG"
    __held+=("$tok")
  done
}
__unhold() {
  local tok
  for tok in "${__held[@]}"; do
    RLOCK_URL=${RLOCK_URL:-$EXAMPLES_URL} RLOCK_PASSWORD=${RLOCK_PASSWORD:-$EXAMPLES_PASSWORD} RLOCK_TOKEN=$tok \
      command rlock release "$1" "${__held_options[@]}" >/dev/null 2>&1
  done
}
EOF
  } >"$prog"
  # The rlock lines (cmd records) and, in Markdown, the export lines (export records, whose
  # command is in the DOC field), in the order of the file.
  while IFS=$'\t' read -r kind path first last block doc sub key limit cmd; do
    [[ $path == "$file" ]] || continue
    [[ $kind == export ]] && cmd=$doc
    [[ $type != readme || -z ${DOC_BAD[$first]:-} ]] || continue
    if [[ -n $prev_block && $block != "$prev_block" ]]; then
      echo "__flush; __environment" >>"$prog"
    fi
    prev_block=$block
    if [[ $type == readme ]]; then
      doc_rewrite "$cmd"
      cmd=$DOC_TEXT
      doc_loopback "$cmd" || {
        errors+=("$path:$first: not run: $DOC_WHERE is not on loopback after the rewrite: $cmd")
        continue
      }
    fi
    if [[ $kind == export ]]; then
      printf '%s\n' "$cmd" >>"$prog"
      continue
    fi
    [[ $doc != [-!]* ]] || {
      errors+=("$path:$first: no readable exit code: $cmd")
      continue
    }
    # (A subshell costs tens of milliseconds on a busy machine: only where a secret is read.)
    [[ $cmd != *'${'* ]] || cmd=$(with_secrets "$file" "$cmd") || {
      errors+=("$path:$first: reads a secret that the test does not know")
      continue
    }
    hold_options "$cmd"
    for clause in $doc; do
      code=${clause%%:*} state=${clause#*:}
      n=$((n + 1))
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "R$n" "$code" "$state" "$path:$first" "$sub" "$cmd" >>"$spec"
      {
        echo "export EXAMPLES_ID=R$n"
        [[ $state == free ]] || echo "__hold ${key@Q} $limit$HOLD"
        echo '{'
        printf '%s\n' "$cmd"
        echo "} >${T@Q}/runs/R$n.out 2>${T@Q}/runs/R$n.err"
        [[ $state == free ]] || echo "__unhold ${key@Q}"
      } >>"$prog"
    done
  done < <(awk -F'\t' '$1 == "cmd" || $1 == "export"' "$T/records")
  ((n)) || return 0
  EXAMPLES_URL=$URL EXAMPLES_PASSWORD=$PASSWORD bash "$prog" >"$T/program.out" 2>&1 || true

  local id got calls want where rc
  local -A got_of=() calls_of=()
  while read -r id rc; do
    got_of[$id]+="$rc "
  done <"$EXAMPLES_LOG"
  while read -r id _; do
    calls_of[$id]=$((${calls_of[$id]:-0} + 1))
  done <"$EXAMPLES_STUB_LOG"
  while IFS=$'\t' read -r id code state where sub cmd; do
    RAN=$((RAN + 1))
    want="exit $code when $state"
    read -r -a got <<<"${got_of[$id]:-}"
    if [[ ${got[*]} == *hold-failed* ]]; then
      errors+=("$where: could not take the lock before the 'when $state' case: $cmd")
    elif ((${#got[@]} == 0)); then
      errors+=("$where: did not run rlock ($want): $cmd; stderr: $(cat "$T/runs/$id.err" 2>/dev/null); shell: $(tail -n 3 "$T/program.out")")
    elif ((${#got[@]} > 1)); then
      errors+=("$where: ran rlock ${#got[@]} times: $cmd")
    elif [[ ${got[0]} != "$code" ]]; then
      errors+=("$where: documented $want, got ${got[0]}: $cmd; stderr: $(cat "$T/runs/$id.err")")
    elif [[ $sub == run ]]; then
      # A run that got the lock ran its (stubbed) command; one that found it busy did not.
      calls=${calls_of[$id]:-0}
      if [[ $state == free && $code == 0 ]] && ((calls == 0)); then
        errors+=("$where: exit 0 but its command did not run: $cmd")
      elif [[ $state != free ]] && ((calls > 0)); then
        errors+=("$where: its command ran although the lock was held: $cmd")
      fi
    fi
  done <"$spec"
}

# ---------------------------------------------------------------------------------------------

@test "every rlock command in examples/ and README.md's code blocks documents its exit codes" {
  local -a errors=()
  local kind path first last block doc sub key limit cmd type n_readme=0 n_files=0
  while IFS=$'\t' read -r kind path type; do
    [[ $type != unknown ]] || errors+=("$path: tests/helpers/examples-extract cannot read this kind of file")
    [[ $path == README.md ]] && continue
    n_files=$((n_files + 1))
    # Every recipe shows rlock at work (a systemd timer starts the service of the same name;
    # alert rules read what rlock metrics exports, and are tested with promtool below).
    [[ $path == *.timer || $type == prometheus ]] && continue
    grep -q "^cmd"$'\t'"$path"$'\t' "$T/records" || errors+=("$path: no rlock command found")
  done < <(records file)
  while IFS=$'\t' read -r kind path first last block doc sub key limit cmd; do
    [[ $path == README.md ]] && n_readme=$((n_readme + 1))
    case $doc in
      -) errors+=("$path:$first: no '# exit CODE' comment: $cmd") ;;
      !*) errors+=("$path:$first: ${doc#!}: $cmd") ;;
    esac
    [[ $sub == @(run|acquire|release|extend|status|list) ]] || errors+=("$path:$first: no rlock subcommand: $cmd")
    [[ $doc != *busy* && $doc != *held* || $key != - ]] ||
      errors+=("$path:$first: documents a busy case, but the key does not follow the subcommand: $cmd")
    # A recipe takes its URL from the environment; README.md's hosts and files are in DOC_MAP.
    if [[ $path != README.md ]]; then
      [[ $cmd != *://* ]] || errors+=("$path:$first: a URL in the command; take it from the environment: $cmd")
    fi
  done < <(records cmd)
  local item
  while IFS=$'\t' read -r kind path first last block cmd; do
    [[ $kind == cmd ]] && cmd=${cmd##*$'\t'}
    [[ $path == README.md ]] || continue
    doc_needs "$cmd"
    for item in "${DOC_NEEDS[@]}"; do
      [[ $item != error* ]] || errors+=("$path:$first: ${item#error }: $cmd")
    done
  done < <(awk -F'\t' '$1 == "cmd" || $1 == "export"' "$T/records")
  # URLs and passwords come from secrets (the test stands in for them), never from the recipe.
  local name value
  while IFS=$'\t' read -r kind path name value; do
    [[ $value != *://* ]] || errors+=("$path: sets $name to a URL of its own ($value): take it from a secret")
  done < <(records env)
  while IFS=$'\t' read -r kind path name; do
    secret_value "$name" >/dev/null || errors+=("$path: reads a secret $name that the test does not know (*URL*, *PASSWORD*, *AUTH*)")
  done < <(records secret)
  # The extraction itself works: README.md's command lines and all the recipes are there.
  ((n_readme >= 20)) || errors+=("only $n_readme rlock commands found in README.md's code blocks")
  ((n_files >= 7)) || errors+=("only $n_files files found in examples/")
  ((${#errors[@]} == 0)) || fail "$(printf '%s\n' "${errors[@]}")"
}

@test "the documented exit codes are read as written, and a command without one is caught" {
  # README.md: every code block of every section, indented or fenced, with its export lines; not
  # the commands quoted in prose.
  mkdir -p "$T/src/examples"
  cat >"$T/src/README.md" <<'EOF'
## Examples

    */5 * * * * rlock run a -n -- ./job.sh   # exit 0 (the job's status), 75 when busy
    rlock status b                           # exit 0 when held, 1 when free: who holds it
    rlock run c --wait 1h \
        -- make deploy                       # exit 0: make's status (75 if still busy after 1h)
    tok=$(rlock acquire d)                   # exits 3 when free or busy
    rlock run e -- make                      # exit 0, 1 when bussy
    rlock run f -- make                      # the comment says nothing
    ./job.sh                                 # rlock run g -- not a command, a comment

## Connecting

A paragraph that quotes `rlock -v -u redis://x.internal run g -- ./job.sh` is prose.

    rlock run h -- ./job.sh
    export RLOCK_URL="redis://r1.internal redis://r2.internal"   # a quorum

```sh
rlock status m    # exit 1 when free
```
EOF
  printf '%s\n' '[Service]' '# exit 75 when busy' 'ExecStart=/usr/bin/rlock run i -n -- job' >"$T/src/examples/i.service"
  printf '%s\n' 'c:' '  containers:' '    - command: ["rlock", "run", "j k", "--", "x"]  # exit 0' >"$T/src/examples/k.yaml"
  sed -i '1i apiVersion: batch/v1' "$T/src/examples/k.yaml"
  run "$EXTRACT" "$T/src"
  assert_success
  local expected
  expected=$(printf '%s\n' \
    $'cmd\tREADME.md\t3\t3\t3\t0:free 75:busy\trun\ta\t1\trlock run a -n -- ./job.sh' \
    $'cmd\tREADME.md\t4\t4\t3\t0:held 1:free\tstatus\tb\t1\trlock status b' \
    $'cmd\tREADME.md\t5\t6\t3\t0:free\trun\tc\t1\trlock run c --wait 1h -- make deploy' \
    $'cmd\tREADME.md\t7\t7\t3\t3:free 3:busy\tacquire\td\t1\ttok=$(rlock acquire d)' \
    $'cmd\tREADME.md\t8\t8\t3\t!unknown state "bussy" after "when" (free, busy or held)\trun\te\t1\trlock run e -- make' \
    $'cmd\tREADME.md\t9\t9\t3\t-\trun\tf\t1\trlock run f -- make' \
    $'cmd\tREADME.md\t16\t16\t16\t-\trun\th\t1\trlock run h -- ./job.sh' \
    $'export\tREADME.md\t17\t17\t16\texport RLOCK_URL="redis://r1.internal redis://r2.internal"' \
    $'cmd\tREADME.md\t20\t20\t20\t1:free\tstatus\tm\t1\trlock status m' \
    $'cmd\texamples/i.service\t3\t3\t1\t75:busy\trun\ti\t1\trlock run i -n -- job' \
    $'cmd\texamples/k.yaml\t4\t4\t1\t0:free\trun\tj k\t1\trlock run \'j k\' -- x')
  assert_equal "$(grep -E '^(cmd|export)' <<<"$output")" "$expected"
}

@test "README.md's hosts and paths: DOC_MAP's kinds, loopback after the rewrite, an unknown one caught" {
  doc_needs 'rlock run j -u redis://user@redis.internal:6379/2 --password-file /etc/rlock/password -- cat /srv/x'
  assert_equal "$(printf '%s\n' "${DOC_NEEDS[@]}")" "$(printf '%s\n' 'kind plain' 'user plain user' 'kind password')"
  doc_needs 'export RLOCK_URL="redis://r1.internal redis://r9.internal"'
  assert_equal "$(printf '%s\n' "${DOC_NEEDS[@]}")" \
    "$(printf '%s\n' 'kind redlock1' 'error names redis://r9.internal, which DOC_MAP does not map')"
  doc_needs 'rlock run j -u rediss://redis.internal:6380 --cacert=/etc/ssl/ca.pem -c "cat /etc/passwd"'
  assert_equal "$(printf '%s\n' "${DOC_NEEDS[@]}")" \
    "$(printf '%s\n' 'kind tls' 'error names /etc/ssl/ca.pem, which DOC_MAP does not map')"
  doc_needs 'rlock run j -u unix:///run/redis/other.sock -- ./job.sh'
  assert_equal "${DOC_NEEDS[*]}" 'error names unix:///run/redis/other.sock, which DOC_MAP does not map'

  DOC_TO=([plain]=127.0.0.1:1 [socket]=/t/r.sock [password]=/t/pw [ca]=/t/ca.pem
    [sentinel1]=127.0.0.1:11 [sentinel2]=127.0.0.1:12 [sentinel3]=127.0.0.1:13 [tls]=127.0.0.1:2)
  doc_rewrite 'rlock run j -u redis+sentinel://s1.internal,s2.internal,s3.internal/mymaster -- ./job.sh'
  assert_equal "$DOC_TEXT" 'rlock run j -u redis+sentinel://127.0.0.1:11,127.0.0.1:12,127.0.0.1:13/mymaster -- ./job.sh'
  doc_rewrite 'rlock run j -u redis://u@redis.internal:6379/2 --password-file /etc/rlock/password -- ./job.sh'
  assert_equal "$DOC_TEXT" 'rlock run j -u redis://u@127.0.0.1:1/2 --password-file /t/pw -- ./job.sh'
  doc_rewrite 'tok=$(rlock acquire k -u unix:///run/redis/redis.sock?db=3 --cacert=/etc/rlock/ca.pem)'
  assert_equal "$DOC_TEXT" 'tok=$(rlock acquire k -u unix:///t/r.sock?db=3 --cacert=/t/ca.pem)'
  doc_loopback "$DOC_TEXT"
  doc_loopback 'rlock run j -u redis://127.0.0.1:1 -u redis://[::1]:2 -u redis://localhost -- x'
  run doc_loopback 'rlock run j -u redis://127.0.0.1:1,10.0.0.5:2/m -- x'
  assert_failure

  # A "when busy" case takes the lock with the command's connection options.
  hold_options "rlock run j -n -u rediss://127.0.0.1:2 --cacert /t/ca.pem --insecure --prefix=p: -t 5s -- x -u y"
  assert_equal "$HOLD" " '-u' 'rediss://127.0.0.1:2' '--cacert' '/t/ca.pem' '--insecure' '--prefix=p:'"
}

@test "README.md: every command line exits as documented, on servers of the kinds it names" {
  run_recipes readme
  ((RAN >= 23)) || fail "only $RAN cases ran"
}

# minutes_of DURATION: the minutes in a duration of whole s, m, h or d (as in the recipes); 0 if
# not one.
minutes_of() {
  local n=${1%[smhd]}
  [[ $n =~ ^[0-9]+$ ]] || { echo 0; return; }
  case $1 in
    *s) echo "$((n / 60))" ;;
    *m) echo "$n" ;;
    *h) echo "$((n * 60))" ;;
    *d) echo "$((n * 1440))" ;;
  esac
}

@test "README.md's cron line, its period scaled to 3s, on 3 hosts firing apart: one run per tick for 2 ticks" {
  local line period opt value scaled
  line=$(grep -E '^ +\*/[0-9]+ \* \* \* \* rlock run ' "$RLOCK_SOURCE_DIR/README.md")
  [[ -n $line && $line != *$'\n'* ]] || fail "README.md has not one '*/N * * * * rlock run' line: $line"
  [[ $line =~ ^\ +\*/([0-9]+)\ \*\ \*\ \*\ \*\ (rlock\ run\ .*(--once-per|--min-hold)\ ([0-9]+[smhd])\ .*)\ +#\ exit ]] ||
    fail "README.md's cron line has neither --once-per nor --min-hold: $line"
  period=${BASH_REMATCH[1]} opt=${BASH_REMATCH[3]} value=${BASH_REMATCH[4]}
  local cmd=${BASH_REMATCH[2]}
  # A minute becomes 1s/period*3: the period 3s, the --once-per or --min-hold in proportion (the
  # hosts fire within 0.4s, well inside half of it).
  scaled=$(($(minutes_of "$value") * 3000 / period))ms
  cmd=${cmd/$opt $value/$opt $scaled}
  redis_up
  local tick h t0 rc pids=()
  # The first tick a little ahead, the second a period later (--once-per counts ticks from the
  # one that last ran, not from the epoch).
  t0=$(($(now_ms) + 100))
  for tick in 1 2; do
    # Each tick at its time; the hosts' crons fire 200ms apart.
    sleep "$(awk -v ms=$((t0 + (tick - 1) * 3000 - $(now_ms))) 'BEGIN { print (ms > 0 ? ms / 1000 : 0) }')"
    for h in 1 2 3; do
      (
        sleep "0.$((2 * (h - 1)))"
        rc=0
        cd "$T/work" && EXAMPLES_ID=tick$tick bash -c "$cmd" >"$T/runs/$tick.$h.out" 2>&1 || rc=$?
        echo "$rc" >"$T/runs/$tick.$h.rc"
      ) &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
  # The job's own lines: one per tick (exit 0), the other hosts skipped it (75).
  for tick in 1 2; do
    assert_equal "$(grep -c "^tick$tick " "$EXAMPLES_STUB_LOG")" 1 ||
      fail "tick $tick ran the job $(grep -c "^tick$tick " "$EXAMPLES_STUB_LOG") times ($opt $scaled every 3s): $(cat "$EXAMPLES_STUB_LOG")"
    assert_equal "$(cat "$T/runs/$tick".*.rc | sort | tr '\n' ' ')" "0 75 75 "
  done
}

# period_of SCHEDULE: the minutes between two runs of a crontab or CronJob schedule (*/N * * * *,
# or M H * * *) or a systemd OnCalendar= (*-*-* HH:MM:SS); 0 for another form.
period_of() {
  if [[ $1 =~ ^\*/([0-9]+)\ \*\ \*\ \*\ \*$ ]]; then
    echo "${BASH_REMATCH[1]}"
  elif [[ $1 =~ ^[0-9]+\ [0-9]+\ \*\ \*\ \*$ || $1 =~ ^\*-\*-\*\ [0-9:]+$ ]]; then
    echo 1440
  else
    echo 0
  fi
}

# check_min_hold WHERE SCHEDULE COMMAND: a run with -n on SCHEDULE either runs once per tick of
# its schedule's period (--once-per PERIOD), or keeps the lock (--min-hold) for at least half the
# period, so that hosts that fire a little later skip it, and less than the period, so that the
# next run finds it free; appends to errors.
check_min_hold() {
  local where=$1 period hold
  period=$(period_of "$2")
  ((period > 0)) || { errors+=("$where: a schedule the test does not read: $2"); return; }
  if [[ " $3 " =~ \ --once-per[\ =]+([0-9]+[smhd])\  ]]; then
    hold=$(minutes_of "${BASH_REMATCH[1]}")
    ((hold == period)) ||
      errors+=("$where: --once-per ${BASH_REMATCH[1]} for a period of ${period}m: give the schedule's period")
    return
  fi
  [[ " $3 " =~ \ --min-hold[\ =]+([0-9]+[smhd])\  ]] || { errors+=("$where: no --once-per or --min-hold: $3"); return; }
  hold=$(minutes_of "${BASH_REMATCH[1]}")
  ((hold * 2 >= period && hold < period)) ||
    errors+=("$where: --min-hold ${BASH_REMATCH[1]} for a period of ${period}m: keep it a little shorter than the period")
}

@test "the recipes run on a schedule with -n run once per period (--once-per), or keep the lock a little less (--min-hold)" {
  local -a errors=()
  local file line schedule service n=0
  # Crontab entries (README.md's too).
  for file in README.md examples/crontab; do
    while IFS= read -r line; do
      [[ $line =~ ^\ *(\*/[0-9]+\ \*\ \*\ \*\ \*|[0-9]+\ [0-9]+\ \*\ \*\ \*)\ +(rlock\ run\ .*) ]] || continue
      [[ ${BASH_REMATCH[2]%%#*} == *' -n '* ]] || continue
      check_min_hold "$file: $line" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]%%#*}"
      n=$((n + 1))
    done <"$RLOCK_SOURCE_DIR/$file"
  done
  # The Kubernetes CronJob: its schedule, and its container's argv.
  file=$RLOCK_SOURCE_DIR/examples/kubernetes-cronjob.yaml
  schedule=$(sed -nE 's/^ *schedule: *"([^"]*)".*/\1/p' "$file")
  line=$(grep -E '^ *command: *\["rlock", "run"' "$file" | sed -E 's/^ *command: *\[//; s/\].*//; s/[",]//g')
  [[ $line == *' -n '* ]] && check_min_hold "examples/kubernetes-cronjob.yaml" "$schedule" "$line" && n=$((n + 1))
  # The systemd timer and its service.
  file=$RLOCK_SOURCE_DIR/examples/systemd/nightly-report
  schedule=$(sed -n 's/^OnCalendar=//p' "$file.timer")
  line=$(sed -n 's/^ExecStart=//p' "$file.service")
  [[ $line == *' -n '* ]] && check_min_hold "examples/systemd/nightly-report.service" "$schedule" "$line" && n=$((n + 1))
  ((n >= 4)) || errors+=("only $n scheduled runs with -n found (README.md, crontab, CronJob, systemd)")
  ((${#errors[@]} == 0)) || fail "$(printf '%s\n' "${errors[@]}")"
}

@test "examples/*.md: the commands exit as documented" {
  run_recipes markdown
}

@test "crontab: well-formed entries, which exit as documented" {
  local file line
  for file in $(files_of crontab); do
    while IFS= read -r line; do
      [[ $line =~ ^[[:space:]]*(#|$) || $line =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] && continue
      [[ $line =~ ^(@[a-z]+|[-0-9*/,]+([[:space:]]+[-0-9*/,A-Za-z]+){4})[[:space:]]+[^[:space:]] ]] ||
        fail "$file: not a crontab entry (five schedule fields, or @keyword, then the command): $line"
      # cron turns an unescaped % into a newline.
      [[ ${line//\\%/} != *%* ]] || fail "$file: an unescaped % (cron makes it a newline): $line"
    done <"$RLOCK_SOURCE_DIR/$file"
  done
  run_recipes crontab
}

@test "systemd: ExecStart runs /usr/bin/rlock, a busy run is a success, and it exits as documented" {
  local file unit code
  for file in $(files_of systemd); do
    unit=$RLOCK_SOURCE_DIR/$file
    [[ $file == *.timer ]] && {
      [[ -f ${unit%.timer}.service ]] || fail "$file starts ${file##*/}'s .service, which is missing"
      grep -q '^\[Timer\]' "$unit" || fail "$file has no [Timer] section"
      continue
    }
    grep -q '^\[Service\]' "$unit" || fail "$file has no [Service] section"
    grep -q '^ExecStart=/usr/bin/rlock ' "$unit" || fail "$file: ExecStart= does not run /usr/bin/rlock (the .deb's path)"
    ! grep -q '^Exec.*%' "$unit" || fail "$file: a % in Exec*= (systemd reads it as a specifier)"
    # A documented busy code other than 0 is listed in SuccessExitStatus=.
    for code in $(awk -F'\t' -v f="$file" '$1 == "cmd" && $2 == f { print $6 }' "$T/records" | grep -o '[0-9]*:busy' | cut -d: -f1); do
      ((code == 0)) || grep -Eq "^SuccessExitStatus=(.* )?$code( |\$)" "$unit" ||
        fail "$file: exit $code when busy, but SuccessExitStatus= does not list $code"
    done
  done
  run_recipes systemd
}

@test "systemd: systemd-analyze verify accepts the units" {
  command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
  local dir=$T/units file
  mkdir -p "$dir"
  for file in $(files_of systemd); do
    # verify checks that ExecStart's program exists: the binary under test stands for /usr/bin/rlock.
    sed "s|/usr/bin/rlock |$(readlink -f "$RLOCK_BIN") |" "$RLOCK_SOURCE_DIR/$file" >"$dir/${file##*/}"
  done
  run systemd-analyze verify "$dir"/*
  assert_success
  assert_output ''
}

@test "GitHub Actions: the deploy serialises on rlock, with the URL and password from secrets" {
  # The server requires a password, and the commands get only what the workflow maps from
  # secrets: they reach it only if the workflow passes both on.
  run_recipes github
}

@test "GitLab CI: the deploy job serialises on rlock, with the URL and password from CI/CD variables" {
  local file
  for file in $(files_of gitlab); do
    grep -q 'RLOCK_PASSWORD' "$RLOCK_SOURCE_DIR/$file" || fail "$file does not say where RLOCK_PASSWORD comes from"
  done
  run_recipes gitlab
}

@test "Kubernetes: a CronJob with concurrencyPolicy: Forbid, rlock across clusters, a Secret" {
  local file
  for file in $(files_of kubernetes); do
    grep -q '^kind: CronJob' "$RLOCK_SOURCE_DIR/$file" || fail "$file is not a CronJob"
    grep -q '^  concurrencyPolicy: Forbid' "$RLOCK_SOURCE_DIR/$file" || fail "$file: no concurrencyPolicy: Forbid"
    grep -q '^#.*concurrencyPolicy' "$RLOCK_SOURCE_DIR/$file" || fail "$file does not explain concurrencyPolicy"
  done
  run_recipes kubernetes
}

# prom_alert LABELS SUMMARY: an expected alert of a promtool test case (an item of exp_alerts).
prom_alert() {
  printf '          - exp_labels: {%s}\n            exp_annotations: {summary: "%s"}\n' "$1" "$2"
}

@test "prometheus-rules.yml: each alert fires on series that rlock metrics wrote" {
  command -v promtool >/dev/null || skip "promtool is not installed (Debian package prometheus)"
  local rules=$RLOCK_SOURCE_DIR/examples/prometheus-rules.yml
  run promtool check rules "$rules"
  assert_success
  redis_start
  # What happened: a job that never ran (expected), one whose run failed, one lost, one held now.
  rlock run backup -- sh -c 'exit 3' || true
  local tok
  tok=$(rlock acquire lost-job)
  rcli del "$(lock_key lost-job)" >/dev/null
  RLOCK_TOKEN=$tok rlock release lost-job 2>/dev/null || true
  bg holder rlock run deploy -- sh -c 'touch "$0"; exec sleep 100' "$T/started"
  wait_until test -e "$T/started" || fail "the holder did not start: $(bg_err holder)"
  sleep 0.2
  rlock metrics --expect nightly-report --textfile "$T/up.prom"
  # Then Redis goes away: the export says so.
  redis_stop
  run rlock metrics --expect nightly-report --textfile "$T/down.prom" --connect-timeout 200ms
  assert_equal "$status" 69
  # The test's time 0 is 26 hours before the first export; node_exporter serves the first file
  # for 26h15m (its figures no longer refreshed after 26h: stale), then the second for 20m. The
  # rules are evaluated every 5 minutes: promtool evaluates every rule at each step, and 1-minute
  # steps over 26 hours cost it 1.5s of CPU.
  local read_at
  read_at=$(sed -n 's/^rlock_read_timestamp_seconds //p' "$T/up.prom")
  [[ -n $read_at ]] || fail "no rlock_read_timestamp_seconds: $(cat "$T/up.prom")"
  # The held-too-long threshold scaled to the test's hold (0.2s for 2h), as the cron tests scale
  # their periods.
  sed 's/rlock_held_seconds) > 2 \* 3600/rlock_held_seconds) > 0.1/' "$rules" >"$T/rules.yml"
  ! cmp -s "$rules" "$T/rules.yml" || fail "no held-too-long threshold to scale in $rules"
  local on='instance="host1:9100", job="node"'
  {
    printf 'rule_files: [rules.yml]\nevaluation_interval: 5m\ntests:\n  - interval: 1m\n    input_series:\n'
    "$BATS_TEST_DIRNAME/helpers/prom-series" "$(bc <<<"$read_at - 26 * 3600")" "$on" \
      "$T/up.prom:$((26 * 60 + 15))" "$T/down.prom:20"
    printf '    alert_rule_test:\n'
    # After 26h: never ran, failed, lost, held; the export is fresh.
    printf '      - eval_time: 26h\n        alertname: RlockMissedRun\n        exp_alerts:\n'
    prom_alert 'key: nightly-report, severity: critical' 'nightly-report has not succeeded for 25 hours'
    printf '      - eval_time: 26h\n        alertname: RlockLastRunFailed\n        exp_alerts:\n'
    prom_alert 'key: backup, severity: warning' 'backup: the last 1 run(s) failed'
    prom_alert 'key: lost-job, severity: warning' 'lost-job: the last 1 run(s) failed'
    printf '      - eval_time: 26h\n        alertname: RlockLost\n        exp_alerts:\n'
    prom_alert 'key: lost-job, severity: warning' 'lost-job: 1 hold(s) lost since the last success'
    printf '      - eval_time: 26h\n        alertname: RlockHeldTooLong\n        exp_alerts:\n'
    prom_alert 'key: deploy, severity: warning' 'deploy has been held for over 2 hours'
    printf '      - eval_time: 26h\n        alertname: RlockMetricsStale\n        exp_alerts: []\n'
    printf '      - eval_time: 26h\n        alertname: RlockOverrun\n        exp_alerts: []\n'
    # 10 minutes on, the file is the same: stale.
    printf '      - eval_time: 26h10m\n        alertname: RlockMetricsStale\n        exp_alerts:\n'
    prom_alert 'instance: "host1:9100", job: node, severity: warning' \
      'rlock metrics on host1:9100: Redis did not answer, or no export for 5 minutes'
    # Redis gone: the export says rlock_up 0, and the job's series are gone: a missed run still.
    printf '      - eval_time: 26h30m\n        alertname: RlockMetricsStale\n        exp_alerts:\n'
    prom_alert 'instance: "host1:9100", job: node, severity: warning' \
      'rlock metrics on host1:9100: Redis did not answer, or no export for 5 minutes'
    printf '      - eval_time: 26h30m\n        alertname: RlockMissedRun\n        exp_alerts:\n'
    prom_alert 'key: nightly-report, severity: critical' 'nightly-report has not succeeded for 25 hours'
    printf '      - eval_time: 26h30m\n        alertname: RlockLastRunFailed\n        exp_alerts: []\n'
  } >"$T/rules_test.yml"
  cd "$T"
  run promtool test rules rules_test.yml
  assert_success || fail "$(cat "$T/rules_test.yml")"
}

@test "prometheus-rules.yml: RlockOverrun fires on the overrun counter that rlock metrics writes" {
  command -v promtool >/dev/null || skip "promtool is not installed (Debian package prometheus)"
  redis_start
  rlock run job -- true
  rlock metrics --textfile "$T/before.prom"
  grep -q '^rlock_events_total{key="job",event="overrun"}' "$T/before.prom" ||
    skip "rlock metrics exports no overrun counter (rlock_events_total{event=\"overrun\"})"
  # A --once-per run that still holds the lock when the next tick's run comes: that tick is
  # skipped, an overrun.
  bg holder rlock run job --once-per 1s -- sh -c 'touch "$0"; sleep 3' "$T/started"
  wait_until test -e "$T/started" || fail "the first run did not start: $(bg_err holder)"
  # A period later: the next tick (a later start only makes it surer).
  sleep 1.1
  run rlock run job --once-per 1s -n -- true
  assert_equal "$status" 75
  rlock metrics --textfile "$T/after.prom"
  grep -q '^rlock_events_total{key="job",event="overrun"} [1-9]' "$T/after.prom" ||
    fail "no overrun counted: $(grep overrun "$T/after.prom")"
  local read_at
  read_at=$(sed -n 's/^rlock_read_timestamp_seconds //p' "$T/before.prom")
  {
    printf 'rule_files: [%s]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n' \
      "$RLOCK_SOURCE_DIR/examples/prometheus-rules.yml"
    "$BATS_TEST_DIRNAME/helpers/prom-series" "$read_at" 'instance="host1:9100", job="node"' \
      "$T/before.prom:30" "$T/after.prom:30"
    printf '    alert_rule_test:\n'
    printf '      - eval_time: 20m\n        alertname: RlockOverrun\n        exp_alerts: []\n'
    printf '      - eval_time: 45m\n        alertname: RlockOverrun\n        exp_alerts:\n'
    prom_alert 'key: job, severity: warning' \
      'job overran its period: a tick was skipped while the last run still held it'
  } >"$T/rules_test.yml"
  run promtool test rules "$T/rules_test.yml"
  assert_success || fail "$(cat "$T/rules_test.yml")"
}

@test "the YAML recipes parse" {
  local file files=()
  for file in $(files_of github) $(files_of gitlab) $(files_of kubernetes); do
    ! grep -qP '^\t| \t' "$RLOCK_SOURCE_DIR/$file" || fail "$file: tabs in indentation"
    files+=("$RLOCK_SOURCE_DIR/$file")
  done
  ((${#files[@]} >= 3)) || fail "only ${#files[@]} YAML recipes"
  python3 -c 'import yaml' 2>/dev/null || skip "python3's yaml module is missing: only tabs were checked"
  run python3 -c '
import sys, yaml
for f in sys.argv[1:]:
    d = yaml.safe_load(open(f))
    assert isinstance(d, dict), f + ": not a mapping"
' "${files[@]}"
  assert_success
}

@test "scripts: every rlock command of each script in examples/ exits as documented" {
  local file files path first last block doc sub key limit cmd clause code got l
  local -a errors=()
  mapfile -t files < <(files_of script)
  ((${#files[@]})) || fail "no script in examples/"
  redis_up
  for file in "${files[@]}"; do
    : >"$EXAMPLES_LOG"
    (cd "$T/work" && BASH_ENV=$T/wrapper.bash bash "$RLOCK_SOURCE_DIR/$file") >"$T/script.out" 2>&1 ||
      errors+=("$file exited $?: $(cat "$T/script.out")")
    while IFS=$'\t' read -r _ path first last block doc sub key limit cmd; do
      [[ $path == "$file" ]] || continue
      for clause in $doc; do
        code=${clause%%:*}
        [[ $clause == *:free ]] || {
          errors+=("$path:$first: a script's commands are run once, with the lock free: $clause")
          continue
        }
        got=()
        for ((l = first; l <= last; l++)); do
          mapfile -t -O "${#got[@]}" got < <(awk -v id="$RLOCK_SOURCE_DIR/$file:$l" '$1 == id { print $2 }' "$EXAMPLES_LOG")
        done
        ((${#got[@]})) || errors+=("$path:$first: did not run: $cmd")
        [[ -z ${got[*]} || " ${got[*]} " =~ ^( $code)+\ $ ]] ||
          errors+=("$path:$first: documented exit $code, got ${got[*]}: $cmd")
      done
    done < <(records cmd)
  done
  ((${#errors[@]} == 0)) || fail "$(printf '%s\n' "${errors[@]}")"
}

# --- migrate.sh ---------------------------------------------------------------------------------

# The stubs record whether db-migrate was held when they ran.
migrate_stubs() {
  local name
  for name in pg_dump psql; do
    make_stub "$name" 'rlock status db-migrate >/dev/null 2>&1 && echo "  held" >>"$EXAMPLES_STUB_LOG"'
  done
}

@test "migrate.sh: runs its steps in order under the lock, and gives it back" {
  redis_up
  migrate_stubs
  cd "$T/work"
  run bash "$RLOCK_SOURCE_DIR/examples/migrate.sh"
  assert_success
  run cat "$EXAMPLES_STUB_LOG"
  assert_output "$(printf '%s\n' \
    'script pg_dump --format=custom --file=before-migration.dump app' '  held' \
    'script psql --single-transaction --set=ON_ERROR_STOP=1 --file=migrations/schema.sql app' '  held' \
    'script psql --single-transaction --set=ON_ERROR_STOP=1 --file=migrations/data.sql app' '  held')"
  lock_free db-migrate || fail "db-migrate is still held"
  # No token file left behind.
  run ls "$T/work"
  refute_output --partial db-migrate
}

@test "migrate.sh: a failed step ends it with that step's status, and the lock is given back" {
  redis_up
  make_stub psql 'exit 3'
  cd "$T/work"
  run bash "$RLOCK_SOURCE_DIR/examples/migrate.sh"
  assert_failure 3
  assert_equal "$(grep -c psql "$EXAMPLES_STUB_LOG")" 1
  lock_free db-migrate || fail "db-migrate is still held"
}

@test "migrate.sh: exits 75 when another run keeps the lock past MIGRATE_LOCK_WAIT" {
  redis_up
  acquire_token db-migrate -t 60s
  cd "$T/work"
  MIGRATE_LOCK_WAIT=200ms run bash "$RLOCK_SOURCE_DIR/examples/migrate.sh"
  assert_failure 75
  assert_equal "$(cat "$EXAMPLES_STUB_LOG")" ""
  assert_equal "$(rcli get "$(lock_key db-migrate)")" "$TOKEN"
}

@test "migrate.sh: exits 1 and says so when the lock expired during the migration" {
  redis_up
  # The first step outlives the lock: another holder takes it meanwhile.
  make_stub pg_dump 'rlock release --force db-migrate >/dev/null 2>&1; rlock acquire db-migrate -t 60s >/dev/null'
  cd "$T/work"
  run bash "$RLOCK_SOURCE_DIR/examples/migrate.sh"
  assert_failure 1
  assert_output --partial "lock expired during the migration"
  refute_output --partial "psql"
  [[ $(grep -c psql "$EXAMPLES_STUB_LOG") == 0 ]] || fail "a step ran after the lock was lost"
  lock_held db-migrate || fail "the other holder's lock is gone"
}
