#!/usr/bin/env bash
# kvad serve against llama.cpp's llama-server (continuous batching over -np N slots) on the same
# weights, driven by the same load generator (kvad bench serve), interleaved per concurrency level
# so a noisy machine hits both alike; llama-batched-bench gives llama.cpp's engine-only figure.
#   bench/serve_compare.sh MODEL_DIR MODEL.gguf [CONCURRENCY...]   (default 1 4 8 16)
# MODEL_DIR is the Hugging Face folder, MODEL.gguf its Q8_0 GGUF (kvad serves the folder at q8;
# the GGUF runs on llama-server). Needs ../shared/peer/build-llamacpp. Prints one table per server
# and writes JSON to $OUT (default bench/serve-compare-<date>.json).
set -euo pipefail
DIR=$1
GGUF=$2
shift 2
LEVELS=("${@:-1 4 8 16}")
[ $# -eq 0 ] && LEVELS=(1 4 8 16)
HERE=$(cd "$(dirname "$0")/.." && pwd)
KVAD=${KVAD:-$HERE/build/kvad}
PEER=${PEER:-$HERE/../shared/peer}
B=$("$PEER/build-llamacpp")
N=${N:-}             # requests per level (default: 2 x the concurrency, at least 8)
IN=${IN:-128}
OUTLEN=${OUTLEN:-128}
CTX=${CTX:-4096}
OUT=${OUT:-$HERE/bench/serve-compare-$(date +%Y%m%d-%H%M).json}
PK=18091
PL=18092
cleanup() { kill "${KPID:-}" "${LPID:-}" 2>/dev/null || true; }
trap cleanup EXIT
wait_up() { for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.5; done; echo "server on $1 did not start"; exit 1; }
echo "machine: $(lscpu | grep 'Model name' | sed 's/.*: *//'), $(nproc) cores; $(date -u)"
echo "[" >"$OUT"
first=1
for c in "${LEVELS[@]}"; do
  for who in kvad llama; do
    if [ $who = kvad ]; then
      "$KVAD" serve --model "$DIR" --quant q8 --ctx "$CTX" --parallel "$c" --port $PK -t 2 --quiet & KPID=$!
      wait_up $PK; port=$PK
    else
      LD_LIBRARY_PATH=$B "$B/llama-server" -m "$GGUF" -t 2 -c $((CTX * c)) -np "$c" --port $PL >/dev/null 2>&1 & LPID=$!
      wait_up $PL; port=$PL
    fi
    echo "== $who, concurrency $c"
    n=${N:-$(( 2 * c > 8 ? 2 * c : 8 ))}
    "$KVAD" bench serve --url "http://127.0.0.1:$port" --concurrency "$c" --num-prompts "$n" --input-len "$IN" --output-len "$OUTLEN" --json \
      | sed "s/^{/{\"server\":\"$who\",/" | tee -a "$OUT.lines"
    if [ $who = kvad ]; then kill $KPID; wait $KPID 2>/dev/null || true; else kill $LPID; wait $LPID 2>/dev/null || true; fi
  done
done
python3 - "$OUT.lines" "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump(rows, open(sys.argv[2], 'w'), indent=1)
print(f"{'conc':>4} {'server':>6} {'out tok/s':>10} {'TTFT med':>9} {'ITL med':>8} {'ITL p99':>8}")
by = {}
for r in rows:
    print(f"{r['concurrency']:>4} {r['server']:>6} {r['output_throughput']:>10.1f} {r['median_ttft_ms']:>8.0f}ms {r['median_itl_ms']:>6.1f}ms {r['p99_itl_ms']:>6.1f}ms")
    by.setdefault(r['concurrency'], {})[r['server']] = r['output_throughput']
for c, d in sorted(by.items()):
    if 'kvad' in d and 'llama' in d: print(f"concurrency {c}: kvad / llama-server output throughput = {d['kvad'] / d['llama']:.2f}x")
PY
rm -f "$OUT.lines"
echo "llama-batched-bench (engine only):"
LD_LIBRARY_PATH=$B "$B/llama-batched-bench" -m "$GGUF" -t 2 -c $((CTX * 16)) -b 2048 -ub 512 -npp "$IN" -ntg "$OUTLEN" \
  -npl "$(IFS=,; echo "${LEVELS[*]}")" 2>/dev/null | grep -E '^\|' || true
