#!/usr/bin/env bash
# Builds every libFuzzer target (clang, -DKVAD_FUZZ=ON: ASan + UBSan, in build-fuzz/) and runs
# each for SECONDS (default 60) on its corpus (build-fuzz/corpus/<name>, seeded from fuzz/corpus/<name>) with its
# dictionary, niced. Prints per target: executions, CPU seconds (user + system: a niced run on a
# busy machine gets less than its wall time), coverage (edges), corpus size, crashes.
#   fuzz/run.sh [SECONDS] [TARGET...]        (BUILD=dir JOBS=n to change the build)
# CPU=1 makes SECONDS CPU seconds: the run is interrupted once the fuzzer has used that much, so a
# niced run beside other work still gets its whole CPU budget (the issue asks for CPU-hours).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
SECONDS_EACH=${1:-60}
shift || true
BUILD=${BUILD:-$ROOT/build-fuzz}
# UBSan stops the run at its first report, so that libFuzzer keeps the input (by default it prints
# and goes on: fuzz_http's float-cast overflow of 2026-12-04 left a report and no input).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
JOBS=${JOBS:-2}
CC=${CC:-clang} CXX=${CXX:-clang++}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$HERE"/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=$CC CXX=$CXX nice -n 19 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DKVAD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
fi
nice -n 19 cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" || exit 1

dict_of() {
  case $1 in
    fuzz_http) echo "$HERE/dict/http.dict" ;;
    fuzz_chat_template) echo "$HERE/dict/jinja.dict" ;;
    fuzz_grammar) echo "$HERE/dict/gbnf.dict" ;;
    fuzz_gguf | fuzz_nq | fuzz_safetensors | fuzz_tokenize | fuzz_image_single_file) echo "" ;;
    *) echo "$HERE/dict/json.dict" ;;
  esac
}
max_len_of() {
  case $1 in
    fuzz_gguf | fuzz_nq | fuzz_safetensors | fuzz_image_single_file) echo 65536 ;;
    fuzz_tokenize | fuzz_http) echo 16384 ;;
    *) echo 262144 ;;  # JSON and templates: long enough for deep nesting and big values
  esac
}

# Interrupts fuzzer PID (SIGINT: libFuzzer prints its final stats and exits) once it has used
# WANT seconds of CPU, user + system, all its threads (the in-process server's too).
stop_at_cpu() {
  local pid=$1 want=$2 tck used
  tck=$(getconf CLK_TCK)
  while kill -0 "$pid" 2>/dev/null; do
    used=$(awk -v t="$tck" '{print int(($14 + $15) / t)}' "/proc/$pid/stat" 2>/dev/null) || return
    if [ "${used:-0}" -ge "$want" ]; then
      kill -INT "$pid"
      return
    fi
    sleep 5
  done
}

wall_limit=$SECONDS_EACH
[ "${CPU:-0}" = 1 ] && wall_limit=$((SECONDS_EACH * 20))  # a backstop only
printf '%-22s %10s %8s %8s %8s %8s\n' target execs cpu-s edges corpus crashes
status=0
for t in "${targets[@]}"; do
  # New inputs go to the build folder's corpus; the committed seeds (fuzz/corpus/<name>) are read.
  corpus=$BUILD/corpus/${t#fuzz_}
  seeds=$HERE/corpus/${t#fuzz_}
  mkdir -p "$corpus" "$BUILD/artifacts/$t"
  [ -d "$seeds" ] || seeds=
  dict=$(dict_of "$t")
  log=$BUILD/$t.log
  TIMEFORMAT='%U %S'
  { time {
    nice -n 19 "$BUILD/$t" "$corpus" $seeds -max_total_time="$wall_limit" -max_len="$(max_len_of "$t")" -timeout=20 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t/" ${dict:+-dict="$dict"} >"$log" 2>&1 &
    pid=$!
    [ "${CPU:-0}" = 1 ] && stop_at_cpu "$pid" "$SECONDS_EACH" &
    wait "$pid"
  } ; } 2>"$BUILD/$t.time"
  rc=$?
  grep -q 'libFuzzer: run interrupted' "$log" && [ "${CPU:-0}" = 1 ] && rc=0  # our own SIGINT at the CPU budget
  cpu=$(awk '{printf "%d", $1 + $2}' "$BUILD/$t.time")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  edges=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
  crashes=$(ls "$BUILD/artifacts/$t" | wc -l)
  printf '%-22s %10s %8s %8s %8s %8s\n' "$t" "${execs:-?}" "$cpu" "${edges:-?}" "$(ls "$corpus" | wc -l)" "$crashes"
  if [ $rc -ne 0 ] || [ "$crashes" -ne 0 ]; then
    status=1
    grep -m1 -E 'ERROR|SUMMARY|deadly signal|Timeout' "$log" | sed 's/^/    /'
  fi
done
exit $status
