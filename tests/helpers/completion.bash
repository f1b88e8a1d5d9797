# Drives the shell completions in completions/ as the shells do, for tests/completions.bats.
#
# Each comp_* function completes one or more command lines, each with the cursor at its end (a
# line ending in a space completes a new, empty word), in one run of the shell, and prints for
# each line its candidates, one a line, then a line holding only $COMP_END.
#
# Environment: RLOCK_SOURCE_DIR, the source tree (default: the parent of tests/).

: "${RLOCK_SOURCE_DIR:=$(cd "$BATS_TEST_DIRNAME/.." && pwd)}"

# The line after each line's candidates (no candidate can be a lone control character).
COMP_END=$'\x1f'

# The file of the bash-completion package that defines its helpers (_command_offset, ...).
BASH_COMPLETION_MAIN=/usr/share/bash-completion/bash_completion

# comp_bash [-n] LINE...
# Sources completions/rlock.bash in a fresh bash, after the bash-completion package's helpers
# (-n: without them), and for each LINE calls _rlock as bash would and prints COMPREPLY.
# COMP_WORDS is split as bash splits it: at white space, and again at runs of the
# COMP_WORDBREAKS characters "=" and ":" (":" in "redis://host:6379" is a word of its own); a
# word in quotes stays whole (and must hold no space).
comp_bash() {
  local with_helpers=1
  if [[ $1 == -n ]]; then
    with_helpers=0
    shift
  fi
  bash --norc --noprofile -c '
    with_helpers=$1 file=$2 helpers=$3 end=$4
    shift 4
    if ((with_helpers)); then
      source "$helpers" || exit 90
      declare -F _command_offset >/dev/null || exit 91
    fi
    source "$file" || exit 92
    # Outside of a real completion compopt fails and complains: keep it quiet.
    compopt() { builtin compopt "$@" 2>/dev/null; return 0; }
    printf -v quotes "\"\047"
    for line; do
      COMP_WORDS=()
      read -ra tokens <<<"$line"
      for t in "${tokens[@]}"; do
        if [[ $t == ["$quotes"]* ]]; then
          COMP_WORDS+=("$t")
          continue
        fi
        while [[ -n $t ]]; do
          if [[ $t == [=:]* ]]; then
            piece=${t%%[!=:]*}
          else
            piece=${t%%[=:]*}
          fi
          COMP_WORDS+=("$piece")
          t=${t:${#piece}}
        done
      done
      [[ $line == *[[:space:]] ]] && COMP_WORDS+=("")
      COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
      COMP_LINE=$line
      COMP_POINT=${#line}
      COMP_TYPE=9
      COMP_KEY=9
      COMPREPLY=()
      _rlock rlock "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" || exit 93
      ((${#COMPREPLY[@]})) && printf "%s\n" "${COMPREPLY[@]}"
      printf "%s\n" "$end"
    done
    exit 0
  ' _ "$with_helpers" "$RLOCK_SOURCE_DIR/completions/rlock.bash" "$BASH_COMPLETION_MAIN" "$COMP_END" "$@"
}

# comp_zsh [-t] LINE...
# Types each LINE and a Tab into an interactive zsh (on a pseudo-terminal, see zsh-complete)
# whose $fpath starts with completions/, and prints the matches its completion system added
# (-t: then "elapsed SECONDS", the time the completion took).
comp_zsh() {
  local timing=()
  if [[ $1 == -t ]]; then
    timing=(-t)
    shift
  fi
  timeout 30 zsh -f "$BATS_TEST_DIRNAME/helpers/zsh-complete" "${timing[@]}" -e "$COMP_END" \
    "$RLOCK_SOURCE_DIR/completions" "$@"
}

# comp_fish LINE...
# Asks a fish that has sourced completions/rlock.fish what it completes for each LINE
# (`complete -C`); prints the candidates without their descriptions.
comp_fish() {
  timeout 30 fish --no-config -c '
    source $argv[1]; or exit 92
    for line in $argv[3..-1]
      complete -C $line | string replace -r "\t.*" ""
      echo $argv[2]
    end
  ' "$RLOCK_SOURCE_DIR/completions/rlock.fish" "$COMP_END" "$@"
}

# Skip the test when SHELL (zsh, fish) or the bash-completion package is not installed.
require_shell() {
  command -v "$1" >/dev/null || skip "$1 is not installed"
}
require_bash_completion() {
  [[ -r $BASH_COMPLETION_MAIN ]] || skip "the bash-completion package is not installed"
}
