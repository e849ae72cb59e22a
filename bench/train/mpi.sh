#!/bin/bash
# Data-parallel kvad train on this machine (docs/scale-out.md): the same global batch trained by
# one process on 1 thread, one process on all NP threads, and `mpirun -np NP` ranks of 1 thread
# each, interleaved. Prints each run's median step time, chars/s and (ranks) the median time of a
# step's allreduce (gradients + loss), then the medians per variant.
#   usage: bench/train/mpi.sh [CORPUS] [b|kjv|lora ...]      (default: KJV from corpus.sh; b kjv lora)
#   b     kvad train's defaults: GPT-2 4 x 128, context 128, batch 16 (819,072 parameters on the KJV)
#   kjv   the shipped default model's shape: 4 x 256, 8 heads, context 256, batch 16 (3,243,776)
#   lora  a rank-16 adapter on models/kvad-kjv, context 256, batch 16 (262,144 trainable)
# Env: KVAD (./build/kvad), NP (2), REPEAT (3), STEPS (30), WARMUP (5), MPIRUN_ARGS (--mca btl
#      self,vader), QUIET_WAIT (600 s). A run during which other processes used more than 5% of the
#      machine is flagged CONTENDED.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
KVAD="${KVAD:-$root/build/kvad}"
data="${1:-${TMPDIR:-/tmp}/kjv.txt}"; shift || true
configs=("$@"); [ ${#configs[@]} -gt 0 ] || configs=(b kjv lora)
NP="${NP:-2}" REPEAT="${REPEAT:-3}" STEPS="${STEPS:-30}" WARMUP="${WARMUP:-5}"
read -r -a mpirun_args <<<"${MPIRUN_ARGS:---mca btl self,vader}"
[ -x "$KVAD" ] || { echo "no kvad binary at $KVAD (build it, or set KVAD=)" >&2; exit 1; }
[ -f "$data" ] || "$root/../shared/peer-torch/corpus.sh" "$data" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export KVAD_HOME="$tmp/home"
. "$here/quiet.sh"

# run_one CMD... : prints "step_ms chars/s allreduce_ms other_s note"
run_one() {
  local other note
  read -r other note <<<"$(measured_run "$tmp/out.json" "$tmp/log" "$@")"
  python3 - "$tmp/out.json" "$other" "$note" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%.1f %.0f %.2f %s %s" % (d["step_ms_median"], d["chars_per_s_median"], d.get("allreduce_ms_median", 0), sys.argv[2], sys.argv[3]))
PY
}

printf '%-5s %-4s %-12s %9s %9s %13s %s\n' cfg run variant step_ms chars/s allreduce_ms notes
for c in "${configs[@]}"; do
  common=(--steps "$STEPS" --timing-warmup "$WARMUP" --eval-every 0 --save-every 0 --final-eval-windows 8
          --sample-chars 0 --batch 16 --force --name bench-mpi --data "$data")
  case "$c" in
    b) train=(train "${common[@]}") ;;
    kjv) train=(train "${common[@]}" --layers 4 --dim 256 --heads 8 --context 256) ;;
    lora) train=(train "${common[@]}" --lora --base "$root/models/kvad-kjv" --context 256 --eval-windows 8) ;;
    *) echo "unknown config $c" >&2; exit 2 ;;
  esac
  declare -A all=()
  for rep in $(seq "$REPEAT"); do
    for v in "1x1" "1x$NP" "${NP}x1"; do
      case "$v" in
        1x1) cmd=("$KVAD" "${train[@]}" --threads 1) ;;
        "1x$NP") cmd=("$KVAD" "${train[@]}" --threads "$NP") ;;
        *) cmd=(mpirun -np "$NP" "${mpirun_args[@]}" "$KVAD" "${train[@]}") ;;
      esac
      read -r ms cps ar other note <<<"$(run_one "${cmd[@]}")"
      all[$v]+="$ms "
      printf '%-5s %-4s %-12s %9s %9s %13s %s (other %ss)\n' "$c" "$rep" "$v" "$ms" "$cps" "$ar" "$note" "$other"
    done
  done
  for v in "1x1" "1x$NP" "${NP}x1"; do
    python3 -c "import statistics,sys; print('%-5s median %-12s %9.1f ms a step' % (sys.argv[1], sys.argv[2], statistics.median(map(float, sys.argv[3].split()))))" \
      "$c" "$v" "${all[$v]}"
  done
  unset all
done
echo "# $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); variants: processes x threads; $(uptime | sed 's/.*load/load/')"
