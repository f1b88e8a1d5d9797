# The option table and the pages' text, for tests/docs.bats. (Functions of a helper file: Bats's
# DEBUG trap records the stack only for commands of the test file itself, helpers/common.bash.)

# Print FILE (relative to the source dir, or absolute) in a form where every long option
# is written "--name": the man page's "\-" becomes "-" (and its font escapes and "\&" go), and fish's
# "-l name" / "--long-option name" becomes "--name".
normalised() {
  local path=$1
  [[ $path == /* ]] || path=$RLOCK_SOURCE_DIR/$1
  [[ -r $path ]] || return 1
  case $1 in
    *.1)
      sed -E -e 's/\\-/-/g' -e 's/\\&//g' -e 's/\\f(\[[^]]*\]|\(..|.)//g' "$path"
      ;;
    *.fish)
      sed -E 's/(^|[[:space:]])(-l|--long-option)[[:space:]=]+([a-z])/\1--\3/g' "$path"
      ;;
    *)
      cat "$path"
      ;;
  esac
}

# names_option OPT TEXT: succeeds if TEXT names the long option OPT as a whole word:
# "--ttl" matches "--ttl", "--ttl=", "--ttl)" but not "--ttl-foo" or "--no--ttl". (A match in
# the shell: a grep for each option and page would start hundreds of processes a test.)
names_option() {
  local re="(^|[^-])$1([^a-z0-9-]|\$)"
  [[ $2 =~ $re ]]
}

# names_word WORD TEXT: succeeds if TEXT holds WORD as a whole word (as grep -w finds it).
names_word() {
  local re="(^|[^[:alnum:]_])$1([^[:alnum:]_]|\$)"
  [[ $2 =~ $re ]]
}

# The option table, from `rlock --dump-options` (its format: the comment above dump_options in
# src/commands/options.hpp): sets DUMP to its lines, one per option and command, with seven
# tab-separated fields (command, names, kind, type, env, config, help; "-" when empty).
load_dump() {
  [[ -x $RLOCK_BIN ]] || fail "rlock binary not found at $RLOCK_BIN (build it, or set RLOCK_BIN)"
  run --separate-stderr "$RLOCK_BIN" --dump-options
  [[ $status -eq 0 ]] || fail "'rlock --dump-options' exited $status: $stderr"
  [[ -z $stderr ]] || fail "'rlock --dump-options' wrote on stderr: $stderr"
  mapfile -t DUMP <<<"$output"
  ((${#DUMP[@]} > 40)) || fail "'rlock --dump-options' printed ${#DUMP[@]} lines: $output"
  local line
  local -a f
  for line in "${DUMP[@]}"; do
    IFS=$'\t' read -ra f <<<"$line"
    ((${#f[@]} == 7)) || fail "'rlock --dump-options': not 7 fields: $line"
  done
}

# check_options COMMAND: every long option the table gives COMMAND ("global" for the options of
# every command) is in the man page and in "rlock COMMAND --help"; every variable that gives one
# of them is in the man page's ENVIRONMENT section. Reports all gaps at once.
check_options() {
  local command=$1
  load_dump
  local -a help_args=()
  [[ $command == global ]] || help_args=("$command")
  run "$RLOCK_BIN" "${help_args[@]}" --help
  [[ $status -eq 0 ]] || fail "'rlock ${help_args[*]} --help' exited $status: $output"
  local help=$output man environment
  man=$(normalised "$MAN_PAGE") || fail "cannot read $MAN_PAGE (build the man pages: cmake --build build)"
  environment=$(sed -n '/^\.SH "\{0,1\}ENVIRONMENT/,/^\.SH /p' <<<"$man")
  [[ -n $environment ]] || fail "$MAN_PAGE has no ENVIRONMENT section"

  local -a missing=() names envs
  local line cmd opts kind type env config text name var n=0
  for line in "${DUMP[@]}"; do
    IFS=$'\t' read -r cmd opts kind type env config text <<<"$line"
    [[ $cmd == "$command" ]] || continue
    n=$((n + 1))
    IFS=, read -ra names <<<"$opts"
    for name in "${names[@]}"; do
      [[ $name == --* ]] || continue
      names_option "$name" "$man" || missing+=("$name is missing from $MAN_PAGE")
      names_option "$name" "$help" || missing+=("$name is missing from 'rlock ${help_args[*]} --help'")
    done
    [[ $env == - ]] && continue
    IFS=, read -ra envs <<<"$env"
    for var in "${envs[@]}"; do
      names_word "$var" "$environment" || missing+=("$var ($opts) is missing from ENVIRONMENT in $MAN_PAGE")
    done
  done
  ((n > 0)) || fail "'rlock --dump-options' lists no option for $command"
  if ((${#missing[@]})); then
    fail "$(printf '%s\n' "from 'rlock --dump-options', for $command:" "${missing[@]}")"
  fi
}
