#!/usr/bin/env bats
# The recipes in examples/ and the command lines of README.md's "Examples" section: every rlock
# command in them documents its exit codes (the convention is in examples/README.md), and exits
# with those codes when run against a throwaway Redis. The commands rlock would run (make,
# ./report.sh...) are stubs; the Redis URL and password come from the environment, a CI
# platform's secrets or a Kubernetes Secret, as each recipe says.

load helpers/common

: "${RLOCK_SOURCE_DIR:=$(cd "$BATS_TEST_DIRNAME/.." && pwd)}"
EXTRACT=$BATS_TEST_DIRNAME/helpers/examples-extract

# The commands that the recipes run under a lock, replaced by stubs (on PATH, and as ./NAME in
# the directory where the commands run). A recipe that runs another command adds it here.
STUBS=(make report.sh read-report.sh rebuild-cache.sh start-db-and-test.sh sync-reports
  nightly-backup nightly-report pg_dump psql)

# Options the recipes use that this build of rlock may not have yet: a command line that uses
# one is not run (and the test says so, as a skip) when `rlock SUBCOMMAND --help` lacks it.
PENDING_OPTIONS=(--syslog)

# Once for the file: the records of examples-extract, and the stubs.
setup_file() {
  local dir=$BATS_FILE_TMPDIR name
  "$EXTRACT" "$RLOCK_SOURCE_DIR" >"$dir/records" || return 1
  mkdir -p "$dir/stubs"
  for name in "${STUBS[@]}"; do
    T=$dir make_stub "$name"
  done
  command -v jq >/dev/null || T=$dir make_stub jq
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

# redis_up: the test's Redis, which requires a password. Sets URL and PASSWORD, and exports them
# as RLOCK_URL and RLOCK_PASSWORD, as a host's configuration would give them to rlock.
redis_up() {
  PASSWORD=pw$RANDOM$RANDOM
  redis_start_auth "$PASSWORD"
  URL=$RLOCK_URL
  export RLOCK_PASSWORD=$PASSWORD
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

# missing_pending SUB COMMAND: prints the options of PENDING_OPTIONS that COMMAND uses and
# `rlock SUB --help` does not list.
missing_pending() {
  local opt
  for opt in "${PENDING_OPTIONS[@]}"; do
    [[ " $2 " == *" $opt "* ]] || continue
    "$RLOCK_BIN" "$1" --help 2>/dev/null | grep -q -- "$opt\b" || echo "$opt"
  done
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
# every line that exited otherwise; skips (after running the others) lines needing an option of
# PENDING_OPTIONS that this build lacks. Sets RAN to the number of cases run.
run_recipes() {
  local type=$1 file files
  redis_up
  mapfile -t files < <(files_of "$type")
  ((${#files[@]})) || fail "no $type recipe found"
  RAN=0
  local -a errors=() skipped=()
  for file in "${files[@]}"; do
    run_file "$file" "$type"
  done
  ((${#errors[@]} == 0)) || fail "$(printf '%s\n' "${errors[@]}")"
  if ((${#skipped[@]})); then
    local reasons
    reasons=$(printf '%s; ' "${skipped[@]}")
    skip "${reasons%; }"
  fi
}

# run_file FILE TYPE: the work of run_recipes for one file; appends to its errors and skipped.
run_file() {
  local file=$1 type=$2 prog=$T/program.bash n=0 spec=$T/spec
  local kind path first last block doc sub key limit cmd clause code state pending prev_block=''
  : >"$spec"
  : >"$EXAMPLES_LOG"
  : >"$EXAMPLES_STUB_LOG"
  {
    echo "source ${T@Q}/wrapper.bash"
    echo "REDISCLI_AUTH=\$EXAMPLES_PASSWORD redis-cli -p $REDIS_PORT flushall >/dev/null"
    environment_of "$file" "$type"
    echo "cd ${T@Q}/work"
    # __hold KEY LIMIT: another holder takes KEY (LIMIT slots of a semaphore).
    cat <<'EOF'
__hold() {
  local i tok limit=()
  (($2 > 1)) && limit=(--limit "$2")
  __held=()
  for ((i = 0; i < $2; i++)); do
    tok=$(RLOCK_URL=$EXAMPLES_URL RLOCK_PASSWORD=$EXAMPLES_PASSWORD command rlock acquire "$1" -n -t 60s "${limit[@]}") ||
      echo "$EXAMPLES_ID hold-failed" >>"$EXAMPLES_LOG"
    __held+=("$tok")
  done
}
__unhold() {
  local tok
  for tok in "${__held[@]}"; do
    RLOCK_URL=$EXAMPLES_URL RLOCK_PASSWORD=$EXAMPLES_PASSWORD RLOCK_TOKEN=$tok command rlock release "$1" >/dev/null 2>&1
  done
}
EOF
  } >"$prog"
  while IFS=$'\t' read -r kind path first last block doc sub key limit cmd; do
    [[ $path == "$file" ]] || continue
    [[ $doc != [-!]* ]] || {
      errors+=("$path:$first: no readable exit code: $cmd")
      continue
    }
    cmd=$(with_secrets "$file" "$cmd") || {
      errors+=("$path:$first: reads a secret that the test does not know")
      continue
    }
    pending=$(missing_pending "$sub" "$cmd")
    if [[ -n $pending ]]; then
      skipped+=("not run, this rlock has no $pending: $path:$first: $cmd")
      continue
    fi
    if [[ -n $prev_block && $block != "$prev_block" ]]; then
      echo "REDISCLI_AUTH=\$EXAMPLES_PASSWORD redis-cli -p $REDIS_PORT flushall >/dev/null" >>"$prog"
    fi
    prev_block=$block
    for clause in $doc; do
      code=${clause%%:*} state=${clause#*:}
      n=$((n + 1))
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "R$n" "$code" "$state" "$path:$first" "$sub" "$cmd" >>"$spec"
      {
        echo "export EXAMPLES_ID=R$n"
        [[ $state == free ]] || echo "__hold ${key@Q} $limit"
        echo '{'
        printf '%s\n' "$cmd"
        echo "} >${T@Q}/runs/R$n.out 2>${T@Q}/runs/R$n.err"
        [[ $state == free ]] || echo "__unhold ${key@Q}"
      } >>"$prog"
    done
  done < <(records cmd)
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

@test "every rlock command in examples/ and README.md's examples documents its exit codes" {
  local -a errors=()
  local kind path first last block doc sub key limit cmd type n_readme=0 n_files=0
  while IFS=$'\t' read -r kind path type; do
    [[ $type != unknown ]] || errors+=("$path: tests/helpers/examples-extract cannot read this kind of file")
    [[ $path == README.md ]] && continue
    n_files=$((n_files + 1))
    # Every recipe shows rlock at work (a systemd timer starts the service of the same name).
    [[ $path == *.timer ]] && continue
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
    [[ $cmd != *://* ]] || errors+=("$path:$first: a URL in the command; take it from the environment: $cmd")
  done < <(records cmd)
  # URLs and passwords come from secrets (the test stands in for them), never from the recipe.
  local name value
  while IFS=$'\t' read -r kind path name value; do
    [[ $value != *://* ]] || errors+=("$path: sets $name to a URL of its own ($value): take it from a secret")
  done < <(records env)
  while IFS=$'\t' read -r kind path name; do
    secret_value "$name" >/dev/null || errors+=("$path: reads a secret $name that the test does not know (*URL*, *PASSWORD*, *AUTH*)")
  done < <(records secret)
  # The extraction itself works: README.md's examples and all the recipes are there.
  ((n_readme >= 12)) || errors+=("only $n_readme rlock commands found in README.md's Examples section")
  ((n_files >= 7)) || errors+=("only $n_files files found in examples/")
  ((${#errors[@]} == 0)) || fail "$(printf '%s\n' "${errors[@]}")"
}

@test "the documented exit codes are read as written, and a command without one is caught" {
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

    rlock run h -- ./job.sh
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
    $'cmd\texamples/i.service\t3\t3\t1\t75:busy\trun\ti\t1\trlock run i -n -- job' \
    $'cmd\texamples/k.yaml\t4\t4\t1\t0:free\trun\tj k\t1\trlock run \'j k\' -- x')
  assert_equal "$(grep '^cmd' <<<"$output")" "$expected"
}

@test "README.md: the examples exit as documented" {
  run_recipes readme
  ((RAN >= 14)) || fail "only $RAN cases ran"
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
  MIGRATE_LOCK_WAIT=1s run bash "$RLOCK_SOURCE_DIR/examples/migrate.sh"
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
