# Sourced by bench/train/*.sh: waiting for an idle machine, and how busy it was meanwhile.
#   busy          non-idle jiffies of all CPUs so far (/proc/stat)
#   wait_quiet    returns once < 10% of one CPU is busy over 3 s, or after QUIET_WAIT seconds
#   measured_run JSON LOG CMD...
#                 waits for quiet, runs CMD --json-out JSON >LOG 2>&1 (the script ends, showing LOG,
#                 if it fails) and prints "OTHER_S NOTE": the CPU seconds other processes used
#                 meanwhile, and CONTENDED when that was above 5% of the machine, else ok
hz="$(getconf CLK_TCK)"; ncpu="$(nproc)"
QUIET_WAIT="${QUIET_WAIT:-600}"

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
wait_quiet() {
  local t0=$SECONDS b0 b1
  while :; do
    b0=$(busy); sleep 3; b1=$(busy)
    [ $(( (b1 - b0) * 100 / (3 * hz) )) -lt 10 ] && return 0
    [ $((SECONDS - t0)) -ge "$QUIET_WAIT" ] && { echo "# machine not idle after ${QUIET_WAIT}s; running anyway" >&2; return 0; }
    sleep 5
  done
}
measured_run() {
  local json=$1 log=$2 b0 b1 w0 w1
  shift 2
  rm -f "$json"
  wait_quiet
  b0=$(busy); w0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$log.time" "$@" --json-out "$json" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  b1=$(busy); w1=$(date +%s.%N)
  python3 - "$log.time" "$b0" "$b1" "$w0" "$w1" "$hz" "$ncpu" <<'PY'
import sys
u, s = map(float, open(sys.argv[1]).read().split()[-2:])
b0, b1, w0, w1, hz, n = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
other = max(0.0, (b1 - b0) / hz - u - s)
print("%.1f %s" % (other, "CONTENDED" if other > 0.05 * n * (w1 - w0) else "ok"))
PY
}
