#!/usr/bin/env bats
# The man page and the shell completions cover every option the binary accepts,
# the man page lints clean, and it documents every exit status.
#
# Environment: RLOCK_BIN (default $RLOCK_SOURCE_DIR/build/rlock) and
# RLOCK_SOURCE_DIR (default: the parent of this file's directory).

setup() {
    load '/usr/lib/bats/bats-support/load'
    load '/usr/lib/bats/bats-assert/load'

    : "${RLOCK_SOURCE_DIR:=$(cd "$BATS_TEST_DIRNAME/.." && pwd)}"
    : "${RLOCK_BIN:=$RLOCK_SOURCE_DIR/build/rlock}"
    MAN_PAGE=man/rlock.1
    COMPLETIONS=(completions/rlock.bash completions/_rlock completions/rlock.fish)
    SUBCOMMANDS=(run acquire release extend status list log)
    EXIT_CODES=(0 1 64 65 69 70 71 75 76 77 78 126 127)
}

# Print FILE (relative to the source dir) in a form where every long option
# is written "--name": the man page's "\-" becomes "-", and fish's
# "-l name" / "--long-option name" becomes "--name".
normalised() {
    local path=$RLOCK_SOURCE_DIR/$1
    [[ -r $path ]] || return 1
    case $1 in
        *.1)
            sed 's/\\-/-/g' "$path"
            ;;
        *.fish)
            sed -E 's/(^|[[:space:]])(-l|--long-option)[[:space:]=]+([a-z])/\1--\3/g' "$path"
            ;;
        *)
            cat "$path"
            ;;
    esac
}

# Succeeds if TEXT (stdin) names the long option OPT as a whole word:
# "--ttl" matches "--ttl", "--ttl=", "--ttl)" but not "--ttl-foo" or "--no--ttl".
names_option() {
    grep -Eq -- "(^|[^-])$1([^a-z0-9-]|\$)"
}

# Run "rlock ARGS --help" and check that every long option and every
# environment variable it mentions is in the man page, and that every long
# option is in each completion file. Reports all gaps at once.
check_help() {
    local what="rlock${*:+ $*} --help"
    [[ -x $RLOCK_BIN ]] || fail "rlock binary not found at $RLOCK_BIN (build it, or set RLOCK_BIN)"

    run "$RLOCK_BIN" "$@" --help
    [[ $status -eq 0 ]] || fail "'$what' exited $status: $output"
    local help=$output

    local -a options vars
    mapfile -t options < <(grep -oE -- '--[a-z][a-z0-9-]+' <<<"$help" | sort -u)
    mapfile -t vars < <(grep -oE '\b(RLOCK_[A-Z0-9_]+|REDIS_URL|REDISCLI_AUTH)\b' <<<"$help" | sort -u)
    ((${#options[@]} > 0)) || fail "'$what' printed no long option: $help"
    [[ " ${options[*]} " == *" --help "* ]] || fail "'$what' does not list --help: $help"

    local -a missing=()
    local file opt var text
    for file in "$MAN_PAGE" "${COMPLETIONS[@]}"; do
        text=$(normalised "$file") || fail "cannot read $RLOCK_SOURCE_DIR/$file"
        for opt in "${options[@]}"; do
            names_option "$opt" <<<"$text" || missing+=("$opt is missing from $file")
        done
    done
    text=$(normalised "$MAN_PAGE")
    for var in "${vars[@]}"; do
        grep -qw -- "$var" <<<"$text" || missing+=("environment variable $var is missing from $MAN_PAGE")
    done

    if ((${#missing[@]})); then
        fail "$(printf '%s\n' "from '$what':" "${missing[@]}")"
    fi
}

@test "top-level --help options are in the man page and completions" {
    check_help
}

@test "run --help options are in the man page and completions" {
    check_help run
}

@test "acquire --help options are in the man page and completions" {
    check_help acquire
}

@test "release --help options are in the man page and completions" {
    check_help release
}

@test "extend --help options are in the man page and completions" {
    check_help extend
}

@test "status --help options are in the man page and completions" {
    check_help status
}

@test "list --help options are in the man page and completions" {
    check_help list
}

@test "log --help options are in the man page and completions" {
    check_help log
}

@test "every subcommand is in the man page and completions" {
    local -a missing=()
    local file sub text
    text=$(normalised "$MAN_PAGE" | sed -n '/^\.SH COMMANDS/,/^\.SH /p')
    for sub in "${SUBCOMMANDS[@]}"; do
        grep -Eq "^\.(B|BI|BR) \"?$sub\b" <<<"$text" || missing+=("$sub is missing from the COMMANDS section of $MAN_PAGE")
    done
    for file in "${COMPLETIONS[@]}"; do
        text=$(normalised "$file")
        for sub in "${SUBCOMMANDS[@]}"; do
            grep -qw -- "$sub" <<<"$text" || missing+=("$sub is missing from $file")
        done
    done
    if ((${#missing[@]})); then
        fail "$(printf '%s\n' "${missing[@]}")"
    fi
}

@test "man page lints clean" {
    local linted=0
    if command -v mandoc >/dev/null; then
        run mandoc -T lint -W warning "$RLOCK_SOURCE_DIR/$MAN_PAGE"
        assert_success
        assert_output ''
        linted=1
    fi
    if command -v groff >/dev/null; then
        run groff -ww -man -z "$RLOCK_SOURCE_DIR/$MAN_PAGE"
        assert_success
        assert_output ''
        linted=1
    fi
    ((linted)) || skip "neither mandoc nor groff is installed"
}

@test "man page EXIT STATUS documents every exit code" {
    local section
    # The section's text without font escapes ("\fB64\fR" -> "64").
    section=$(sed -n '/^\.SH "\{0,1\}EXIT STATUS/,/^\.SH /p' "$RLOCK_SOURCE_DIR/$MAN_PAGE" |
        sed -E 's/\\f(\[[^]]*\]|\(..|.)//g')
    [[ -n $section ]] || fail "$MAN_PAGE has no EXIT STATUS section"

    local -a missing=()
    local code
    for code in "${EXIT_CODES[@]}"; do
        grep -Eq "(^|[^0-9.+])$code([^0-9]|\$)" <<<"$section" || missing+=("exit code $code")
    done
    grep -q '128+' <<<"$section" || missing+=("exit code 128+N")
    if ((${#missing[@]})); then
        fail "$(printf '%s\n' "missing from the EXIT STATUS section of $MAN_PAGE:" "${missing[@]}")"
    fi
}

@test "completion files load without errors" {
    run bash -c 'source "$1" && complete -p rlock' _ "$RLOCK_SOURCE_DIR/completions/rlock.bash"
    assert_success
    assert_output --partial '_rlock'
    if command -v zsh >/dev/null; then
        run zsh -n "$RLOCK_SOURCE_DIR/completions/_rlock"
        assert_success
        assert_output ''
    fi
    if command -v fish >/dev/null; then
        run fish -n "$RLOCK_SOURCE_DIR/completions/rlock.fish"
        assert_success
        assert_output ''
    fi
}
