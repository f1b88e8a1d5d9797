#!/usr/bin/env bats
# The shell completions (completions/), driven as each shell drives them: bash's function with
# COMP_WORDS split as bash splits them (with and without the bash-completion package's helpers),
# zsh's completion system on a pseudo-terminal, fish's `complete -C`. Lock names come from the
# server the line selects, quickly and silently even when it is down; subcommands are offered
# after global options but not in an option's value nor after a subcommand; run's command is
# completed as a command line.

load helpers/common
load helpers/servers
load helpers/completion

setup_file() {
  # zsh's compinit dump, made here and reused by every zsh run (some run at once: none may
  # find it half written).
  export ZC_DUMP=$BATS_FILE_TMPDIR/zcompdump
  if command -v zsh >/dev/null; then
    comp_zsh || return 1
  fi
  # A server holding alpha and deploy:prod (prefix rlock:) and beta (prefix other:), and one
  # that accepts connections but never answers, for all the tests.
  local -a rlock=(env -i "PATH=$PATH" "XDG_CONFIG_HOME=$BATS_FILE_TMPDIR/xdg" "$RLOCK_BIN")
  srv_start locks || return 1
  export LOCKS_URL="redis://127.0.0.1:$SRV_PORT"
  "${rlock[@]}" -u "$LOCKS_URL" acquire alpha -t 10m >/dev/null || return 1
  "${rlock[@]}" -u "$LOCKS_URL" acquire deploy:prod -t 10m >/dev/null || return 1
  "${rlock[@]}" -u "$LOCKS_URL" --prefix other: acquire beta -t 10m >/dev/null || return 1
  srv_start paused || return 1
  kill -STOP "$SRV_PID"
  export PAUSED_URL="redis://127.0.0.1:$SRV_PORT"
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
  SUBCOMMANDS=(run acquire release extend status list log check metrics)
  # rlock's own default is the server the environment names: one where nothing listens, so
  # only a server named on the line can offer lock names.
  DOWN_URL="redis://127.0.0.1:$(free_port)"
  export RLOCK_URL=$DOWN_URL
  URL=$LOCKS_URL
  cd "$T" || return 1
}

teardown() {
  common_teardown
}

# complete_in SHELL LINE...
# Completes each LINE in one run of SHELL: bash (with the bash-completion helpers), bash-n
# (without them), zsh or fish. The run must succeed and write nothing on stderr. Sets
# RESULT[LINE] to each line's candidates (one a line), and ELAPSED_MS to how long the run took
# (for zsh, the longest completion alone; the shell's start is not counted).
complete_in() {
  SH=$1
  shift
  if _completed_ahead "$@"; then
    local l
    declare -gA RESULT=()
    for l; do
      RESULT[$l]=${AHEAD[$l]}
    done
    return 0
  fi
  local t0
  t0=$(now_ms)
  case $SH in
    bash) run --separate-stderr comp_bash "$@" ;;
    bash-n) run --separate-stderr comp_bash -n "$@" ;;
    zsh) run --separate-stderr comp_zsh -t "$@" ;;
    fish) run --separate-stderr comp_fish "$@" ;;
    *) fail "complete_in: unknown shell $SH" ;;
  esac
  ELAPSED_MS=$(elapsed_ms "$t0")
  [[ $status -eq 0 ]] || fail "$SH exited $status completing: $(printf "'%s' " "$@"); stderr: $stderr"
  [[ -z $stderr ]] || fail "$SH wrote on stderr completing: $(printf "'%s' " "$@"): $stderr"
  local -a out asked=("$@")
  local l n=0 block='' ms max=0
  mapfile -t out <<<"$output"
  declare -gA RESULT=()
  for l in "${out[@]}"; do
    if [[ $l == "$COMP_END" ]]; then
      (($# > n)) || fail "$SH printed more results than lines: $output"
      RESULT[${asked[n]}]=${block%$'\n'}
      n=$((n + 1))
      block=''
    elif [[ $SH == zsh && $l == "elapsed "* ]]; then
      # "elapsed 1.234" (seconds, three decimals)
      ms=${l#elapsed }
      ms=$((10#${ms%.*} * 1000 + 10#${ms#*.}))
      ((ms > max)) && max=$ms
    else
      block+=$l$'\n'
    fi
  done
  (($# == n)) || fail "$SH printed results for $n of $# lines: $output"
  [[ $SH == zsh ]] && ELAPSED_MS=$max
  return 0
}

# complete_ahead SHELL LINE...: completes every LINE in one run of SHELL now (as complete_in
# does), for the checks that follow: a complete_in in SHELL of lines that were all completed
# ahead takes their candidates from here instead of starting the shell again. (A shell's start
# is most of a completion's cost: zsh's compinit, fish's.)
complete_ahead() {
  declare -gA AHEAD=()
  AHEAD_SH=''
  complete_in "$@"
  local l
  for l in "${!RESULT[@]}"; do
    AHEAD[$l]=${RESULT[$l]}
  done
  AHEAD_SH=$1
}

# complete_bg NAME SHELL LINE...: complete_in in the background, while the test checks other
# lines (for the checks that wait on a timeout); complete_wait NAME then sets RESULT, ELAPSED_MS
# and SH as complete_in would have, or fails as it would have.
complete_bg() {
  local name=$1
  shift
  (
    complete_in "$@"
    local state
    state=$(declare -p RESULT ELAPSED_MS SH)
    state=${state//declare -A /declare -gA }
    echo "${state//declare -- /declare -g }" >"$T/$name.comp"
  ) </dev/null >/dev/null 2>"$T/$name.comp-err" 3>&- &
  printf -v "COMP_BG_$name" %s "$!"
}

complete_wait() {
  local pid=COMP_BG_$1
  wait "${!pid}" || fail "$(cat "$T/$1.comp-err")"
  # shellcheck disable=SC1090
  source "$T/$1.comp"
}

# Whether the lines $@ were all completed ahead in the shell $SH.
_completed_ahead() {
  [[ -n ${AHEAD_SH:-} && $SH == "$AHEAD_SH" ]] || return 1
  local l
  for l; do
    [[ -v AHEAD[$l] ]] || return 1
  done
}

# pick LINE: the candidates of LINE (from the last complete_in) become GOT (and the set
# GOT_SET), for the checks.
pick() {
  LINE=$1
  [[ -v RESULT[$LINE] ]] || fail "pick: '$LINE' was not completed"
  GOT=()
  [[ -n ${RESULT[$LINE]} ]] && mapfile -t GOT <<<"${RESULT[$LINE]}"
  declare -gA GOT_SET=()
  local w
  for w in "${GOT[@]}"; do
    [[ -n $w ]] && GOT_SET[$w]=1
  done
  return 0
}

# What LINE offered (the first 40 candidates), for messages.
shown() {
  local more=''
  ((${#GOT[@]} > 40)) && more="... (${#GOT[@]} in all)"
  printf "%s: completing '%s' offered: %s%s" "$SH" "$LINE" \
    "$( ((${#GOT[@]})) && printf '[%s] ' "${GOT[@]:0:40}")" "$more"
}

# offers WORD...: every WORD is a candidate.
offers() {
  local w
  for w in "$@"; do
    [[ -v GOT_SET[$w] ]] || fail "$(shown); '$w' is missing"
  done
}

# offers_none WORD...: no WORD is a candidate.
offers_none() {
  local w
  for w in "$@"; do
    [[ -v GOT_SET[$w] ]] && fail "$(shown); '$w' should not be there"
  done
  return 0
}

# offers_only WORD...: the candidates are these words (in any order).
offers_only() {
  local w
  local -A want=()
  for w in "$@"; do
    want[$w]=1
  done
  offers "$@"
  for w in "${GOT[@]}"; do
    [[ -v want[$w] ]] || fail "$(shown); expected only: $*"
  done
}

# offers_no_subcommand_name: no candidate begins with the name of a subcommand that is no
# command (as "acquire:take a lock..." would). For run's command, where "status" (fish's
# builtin) or "run" may be real commands.
offers_no_subcommand_name() {
  local w
  for w in "${GOT[@]}"; do
    case $w in
      acquire* | release* | extend*) fail "$(shown); '$w' should not be there" ;;
    esac
  done
}

# offers_nothing: no candidate.
offers_nothing() {
  ((${#GOT[@]} == 0)) || fail "$(shown); expected nothing"
}

# quick: the last complete_in took less than 2 seconds.
quick() {
  ((ELAPSED_MS < 2000)) || fail "$SH: completing $(printf "'%s' " "${!RESULT[@]}")took ${ELAPSED_MS}ms"
}

# The checks every shell passes the same way.

check_lock_names() {
  local sh=$1 line sub
  # -u (or --url) before or after the command name, a cluster ending in u.
  local -a with_url=("rlock -u $URL status " "rlock status -u $URL " "rlock --url=$URL status "
    "rlock -qu $URL status ")
  local -a keys=("rlock -u $URL run " "rlock -u $URL release " "rlock -u $URL extend ")
  complete_in "$sh" "${with_url[@]}" "${keys[@]}" \
    "rlock -u $URL release alpha " "rlock -u $URL list " \
    "rlock -u $URL --prefix other: status " "rlock status --prefix=other: --url $URL " \
    "rlock status "
  for line in "${with_url[@]}"; do
    pick "$line"
    offers_only alpha deploy:prod
  done
  # The KEY of run, release and extend; not a second KEY, nor list's PATTERN.
  for line in "${keys[@]}"; do
    pick "$line"
    offers_only alpha deploy:prod
  done
  pick "rlock -u $URL release alpha "
  offers_none alpha deploy:prod
  pick "rlock -u $URL list "
  offers_none alpha deploy:prod
  # --prefix selects the namespace.
  pick "rlock -u $URL --prefix other: status "
  offers_only beta
  pick "rlock status --prefix=other: --url $URL "
  offers_only beta
  # Without a server on the line: the environment's, where nothing listens.
  pick "rlock status "
  offers_nothing
}

check_server_options() {
  local sh=$1
  # An rlock that records its arguments and lists locks whose names JSON escapes.
  mkdir -p "$T/fake"
  cat >"$T/fake/list.json" <<'EOF'
[{"key":"fake\"lock","held":true,"holders":[{"host":"h"}]},{"key":"back\\slash","held":true},{"key":"with space","held":true}]
EOF
  # (Its options are the real rlock's: the completions ask for them with --dump-options.)
  cat >"$T/fake/rlock" <<EOF
#!/bin/sh
[ "\$1" = --dump-options ] && exec "$RLOCK_BIN" --dump-options
printf '%s\\n' "\$@" >"$T/args"
cat "$T/fake/list.json"
EOF
  chmod +x "$T/fake/rlock"
  local line="rlock -v -u redis://a:1 --url=redis://b:2 -qu redis://c:3 --prefix p: --node-timeout 1s"
  line+=" --password-file ~/pw --cacert ca.pem --cert=c.pem --key k.pem --insecure --config cfg.toml"
  line+=" status --sentinel-user 'su' --sentinel-password-file sp --json "
  PATH="$T/fake:$PATH" complete_in "$sh" "$line"
  pick "$line"
  # The names, unescaped from JSON (and quoted again for the command line, but by fish).
  if [[ $sh != fish ]]; then
    offers_only 'fake\"lock' 'back\\slash' 'with\ space'
  else
    offers_only 'fake"lock' 'back\slash' 'with space'
  fi
  # The options that select the server, in order, as --name=value; no other.
  local -a expected=(--url=redis://a:1 --url=redis://b:2 --url=redis://c:3 --prefix=p:
    "--password-file=$HOME/pw" --cacert=ca.pem --cert=c.pem --key=k.pem --insecure --config=cfg.toml
    --sentinel-user=su --sentinel-password-file=sp list --json --connect-timeout 300ms --io-timeout 300ms)
  [[ -f $T/args ]] || fail "$SH: rlock was not run for '$line'"
  assert_equal "$(cat "$T/args")" "$(printf '%s\n' "${expected[@]}")"
}

# start_down_checks SHELL [hang]: starts, in the background, the completions of check_down_server
# (and with hang, check_hanging_rlock's): they wait on rlock's timeouts while the test goes on.
start_down_checks() {
  local sh=$1
  # Nothing listens.
  complete_bg down "$sh" "rlock -u $DOWN_URL status "
  # A server that accepts connections but does not answer.
  complete_bg paused "$sh" "rlock -u $PAUSED_URL run "
  [[ ${2-} == hang ]] || return 0
  # An rlock that never ends: the completion gives up on it after 1s.
  mkdir -p "$T/hang"
  printf '#!/bin/sh\nexec sleep 30\n' >"$T/hang/rlock"
  chmod +x "$T/hang/rlock"
  PATH="$T/hang:$PATH" complete_bg hang "$sh" "rlock status "
}

check_down_server() {
  complete_wait down
  pick "rlock -u $DOWN_URL status "
  offers_nothing
  quick
  complete_wait paused
  pick "rlock -u $PAUSED_URL run "
  offers_nothing
  quick
}

check_hanging_rlock() {
  complete_wait hang
  pick "rlock status "
  offers_nothing
  quick
}

# The lines of check_subcommands:
# at the start, and after global options (flags, and options with their value);
SUB_BEFORE=("rlock " "rlock -q " "rlock -v --prefix p " "rlock -u redis://h:1 "
  "rlock --url=redis://h:1 --insecure ")
# in an option's value;
SUB_VALUE=("rlock -u " "rlock --prefix " "rlock -q --connect-timeout ")
# after the command name: the command's argument, options;
SUB_AFTER=("rlock status " "rlock -q status " "rlock release " "rlock list " "rlock acquire "
  "rlock run " "rlock status --")
# run's command. ("acq", "rel" and "ext" begin no command but would begin a subcommand.)
SUB_CHILD=("rlock run k acq" "rlock run k -- rel" "rlock -q run -w 1s k ext")
SUB_LINES=("${SUB_BEFORE[@]}" "rlock -q st" "${SUB_VALUE[@]}" "${SUB_AFTER[@]}" "${SUB_CHILD[@]}" "rlock -- ")

check_subcommands() {
  local sh=$1 line
  local -a before=("${SUB_BEFORE[@]}") value=("${SUB_VALUE[@]}") after=("${SUB_AFTER[@]}") child=("${SUB_CHILD[@]}")
  complete_in "$sh" "${SUB_LINES[@]}"
  for line in "${before[@]}"; do
    pick "$line"
    offers "${SUBCOMMANDS[@]}"
  done
  pick "rlock -q st"
  offers_only status
  for line in "${value[@]}" "${after[@]}"; do
    pick "$line"
    offers_none "${SUBCOMMANDS[@]}"
    offers_no_subcommand_name
  done
  for line in "${child[@]}"; do
    pick "$line"
    offers_no_subcommand_name
  done
  pick "rlock -u "
  offers redis:// rediss:// unix:// redis+sentinel://
  pick "rlock status --"
  offers --json --prefix
  # Nothing follows "--" before the command name.
  pick "rlock -- "
  offers_nothing
}

# The lines of check_run_command: the command after KEY, with or without "--", run's options
# before it: a command on PATH (not a builtin of the shell); an option before the command word.
RUN_CMD=("rlock run k redis-cl" "rlock run -w 5s k -- redis-cl" "rlock -q run --ttl 1m k redis-cl"
  "rlock run -u redis://h:1 k redis-cl")
RUN_LINES=("${RUN_CMD[@]}" "rlock run k --tt")

check_run_command() {
  local sh=$1 line
  local -a cmd=("${RUN_CMD[@]}")
  complete_in "$sh" "${RUN_LINES[@]}"
  for line in "${cmd[@]}"; do
    pick "$line"
    offers redis-cli
  done
  # An option before the command word is still run's.
  pick "rlock run k --tt"
  offers_only --ttl
}

# The lines of check_options.
OPT_LINES=("rlock run -" "rlock acquire -" "rlock -" "rlock status --sys")

check_options() {
  local sh=$1 sub
  complete_in "$sh" "${OPT_LINES[@]}"
  for sub in run acquire; do
    pick "rlock $sub -"
    offers -w --wait --timeout -n --no-wait --nb --nonblock -x --exclusive -s --shared \
      --io-timeout --syslog -t --ttl
    offers_none -o -F --no-fork
  done
  pick "rlock -"
  offers --io-timeout --syslog -u --url --prefix
  offers_none --timeout -o -F --no-fork
  pick "rlock status --sys"
  offers_only --syslog
}

# ---------------------------------------------------------------------------------------------
# bash, with the bash-completion package's helpers

@test "bash: lock names from the server that the options on the line select; none, silently and quickly, when it is down or does not answer, or rlock hangs" {
  require_bash_completion
  start_down_checks bash hang
  check_lock_names bash
  check_server_options bash
  # A partial name; after ":" (a word break) only the rest of the name.
  complete_in bash "rlock -u $URL status dep" "rlock -u $URL status deploy:"
  pick "rlock -u $URL status dep"
  offers_only deploy:prod
  pick "rlock -u $URL status deploy:"
  offers_only prod
  check_down_server
  check_hanging_rlock
}

@test "bash: subcommands after global options only; run's command; take options" {
  require_bash_completion
  complete_ahead bash "${SUB_LINES[@]}" "${RUN_LINES[@]}" "rlock run k -- ls --al" "${OPT_LINES[@]}"
  check_subcommands bash
  check_run_command bash
  # The command's own options come from its own completion.
  complete_in bash "rlock run k -- ls --al"
  pick "rlock run k -- ls --al"
  offers --all
  check_options bash
}

# ---------------------------------------------------------------------------------------------
# bash without the bash-completion package

@test "bash without bash-completion: lock names from the server that the line selects; none, silently and quickly, when it is down or does not answer" {
  start_down_checks bash-n
  check_lock_names bash-n
  check_server_options bash-n
  check_down_server
}

@test "bash without bash-completion: subcommands after global options only; run's command" {
  complete_ahead bash-n "${SUB_LINES[@]}" "${RUN_LINES[@]}"
  check_subcommands bash-n
  check_run_command bash-n
}

# ---------------------------------------------------------------------------------------------
# zsh

@test "zsh: lock names from the server that the options on the line select; none, silently and quickly, when it is down or does not answer, or rlock hangs" {
  require_shell zsh
  start_down_checks zsh hang
  check_lock_names zsh
  check_server_options zsh
  check_down_server
  check_hanging_rlock
}

@test "zsh: subcommands after global options only; run's command; take options" {
  require_shell zsh
  complete_ahead zsh "${SUB_LINES[@]}" "${RUN_LINES[@]}" "${OPT_LINES[@]}"
  check_subcommands zsh
  check_run_command zsh
  check_options zsh
}

# ---------------------------------------------------------------------------------------------
# fish

@test "fish: lock names from the server that the options on the line select; none, silently and quickly, when it is down or does not answer, or rlock hangs" {
  require_shell fish
  start_down_checks fish hang
  check_lock_names fish
  check_server_options fish
  check_down_server
  check_hanging_rlock
}

@test "fish: subcommands after global options only; run's command; take options" {
  require_shell fish
  complete_ahead fish "${SUB_LINES[@]}" "${RUN_LINES[@]}" "${OPT_LINES[@]}"
  check_subcommands fish
  check_run_command fish
  check_options fish
}
