# Sourced by bench/train/*.sh: waiting for an idle machine, and how busy it was meanwhile.
#   busy        non-idle jiffies of all CPUs so far (/proc/stat)
#   wait_quiet  returns once < 10% of one CPU is busy over 3 s, or after QUIET_WAIT seconds
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
