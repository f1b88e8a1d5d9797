#!/usr/bin/env bats
# Malformed input: bad URLs (from argv, RLOCK_URL and the config file) and bad config files, a
# sample of each kind of damage (the whole tables, 300+ URLs and 50+ files, are parsed in-process
# by tests/unit/url_test.cpp and config_file_test.cpp). Each must fail before connecting with exit
# 78 (64 for a command-line usage error) and exactly one stderr line starting "rlock: error:";
# never a crash, a sanitizer report or a hang.
#
# No Redis is needed. Where `unshare -n` works, rlock runs without a network (only a loopback
# that is down), so a bad URL that rlock wrongly accepts fails fast instead of reaching a server.
# The sanitizer pass (scripts/test) runs this file with RLOCK_BIN set to the ASan+UBSan build.

load helpers/common

# Each invocation runs under `timeout 5`, which catches a hang; the test's own bound only has to
# cover hundreds of starts on a loaded 2-core machine (several times slower under the sanitizers).
BATS_TEST_TIMEOUT=600

setup() {
  common_setup
  NONET=()
  if unshare -n true 2>/dev/null; then
    NONET=(unshare -n)
  fi
  FAILURES=()
  CHECKED=0
  CFG=$BATS_FILE_TMPDIR/cfg
}

teardown() {
  common_teardown
}

# ---------------------------------------------------------------------------------------------
# Checking one invocation

# expect_error LABEL VALUE CODES [ENV=VALUE...] -- RLOCK ARGS...
# Runs rlock (with the variables, without a network, under `timeout 5`) and records a failure
# unless: the exit code is one of CODES (e.g. "78" or "64 78"), stdout is empty, and stderr is
# exactly one line starting "rlock: error: ", with no sanitizer report. LABEL and VALUE (shown
# quoted, cut to 120 characters) name the case in the failure list.
expect_error() {
  local label=$1 value=$2 codes=$3
  shift 3
  local envs=()
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  local out err rc=0
  out=$(env "${envs[@]}" "${NONET[@]}" timeout -k 1 5 rlock "$@" 2>"$T/stderr" </dev/null) || rc=$?
  err=$(<"$T/stderr")
  CHECKED=$((CHECKED + 1))
  local why=""
  if ((rc == 124 || rc == 137)); then
    why="hung (killed after 5s)"
  elif [[ $err == *AddressSanitizer* || $err == *LeakSanitizer* || $err == *"runtime error"* ]]; then
    why="sanitizer report"
  elif ((rc >= 128)); then
    why="crashed (exit $rc)"
  elif [[ " $codes " != *" $rc "* ]]; then
    why="exit $rc, expected $codes"
  elif [[ -n $out ]]; then
    why="printed on stdout"
  elif [[ $err == *$'\n'* || $err != "rlock: error: "?* ]]; then
    why="stderr is not one 'rlock: error:' line"
  fi
  if [[ -n $why ]]; then
    local args
    args=$(printf '%q ' "$@")
    FAILURES+=("$label $(printf '%q' "${value:0:120}") (${args:0:160}): $why; stderr: $(printf '%q' "${err:0:300}")")
  fi
  return 0
}

# report_failures: fails the test listing every recorded failure (the first 40).
report_failures() {
  local n=${#FAILURES[@]}
  ((CHECKED > 0)) || fail "nothing was checked"
  if ((n > 0)); then
    printf '%s\n' "${FAILURES[@]:0:40}" >&2
    fail "$n of $CHECKED invocations failed (listed above)"
  fi
}

# The commands the URLs are tried with, in turn.
COMMANDS=("status k" "run k -- true" "acquire k" "list" "release k --force" "extend k")

# cmd_args I: the words of command I mod the number of commands.
cmd_args() {
  local c=${COMMANDS[$(($1 % ${#COMMANDS[@]}))]}
  CMD=($c)
}

# ---------------------------------------------------------------------------------------------
# The bad URLs

# Non-ASCII characters as UTF-8 bytes (the file itself stays ASCII).
E_ACUTE=$'\xc3\xa9'
ARABIC_6379=$'\xd9\xa6\xd9\xa3\xd9\xa7\xd9\xa9'
WIDE_ZERO=$'\xef\xbc\x90'
KANJI=$'\xe6\x97\xa5\xe6\x9c\xac'
EMOJI=$'\xf0\x9f\x98\x80'

# bad_urls: fills BAD_URLS with a sample of malformed URLs, each invalid however a parser reads
# it: a few of each kind of damage. The whole table (300+) is parsed in-process, from the command
# line, RLOCK_URL and the config file, by tests/unit/url_test.cpp (MalformedUrl); here the binary
# shows what only a process can: the exit code, one "rlock: error:" line (control characters and
# huge inputs made printable and short), nothing on stdout, no crash or hang.
bad_urls() {
  BAD_URLS=(
    # Schemes and separators.
    "" "://" "redis:127.0.0.1:6379" "127.0.0.1:6379" "http://127.0.0.1:6379" "redis-sentinel://127.0.0.1:26379/mymaster"
    # Ports.
    "redis://127.0.0.1:0" "rediss://127.0.0.1:65536" "redis://127.0.0.1:-1" "redis://127.0.0.1:6379a"
    "redis://127.0.0.1:18446744073709551616" "redis://[::1]:abc" "redis+sentinel://127.0.0.1:26379,127.0.0.1:0/mymaster"
    # Hosts.
    "redis://" "redis://:6379/0" "redis://[::1" "redis://[::1]x" "redis://127.0.0.1:6379:6380" "redis://host name:6379"
    "redis://127.0.0.1#frag:6379" "redis://%zz:6379"
    # Userinfo with bad %-escapes.
    "redis://user:%zz@127.0.0.1:6379" "redis://%4@127.0.0.1:6379" "redis+sentinel://:%zz@127.0.0.1:26379/mymaster"
    # Databases.
    "redis://127.0.0.1:6379/x" "redis://127.0.0.1:6379/-1" "redis://127.0.0.1:6379/$WIDE_ZERO" "redis://127.0.0.1:6379/0/extra/path"
    # Unix sockets.
    "unix://relative.sock" "unix:///tmp/r.sock?db=x" "unix:///tmp/r.sock?foo=1" "unix:///tmp/%zz.sock"
    # Sentinel.
    "redis+sentinel://127.0.0.1:26379" "redis+sentinel://127.0.0.1:26379,,127.0.0.1:26380/mymaster"
    "redis+sentinel://127.0.0.1:26379/mymaster/x" "redis+sentinel://[::1/mymaster"
    # Control characters, each kind in another part (no NUL: argv cannot hold one).
    $'\x01redis://127.0.0.1:6379' $'re\tdis://127.0.0.1:6379' $'redis://127.0.0.1\n:6379' $'redis://127.0.0.1:63\r79'
    $'redis://us\x1ber:pw@127.0.0.1:6379' $'redis://127.0.0.1:6379/\x7f0' $'unix:///tmp/r\x08.sock'
    $'redis://127.0.0.1:6379\nrlock: error: fake' $'\x1b[31mredis://x' $'redis+sentinel://127.0.0.1:26379/my\nmaster'
    # Non-ASCII: a host name, digits of another script, a byte-order mark, invalid UTF-8.
    "redis://h${E_ACUTE}llo:6379" "redis://127.0.0.1:${ARABIC_6379}" "redis://${EMOJI}:6379" "rediss://${KANJI}.example:6379"
    $'\xef\xbb\xbfredis://127.0.0.1:6379' $'redis://\xff\xfe:6379'
    # Huge inputs (100000 characters; argv takes up to 128 KiB in one argument).
    "redis://$(repeat a)" "redis://127.0.0.1:$(repeat 9)" "$(repeat x)" "redis+sentinel://$(repeat 127.0.0.1:26379, 3000)/mymaster"
  )
}

# repeat TEXT [N]: TEXT N times (default 100000).
repeat() {
  perl -e 'print $ARGV[0] x $ARGV[1]' "$1" "${2:-100000}"
}

setup_file() {
  # The table, made once: NUL-separated in a file.
  bad_urls
  printf '%s\0' "${BAD_URLS[@]}" >"$BATS_FILE_TMPDIR/bad-urls"
  CFG=$BATS_FILE_TMPDIR/cfg make_bad_configs
}

# load_urls: BAD_URLS from the file setup_file wrote.
load_urls() {
  mapfile -d '' BAD_URLS <"$BATS_FILE_TMPDIR/bad-urls"
}

# ---------------------------------------------------------------------------------------------

@test "malformed URLs in --url: exit 78 (or 64), one error line, no crash or hang" {
  load_urls
  local i
  for i in "${!BAD_URLS[@]}"; do
    cmd_args "$i"
    expect_error --url "${BAD_URLS[$i]}" "64 78" \
      RLOCK_TOKEN=0123456789abcdef0123456789abcdef -- "${CMD[0]}" -u "${BAD_URLS[$i]}" "${CMD[@]:1}"
  done
  report_failures
}

@test "malformed URLs in RLOCK_URL: exit 78, one error line" {
  load_urls
  local i u
  for i in "${!BAD_URLS[@]}"; do
    u=${BAD_URLS[$i]}
    # RLOCK_URL is a list separated by spaces or commas: those URLs mean something else there.
    [[ $u == *[' ,']* || -z $u ]] && continue
    cmd_args $((i + 1))
    expect_error RLOCK_URL= "$u" "78" \
      "RLOCK_URL=$u" RLOCK_TOKEN=0123456789abcdef0123456789abcdef -- "${CMD[@]}"
  done
  report_failures
}

@test "malformed URLs in the config file: exit 78, one error line" {
  load_urls
  local i u
  for i in "${!BAD_URLS[@]}"; do
    u=${BAD_URLS[$i]}
    # A TOML literal string holds anything but ' and line breaks; other control characters are
    # not allowed in TOML strings at all (a different error, also 78).
    [[ $u == *[\'$'\n\r']* ]] && continue
    printf "url = '%s'\n" "$u" >"$T/bad.toml"
    cmd_args $((i + 2))
    expect_error "config url =" "$u" "78" \
      RLOCK_TOKEN=0123456789abcdef0123456789abcdef -- "${CMD[0]}" --config "$T/bad.toml" "${CMD[@]:1}"
  done
  report_failures
}

@test "an empty --url is an error too" {
  expect_error "--url" "" "64 78" -- status k -u ""
  expect_error "--url=" "" "64 78" -- status k --url=
  report_failures
}

# ---------------------------------------------------------------------------------------------
# Malformed config files

# config_case NAME: writes $CFG/NAME from stdin.
config_case() {
  mkdir -p "$CFG"
  cat >"$CFG/$1"
}

# make_bad_configs: a sample of malformed config files, a few of each kind (the whole set, 50+,
# is parsed in-process by tests/unit/config_file_test.cpp, EveryMalformedFileExits78NamingIt).
# Made once, by setup_file, in $CFG.
make_bad_configs() {
  config_case unterminated-basic <<<'ttl = "5s'
  config_case table <<<$'[rlock]\nttl = "5s"'
  config_case duplicate-spelling <<<$'kill-after = "1s"\nkill_after = "2s"'
  config_case unknown-setting <<<'no-such-setting = 1'
  config_case bad-duration <<<'ttl = "abc"'
  config_case url-bad <<<'url = "ftp://127.0.0.1"'
  config_case exit-code-256 <<<'conflict-exit-code = 256'
  config_case password-file-missing <<<"password-file = \"$CFG/no-such-password-file\""
  config_case control-char <<<$'ttl = "5\x01s"'
  config_case newline-in-string <<<$'ttl = "5\ns"'
  printf 'ttl = "5s"\0\n' | config_case nul-byte
  printf '\x00\x01\x02\xff\xfe\x80garbage\x7f\n' | config_case binary
  printf '\xff\xfe=\xc0\xaf\n' | config_case invalid-utf8
  head -c 2000000 /dev/zero | tr '\0' '#' | config_case too-large
  {
    printf 'ttl = "'
    head -c 500000 /dev/zero | tr '\0' 'a'
    printf '"\n'
  } | config_case long-value
  seq 1 5000 | awk '{ printf "ttl = \"%ss\"\n", $1 }' | config_case many-duplicates
}

# The files a config case is about when it is not the config file itself.
OTHER_FILE_CASES=" password-file-missing "

@test "malformed config files: exit 78, one error line, no crash or hang; the error names the file" {
  local f err
  for f in "$CFG"/*; do
    expect_error --config "$(basename "$f")" "78" -- run k --config "$f" -- true
    # The error names the file (there may be several: XDG, /etc, --config), unless it is about
    # another file that the config names.
    [[ $OTHER_FILE_CASES == *" $(basename "$f") "* ]] && continue
    err=$(<"$T/stderr")
    [[ $err == *"$f"* ]] || FAILURES+=("config $(basename "$f"): the error does not name the file: ${err:0:300}")
  done
  report_failures
}

@test "the config files through RLOCK_CONFIG and the default path: exit 78" {
  local f i=0
  mkdir -p "$XDG_CONFIG_HOME/rlock"
  for f in "$CFG"/*; do
    if ((i++ % 2 == 0)); then
      expect_error RLOCK_CONFIG= "$(basename "$f")" "78" "RLOCK_CONFIG=$f" -- run k -- true
    else
      cp "$f" "$XDG_CONFIG_HOME/rlock/config.toml"
      expect_error "default config" "$(basename "$f")" "78" -- run k -- true
    fi
  done
  report_failures
}

@test "a --config that is missing or a directory: exit 78" {
  expect_error --config "$T/no-such.toml" "78" -- status k --config "$T/no-such.toml"
  expect_error --config "$T (a directory)" "78" -- status k --config "$T"
  expect_error RLOCK_CONFIG= "$T/no-such.toml" "78" "RLOCK_CONFIG=$T/no-such.toml" -- status k
  report_failures
}

@test "bad TLS and password files on the command line fail before connecting: exit 78" {
  local u=rediss://127.0.0.1:1
  expect_error --cacert "$T/no-such-ca.pem" "78" -- status k -u "$u" --cacert "$T/no-such-ca.pem"
  expect_error --cacert "$T (a directory)" "78" -- status k -u "$u" --cacert "$T"
  echo garbage >"$T/garbage.pem"
  expect_error --cacert "$T/garbage.pem" "78" -- status k -u "$u" --cacert "$T/garbage.pem"
  expect_error --cert "$T/no-such.pem" "78" -- status k -u "$u" --cert "$T/no-such.pem" --key "$T/no-such.key"
  expect_error --password-file "$T/no-such-password" "78" -- status k --password-file "$T/no-such-password"
  expect_error --password-file "$T (a directory)" "78" -- status k --password-file "$T"
  expect_error RLOCK_PASSWORD_FILE= "$T/no-such-password" "78" "RLOCK_PASSWORD_FILE=$T/no-such-password" -- status k
  report_failures
}
