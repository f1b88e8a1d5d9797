# Helpers of the waiting suites (queue.bats, semaphore.bats, shared.bats, progress.bats): the
# witnesses, the queue as rlock's status reports it, waiters started in a known order, and the
# time bounds of the queue. Load it after the shared helpers and the fault helpers:
#
#   load helpers/common
#   load faults/helpers/faults
#   load helpers/queue
#
# Call queue_setup (instead of common_setup) first in setup().

# The fault helpers look for their tools next to the suite; these suites are one level up.
FAULTS_HELPERS=$BATS_TEST_DIRNAME/faults/helpers

# The bounds of the queue (see the man page): a waiter's heartbeat (H), its lease in the queue
# (L), and the window in which a granted waiter must claim its grant. Behind others (position 2
# on), a waiter is woken by a push when the one ahead leaves: its heartbeat and its lease are
# longer (rlock(7), Waiting).
HEARTBEAT_MS=1000
LEASE_MS=3000
FAR_LEASE_MS=4500
CLAIM_MS=2000
# What a loaded 2-core machine (or a sanitizer build) may add to a bound; QUEUE_SLACK_MS
# overrides it.
SLACK_MS=${QUEUE_SLACK_MS:-2000}
# How soon "promptly" is: the next holder's first instruction after the previous one's last,
# when nothing has to expire (process start-up included). QUEUE_PROMPT_MS overrides it.
PROMPT_MS=${QUEUE_PROMPT_MS:-1500}

# queue_setup: faults_setup (CS and WLOG, see faults.bash) plus
#   HOLD  the witness of overlapping holds (helpers/hold); its log is $HLOG
queue_setup() {
  faults_setup
  export HOLD=$BATS_TEST_DIRNAME/helpers/hold
  export HLOG=$T/holds.log
  : >"$HLOG"
  require_jq
}

# ---------------------------------------------------------------------------------------------
# The queue as status reports it

# status_json KEY: `rlock status KEY --json` (exit 1 for a free lock is not an error here).
status_json() {
  rlock status "$1" --json 2>/dev/null || true
}

# queue_length KEY: the queue_length of status --json (empty when status does not say).
queue_length() {
  status_json "$1" | jq -r 'if type == "object" then (.queue_length // empty) else empty end' 2>/dev/null
}

# queue_is KEY N: whether status --json says N waiters.
queue_is() {
  [[ $(queue_length "$1") == "$2" ]]
}

# table_cell HEADER ROW COLUMN: the cell of ROW under COLUMN of a table whose columns are aligned
# on HEADER (a column's text starts where its name starts).
table_cell() {
  awk -v h="$1" -v r="$2" -v c="$3" 'BEGIN {
    i = index(h, c); if (i == 0) exit 1
    s = substr(r, i); sub(/^ +/, "", s); sub(/ .*/, "", s); print s }'
}

# list_shows_waiting KEY N: `rlock list` shows KEY once with N waiting, in its table (the
# WAITING column) and in --json (queue_length).
list_shows_waiting() {
  local key=$1 n=$2 header row
  run --separate-stderr rlock list
  assert_success
  header=$(grep -m1 -E '^KEY ' <<<"$output") || fail "no table header: $output"
  row=$(grep -m1 -E "^$key " <<<"$output") || fail "list does not show $key: $output"
  assert_equal "$(table_cell "$header" "$row" WAITING)" "$n"
  run --separate-stderr rlock list --json
  assert_success
  assert_equal "$(jq -r --arg k "$key" '[.[] | select(.key == $k)] | length' <<<"$output")" 1
  assert_equal "$(jq -r --arg k "$key" '.[] | select(.key == $k) | .queue_length' <<<"$output")" "$n"
}

# zcard_q KEY: the size of the queue ZSET, read with redis-cli (an independent check).
zcard_q() {
  rcli zcard "$(lock_key "$1"):q" 2>/dev/null
}

# enqueue NAME KEY N CMD...: starts CMD in the background as NAME (see bg) and waits (15s at
# most) until the queue of KEY has N waiters; fails when it does not, or when NAME ends first.
enqueue() {
  local name=$1 key=$2 n=$3
  shift 3
  bg "$name" "$@"
  wait_until -t 15 _queued_or_done "$key" "$n" "$name" || true
  queue_is "$key" "$n" && return 0
  if bg_done "$name"; then
    fail "$name exited $(cat "$T/$name.rc") instead of waiting as number $n in the queue: $(bg_err "$name")"
  fi
  fail "the queue of $key did not reach $n waiters after $name started; status --json: $(status_json "$key")"
}
_queued_or_done() { queue_is "$1" "$2" || bg_done "$3"; }

# ---------------------------------------------------------------------------------------------
# The exclusive witness (helpers/cs): order and times

# cs_order [LOG]: the labels of the critical sections in the order they started, one line.
cs_order() {
  awk '$1 == "start" { printf "%s%s", sep, $4; sep = " " } END { print "" }' "${1:-$WLOG}"
}

# cs_start_ns LABEL [LOG] / cs_end_ns LABEL [LOG]: when the (first) section LABEL started, and
# when it ended (its end or stop record; empty when it has none).
cs_start_ns() {
  awk -v l="$1" '$1 == "start" && $4 == l { print $2; exit }' "${2:-$WLOG}"
}
cs_end_ns() {
  local pid
  pid=$(cs_pid "$1" "${2:-$WLOG}")
  [[ -n $pid ]] || return 0
  awk -v p="$pid" '($1 == "end" || $1 == "stop") && $3 == p { print $2; exit }' "${2:-$WLOG}"
}

# ms_between NS1 NS2: milliseconds from NS1 to NS2.
ms_between() {
  echo $((($2 - $1) / 1000000))
}

# assert_each_once LABEL...: every LABEL started exactly one critical section in $WLOG.
assert_each_once() {
  local l n
  for l in "$@"; do
    n=$(cs_count "$l")
    [[ $n == 1 ]] || fail "$l ran $n times; order: $(cs_order)"
  done
}

# ---------------------------------------------------------------------------------------------
# The witness of overlapping holds (helpers/hold)

# assert_holds_ok [LIMIT]: `hold check $HLOG LIMIT` finds nothing.
assert_holds_ok() {
  local out
  if ! out=$("$HOLD" check "$HLOG" "${1:-1}"); then
    fail "the holds broke their rules:
$out
log:
$(cat "$HLOG")"
  fi
}

# hold_stat NAME: one number of `hold stats $HLOG` (sections, max_all, max_exclusive,
# max_shared, max_slots).
hold_stat() {
  "$HOLD" stats "$HLOG" | awk -v n="$1" '{ for (i = 1; i < NF; i++) if ($i == n) print $(i + 1) }'
}

# hold_start_ns LABEL / hold_end_ns LABEL: when the hold LABEL started and ended in $HLOG.
hold_start_ns() {
  awk -v l="$1" '$1 == "start" && $4 == l { print $2; exit }' "$HLOG"
}
hold_end_ns() {
  local pid
  pid=$(awk -v l="$1" '$1 == "start" && $4 == l { print $3; exit }' "$HLOG")
  [[ -n $pid ]] || return 0
  awk -v p="$pid" '($1 == "end" || $1 == "stop") && $3 == p { print $2; exit }' "$HLOG"
}

# hold_count LABEL: how many holds LABEL started.
hold_count() {
  awk -v l="$1" '$1 == "start" && $4 == l { n++ } END { print n + 0 }' "$HLOG"
}

# hold_started LABEL: whether the hold LABEL has started.
hold_started() {
  [[ $(hold_count "$1") -gt 0 ]]
}

# ---------------------------------------------------------------------------------------------
# Background commands

# all_done NAME...: whether every background command NAME has ended.
all_done() {
  local n
  for n in "$@"; do
    bg_done "$n" || return 1
  done
}

# wait_all SECONDS NAME...: waits until every NAME has ended and checks that each exited 0.
wait_all() {
  local timeout=$1
  shift
  wait_until -t "$timeout" all_done "$@" || true
  local n
  for n in "$@"; do
    bg_done "$n" || fail "$n still runs after ${timeout}s; stderr: $(bg_err "$n"); witness: $(cs_order)"
    [[ $(cat "$T/$n.rc") == 0 ]] || fail "$n exited $(cat "$T/$n.rc"): $(bg_err "$n")"
  done
}
