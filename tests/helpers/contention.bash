# Contention helpers: loops of `rlock run` on one key around a critical section that witnesses
# overlaps itself. Load after helpers/common.
#
#   write_section              writes $T/section.sh and $T/loop.sh, and zeroes $T/count
#   bg loopN sh "$T/loop.sh" "$T" N RUNS [RLOCK OPTIONS...]
#   wait_until all_loops_done LOOPS

# The critical section: a read-increment-write that loses updates when two run at once, a
# marker directory that only one section may have created at a time, and the fence it ran with.
write_section() {
  cat >"$T/section.sh" <<'SECTION'
d=$1
mkdir "$d/inside" 2>/dev/null || echo "overlap at fence $RLOCK_FENCE" >>"$d/overlaps"
n=$(cat "$d/count")
echo "$RLOCK_FENCE" >>"$d/fences"
echo $((n + 1)) >"$d/count"
rmdir "$d/inside"
SECTION
  cat >"$T/loop.sh" <<'LOOP'
d=$1 w=$2 n=$3 i=0
shift 3
while [ "$i" -lt "$n" ]; do
  rlock run counter -w 100 "$@" -- sh "$d/section.sh" "$d" 2>>"$d/stderr.$w" ||
    echo "loop $w, run $i: exit $?" >>"$d/errors"
  i=$((i + 1))
done
touch "$d/done.$w"
LOOP
  echo 0 >"$T/count"
  : >"$T/fences"
}

all_loops_done() {
  local w
  for w in $(seq 1 "$1"); do
    [[ -e $T/done.$w ]] || return 1
  done
}

