#!/usr/bin/env bats
# Malformed input: 200+ bad URLs (from argv, RLOCK_URL and the config file) and 40+ bad config
# files. Each must fail before connecting with exit 78 (64 for a command-line usage error) and
# exactly one stderr line starting "rlock: error:"; never a crash, a sanitizer report or a hang.
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
U_UMLAUT=$'\xc3\xbc'
ARABIC_ONE=$'\xd9\xa1'
ARABIC_THREE=$'\xd9\xa3'
ARABIC_6379=$'\xd9\xa6\xd9\xa3\xd9\xa7\xd9\xa9'
WIDE_ZERO=$'\xef\xbc\x90'
WIDE_6379=$'\xef\xbc\x96\xef\xbc\x93\xef\xbc\x97\xef\xbc\x99'
KANJI=$'\xe6\x97\xa5\xe6\x9c\xac'
EMOJI=$'\xf0\x9f\x98\x80'

# bad_urls: fills BAD_URLS with malformed URLs, each invalid however a parser reads it.
bad_urls() {
  BAD_URLS=()
  local u p

  # Schemes and separators.
  BAD_URLS+=(
    "" "://" ":" "/" "//" ":///" "redis" "redis:" "redis:/" "redis:/127.0.0.1:6379"
    "redis:127.0.0.1:6379" "redis//127.0.0.1:6379" "redis:\\\\127.0.0.1" "127.0.0.1:6379" "127.0.0.1"
    "localhost:6379" "://127.0.0.1:6379" "http://127.0.0.1:6379" "https://127.0.0.1:6379"
    "tcp://127.0.0.1:6379" "ftp://127.0.0.1" "file:///tmp/redis.sock" "r://127.0.0.1" "redis+unix:///tmp/r.sock"
    "sentinel://127.0.0.1:26379/mymaster" "redis-sentinel://127.0.0.1:26379/mymaster"
    "redis+sentinels://127.0.0.1:26379/mymaster" "redis+://127.0.0.1" "+sentinel://127.0.0.1:26379/m"
    "redis ://127.0.0.1:6379" "re dis://127.0.0.1" "redis:://127.0.0.1" "redis:/ /127.0.0.1"
    "unix:/tmp/redis.sock" "unix:tmp/redis.sock" "unix//tmp/redis.sock" "redi\$://127.0.0.1"
    "redis%3A//127.0.0.1" "redis%3a%2f%2f127.0.0.1"
  )

  # Ports: zero, out of range, negative, not decimal digits, empty, overflowing.
  for p in 0 00 65536 65537 99999 100000 -1 -6379 -0 abc 6379a a6379 6x79 0x1f 1e3 6379.0 "6 379" \
    ":6379" 18446744073709551616 99999999999999999999999999 "" "\$PORT" "%36379"; do
    BAD_URLS+=("redis://127.0.0.1:$p" "rediss://127.0.0.1:$p")
  done
  for p in 0 65536 -1 abc "" 1e3; do
    BAD_URLS+=("redis://[::1]:$p" "redis+sentinel://127.0.0.1:$p/mymaster"
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:$p/mymaster")
  done

  # Hosts: empty, stray characters, unbalanced brackets.
  BAD_URLS+=(
    "redis://" "rediss://" "redis://:6379" "redis:///" "redis:///0" "redis://:6379/0" "redis://user@"
    "redis://user:pw@" "redis://user:pw@:6379" "redis://@:6379" "redis://@/0" "redis://user@/0"
    "redis://[" "redis://[:6379" "redis://[::1" "redis://[::1:6379" "redis://[]" "redis://[]:6379" "redis://]"
    "redis://]:6379" "redis://127.0.0.1]" "redis://127.0.0.1]:6379" "redis://[127.0.0.1" "redis://[::1]x"
    "redis://[::1]6379" "redis://[::1]:" "redis://[[::1]]:6379" "redis://[::1]]:6379"
    "redis://127.0.0.1:6379:6380" "redis://127.0.0.1::6379" "redis://::" "redis://:" "redis://127.0.0.1:6379:"
    "redis://host name:6379" "redis://127.0.0.1 :6379" "redis://127.0.0.1#frag:6379" "redis://127.0.0.1#"
    "redis://127.0.0.1?x:6379" "redis://127.0.0.1?" "redis://127.0.0.1#x/0" "redis://#" "redis://?"
    "redis://127.0.0.1\\:6379" "redis://127.0.0.1\"" "redis://<127.0.0.1>" "redis://127.0.0.1|6379"
    "redis://%zz:6379" "redis://%:6379" "redis://12%7.0.0.1:6379" "redis://127.0.0.1%:6379"
    "redis://user:pw@[:6379" "redis://user:pw@]:6379"
  )

  # Userinfo with bad %-escapes.
  for u in "%" "%%" "%z" "%zz" "%4" "%g0" "us%er" "user%" "%-1" "%+1" "% 1"; do
    BAD_URLS+=("redis://$u@127.0.0.1:6379" "redis://user:$u@127.0.0.1:6379")
  done
  BAD_URLS+=("rediss://%zz:pw@127.0.0.1:6379" "redis+sentinel://:%zz@127.0.0.1:26379/mymaster"
    "redis+sentinel://%q@127.0.0.1:26379/mymaster")

  # Databases that are not numbers.
  for p in x -1 1.5 1e3 0x10 " 1" "1 2" db0 0/ 0/1 "0//" "1a" "$ARABIC_ONE" "$WIDE_ZERO" 99999999999999999999 \
    "0?db=x" "0#" "0:1" "-" "." "0/extra/path"; do
    BAD_URLS+=("redis://127.0.0.1:6379/$p")
  done
  BAD_URLS+=("rediss://127.0.0.1:6379/x" "redis://[::1]:6379/x" "redis://127.0.0.1/x")

  # Unix sockets.
  BAD_URLS+=(
    "unix://" "unix://?db=1" "unix://relative.sock" "unix://relative/path.sock" "unix://?"
    "unix:///tmp/r.sock?db=x" "unix:///tmp/r.sock?db=" "unix:///tmp/r.sock?db=-1" "unix:///tmp/r.sock?db=1.5"
    "unix:///tmp/r.sock?foo=1" "unix:///tmp/r.sock?db=1&db=x" "unix:///tmp/r.sock?=1" "unix:///tmp/r.sock?db"
    "unix:///tmp/r.sock?db=99999999999999999999" "unix:///tmp/%zz.sock" "unix:///tmp/r.sock%" "unix:///tmp/%4.sock"
    "unix://user:%zz@/tmp/r.sock"
  )

  # Sentinel URLs without a master or without hosts, or with bad parts.
  BAD_URLS+=(
    "redis+sentinel://" "redis+sentinel://127.0.0.1:26379" "redis+sentinel://127.0.0.1:26379/"
    "redis+sentinel://127.0.0.1:26379//" "redis+sentinel:///mymaster" "redis+sentinel://,/mymaster"
    "redis+sentinel://127.0.0.1:26379,/mymaster" "redis+sentinel://,127.0.0.1:26379/mymaster"
    "redis+sentinel://127.0.0.1:26379,,127.0.0.1:26380/mymaster" "redis+sentinel://127.0.0.1:26379//mymaster"
    "redis+sentinel://127.0.0.1:26379/mymaster/x" "redis+sentinel://127.0.0.1:26379/mymaster/-1"
    "redis+sentinel://127.0.0.1:26379/mymaster/0/1" "redis+sentinel://127.0.0.1:26379/mymaster?x"
    "redis+sentinel://127.0.0.1:26379/my#master" "redis+sentinel://127.0.0.1:26379/my@master"
    "redis+sentinel://127.0.0.1:26379/my:master" "redis+sentinel://[::1/mymaster"
    "redis+sentinel://@/mymaster" "redis+sentinel://user:pw@/mymaster" "redis+sentinel://:/mymaster"
    "redis+sentinel://127.0.0.1:26379:1/mymaster" "redis+sentinel://127.0.0.1:26379/mymaster/1.5"
    "redis+sentinel:/127.0.0.1:26379/mymaster" "redis+sentinel:127.0.0.1:26379/mymaster"
  )

  # Control characters (no NUL: argv cannot hold one) in every part.
  local c
  for c in $'\x01' $'\t' $'\n' $'\r' $'\x1b' $'\x7f' $'\x08'; do
    BAD_URLS+=("${c}redis://127.0.0.1:6379" "re${c}dis://127.0.0.1:6379" "redis://127.0.0.1${c}:6379"
      "redis://127.0.0.1:63${c}79" "redis://us${c}er:pw@127.0.0.1:6379" "redis://127.0.0.1:6379/${c}0"
      "unix:///tmp/r${c}.sock")
  done
  BAD_URLS+=($'redis://127.0.0.1:6379\n' $'redis://127.0.0.1:6379\nrlock: error: fake' $'\x1b[31mredis://x'
    $'redis+sentinel://127.0.0.1:26379/my\nmaster' $'redis+sentinel://127.0.0.1:26379/my\tmaster')

  # Non-ASCII (written as UTF-8 bytes): host names that are not ASCII host names, digits from
  # other scripts, a byte-order mark, a zero-width space, invalid UTF-8.
  BAD_URLS+=(
    "redis://h${E_ACUTE}llo:6379" "redis://${U_UMLAUT}/0" "redis://127.0.0.1:${WIDE_6379}" "redis://127.0.0.1:${ARABIC_6379}"
    "r${E_ACUTE}dis://127.0.0.1" "redis://127.0.0.1/${ARABIC_THREE}" "rediss://${KANJI}.example:6379" "redis://${EMOJI}:6379"
    "redis://127.0.0.1:6379/${EMOJI}" "unix:///tmp/r.sock?db=${EMOJI}" "redis+sentinel://127.0.0.1:26379/${EMOJI}/x"
    $'redis://\xff\xfe:6379' $'redis://127.0.0.1:\xc0\xaf' $'\xef\xbb\xbfredis://127.0.0.1:6379'
    "redis://127.0.0.1\\u200b:6379" $'redis://127.0.0.1\xe2\x80\x8b:6379'
  )

  # Huge inputs (100000 characters; argv takes up to 128 KiB in one argument).
  BAD_URLS+=(
    "redis://$(repeat a)"
    "redis://127.0.0.1:$(repeat 9)"
    "redis://127.0.0.1:6379/$(repeat 9)"
    "redis://$(repeat u)@"
    "$(repeat x)"
    "redis://$(repeat %)@127.0.0.1"
    "redis://127.0.0.1:6379/$(repeat x)"
    "redis+sentinel://$(repeat ,)/mymaster"
    "unix:///tmp/r.sock?$(repeat '&')db=x"
    "redis://$(repeat '[')"
    "redis+sentinel://$(repeat 127.0.0.1:26379, 3000)/mymaster"
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
}

# load_urls: BAD_URLS from the file setup_file wrote.
load_urls() {
  mapfile -d '' BAD_URLS <"$BATS_FILE_TMPDIR/bad-urls"
}

# ---------------------------------------------------------------------------------------------

@test "the table has 200+ malformed URLs" {
  load_urls
  ((${#BAD_URLS[@]} >= 200)) || fail "only ${#BAD_URLS[@]} URLs"
  echo "# ${#BAD_URLS[@]} URLs" >&3
}

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

# The environment and config-file passes take every other URL each (the table interleaves its
# kinds of damage, so both see every kind), to keep the suite short under the sanitizers.

@test "malformed URLs in RLOCK_URL: exit 78, one error line" {
  load_urls
  local i u
  for i in "${!BAD_URLS[@]}"; do
    ((i % 2 == 0)) || continue
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
    ((i % 2 == 1)) || continue
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

# config_case NAME: writes $T/cfg/NAME from stdin.
config_case() {
  mkdir -p "$T/cfg"
  cat >"$T/cfg/$1"
}

make_bad_configs() {
  config_case no-value <<<'ttl ='
  config_case no-equals <<<'ttl'
  config_case no-name <<<'= "5s"'
  config_case unterminated-basic <<<'ttl = "5s'
  config_case unterminated-literal <<<"ttl = '5s"
  config_case table <<<$'[rlock]\nttl = "5s"'
  config_case array-of-tables <<<'[[rlock]]'
  config_case table-after <<<$'ttl = "5s"\n[other]'
  config_case duplicate <<<$'ttl = "5s"\nttl = "6s"'
  config_case duplicate-spelling <<<$'kill-after = "1s"\nkill_after = "2s"'
  config_case unknown-setting <<<'no-such-setting = 1'
  config_case unknown-upper <<<'TTL = "5s"'
  config_case dotted-key <<<'rlock.ttl = "5s"'
  config_case space-in-name <<<'t t l = "5s"'
  config_case bad-duration <<<'ttl = "abc"'
  config_case zero-ttl <<<'ttl = 0'
  config_case negative-ttl <<<'ttl = -5'
  config_case unit-parsec <<<'max-hold = "1parsec"'
  config_case bare-word <<<'ttl = 5s'
  config_case array-value <<<'ttl = [1, 2]'
  config_case inline-table <<<'ttl = { a = 1 }'
  config_case text-after-value <<<'ttl = "5s" extra'
  config_case bad-escape <<<'ttl = "\q"'
  config_case triple-quotes <<<'ttl = """5s"""'
  config_case url-number <<<'url = 5'
  config_case url-bool <<<'url = true'
  config_case url-bad <<<'url = "ftp://127.0.0.1"'
  config_case url-port-0 <<<'url = "redis://127.0.0.1:0"'
  config_case quiet-maybe <<<'quiet = "maybe"'
  config_case verbose-2 <<<'verbose = 2'
  config_case insecure-words <<<'insecure = "yes please"'
  config_case exit-code-256 <<<'conflict-exit-code = 256'
  config_case exit-code-text <<<'conflict-exit-code = "x"'
  config_case lost-exit-negative <<<'lost-exit-code = -1'
  config_case signal-unknown <<<'signal = "NOSUCHSIG"'
  config_case kill-after-forever <<<'kill-after = "forever"'
  config_case timeout-zero <<<'timeout = "0s"'
  config_case connect-timeout-negative <<<'connect-timeout = "-1s"'
  config_case wait-replicas-negative <<<'wait-replicas = -1'
  config_case wait-replicas-text <<<'wait-replicas = "x"'
  config_case wait-timeout-bad <<<'wait-timeout = "soon"'
  config_case password-file-missing <<<"password-file = \"$T/no-such-password-file\""
  config_case cacert-missing <<<$'url = "rediss://127.0.0.1:1"\ncacert = "'"$T"'/no-such-ca.pem"'
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
  head -c 300000 /dev/zero | tr '\0' 'a' | config_case long-name
  {
    for i in $(seq 1 5000); do printf 'ttl = "%ss"\n' "$i"; done
  } | config_case many-duplicates
}

# The files a config case is about when it is not the config file itself.
OTHER_FILE_CASES=" password-file-missing cacert-missing "

@test "40+ malformed config files: exit 78, one error line, no crash or hang; the error names the file" {
  make_bad_configs
  local f n=0 err
  for f in "$T"/cfg/*; do
    n=$((n + 1))
    expect_error --config "$(basename "$f")" "78" -- run k --config "$f" -- true
    # The error names the file (there may be several: XDG, /etc, --config), unless it is about
    # another file that the config names.
    [[ $OTHER_FILE_CASES == *" $(basename "$f") "* ]] && continue
    err=$(<"$T/stderr")
    [[ $err == *"$f"* ]] || FAILURES+=("config $(basename "$f"): the error does not name the file: ${err:0:300}")
  done
  ((n >= 40)) || fail "only $n config files"
  report_failures
}

@test "the config files through RLOCK_CONFIG and the default path: exit 78" {
  make_bad_configs
  local f i=0
  mkdir -p "$XDG_CONFIG_HOME/rlock"
  for f in "$T"/cfg/*; do
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
