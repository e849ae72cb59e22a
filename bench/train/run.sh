#!/bin/bash
# kvad train against the PyTorch peer (../shared/peer-torch/train_gpt.py): the same model,
# optimiser, corpus, seed and thread count, run interleaved (kvad, torch, kvad, torch, ...) so both
# see the same machine. Prints chars/s of each run, the median of each side and their ratio.
#   usage: bench/train/run.sh [CORPUS] [a|b|c|b1000|c300 ...]      (default: KJV from corpus.sh; b c)
#   a, b, c: STEPS (40) steps, throughput = median over the steps after WARMUP (10);
#            val loss on 32 windows.   b1000 / c300: that many steps, loss compared at the end.
# Env: KVAD (./build/kvad), KVAD_ARGS (more kvad train flags, e.g. "--precision bf16"),
#      THREADS (2), REPEAT (3), STEPS, WARMUP, PEER (../shared/peer-torch),
#      QUIET_WAIT (600 s: wait at most this long for an idle machine before each run).
# Each run records the CPU seconds other processes used meanwhile ("other_s"); above 5% of the
# machine it is flagged CONTENDED, and its figure should not be trusted.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
PEER="${PEER:-$root/../shared/peer-torch}"
KVAD="${KVAD:-$root/build/kvad}"
data="${1:-${TMPDIR:-/tmp}/kjv.txt}"; shift || true
configs=("$@"); [ ${#configs[@]} -gt 0 ] || configs=(b c)
THREADS="${THREADS:-2}" REPEAT="${REPEAT:-3}" STEPS="${STEPS:-40}" WARMUP="${WARMUP:-10}" QUIET_WAIT="${QUIET_WAIT:-600}"
[ -x "$KVAD" ] || { echo "no kvad binary at $KVAD (build it, or set KVAD=)" >&2; exit 1; }
[ -f "$data" ] || "$PEER/corpus.sh" "$data" >/dev/null
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-SkylakeX}"  # see the peer's README: Debian's OpenBLAS picks slow kernels otherwise
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export KVAD_HOME="$tmp/home"
. "$here/quiet.sh"
# run_one LABEL CMD... : runs it, prints "chars/s final_loss val_bpc other_s note params"
run_one() {
  shift  # the label names the run for the reader of this script only
  local other note
  read -r other note <<<"$(measured_run "$tmp/out.json" "$tmp/log" "$@")"
  python3 - "$tmp/out.json" "$other" "$note" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%.1f %.4f %.4f %s %s %d" % (d["chars_per_s_median"], d["final_train_loss"], d["val_bpc"], sys.argv[2], sys.argv[3], d["params"]))
PY
}

printf '%-6s %-3s %10s %10s %7s %9s %9s %9s %9s %s\n' cfg run kvad_c/s torch_c/s ratio kvad_loss torch_loss kvad_bpc torch_bpc notes
for c in "${configs[@]}"; do
  steps=$STEPS warm=$WARMUP ev=(32)
  case "$c" in
    a) m=(2 64 4 64 16) ;;
    b) m=(4 128 4 128 16) ;;
    c) m=(6 384 6 256 8) ;;
    b1000) m=(4 128 4 128 16); steps=1000; ev=(0) ;;
    c300) m=(6 384 6 256 8); steps=300; ev=(0) ;;
    *) echo "unknown config $c" >&2; exit 2 ;;
  esac
  kv=() to=()
  for rep in $(seq "$REPEAT"); do
    k=$(run_one kvad "$KVAD" train --data "$data" --name bench --force --layers "${m[0]}" --dim "${m[1]}" --heads "${m[2]}" \
        --context "${m[3]}" --batch "${m[4]}" --steps "$steps" --timing-warmup "$warm" --threads "$THREADS" \
        --schedule constant --warmup 0 --lr 1e-3 --eval-every 0 --save-every 0 --sample-chars 0 \
        --final-eval-windows "${ev[0]}" --seed 1337 ${KVAD_ARGS:-})
    t=$(run_one torch /usr/bin/python3 "$PEER/train_gpt.py" --data "$data" --n-layer "${m[0]}" --n-embd "${m[1]}" \
        --n-head "${m[2]}" --block "${m[3]}" --batch "${m[4]}" --steps "$steps" --warmup "$warm" --threads "$THREADS" \
        --log-every 100000 --final-eval-windows "${ev[0]}" --seed 1337)
    read -r kc kl kb ko kn kp <<<"$k"; read -r tc tl tb to_ tn tp <<<"$t"
    kv+=("$kc"); to+=("$tc")
    printf '%-6s %-3s %10.0f %10.0f %7.2f %9.4f %9.4f %9.4f %9.4f kvad %s (other %ss), torch %s (other %ss); params %s / %s\n' \
      "$c" "$rep" "$kc" "$tc" "$(python3 -c "print($kc/$tc)")" "$kl" "$tl" "$kb" "$tb" "$kn" "$ko" "$tn" "$to_" "$kp" "$tp"
  done
  python3 - "$c" "${kv[*]}" "${to[*]}" <<'PY'
import statistics, sys
k = [float(x) for x in sys.argv[2].split()]; t = [float(x) for x in sys.argv[3].split()]
print("%-6s median: kvad %.0f chars/s, torch %.0f chars/s, ratio %.2f" % (sys.argv[1], statistics.median(k), statistics.median(t), statistics.median(k) / statistics.median(t)))
PY
done
echo "# $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); threads $THREADS; $(uptime | sed 's/.*load/load/')"
