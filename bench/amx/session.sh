#!/bin/bash
# The first session on a CPU with AMX (Intel Sapphire Rapids and later), in one command: the steps of
# docs/kernels.md "AMX tiles" (hardware tests, the first-use check, tiles against the same binary's
# vector kernels, kvad against llama.cpp's own AMX build, kvad_micro tuning figures, optionally the
# trainer against PyTorch), every output kept under OUT and a summary against issue 18's targets.
# No session has had such a CPU so far, so this was written on a Zen 5 and run there with --emulate
# (the software model of the tiles: the plumbing is checked, its figures mean nothing).
#
#   usage: bench/amx/session.sh [--quick] [--no-llama] [--train] [--emulate] [--out DIR]
#     --quick     one round of each comparison, fewer tokens (a first look)
#     --no-llama  skip llama.cpp (its first build takes ~10 minutes)
#     --train     also bench/train/run.sh config c, f32 and --precision bf16, against PyTorch (~15 min)
#     --emulate   on a CPU without AMX: KVAD_AMX_EMULATE=1 (for checking this script only; no llama.cpp)
#   env: KVAD_BUILD (./build), WORK (/tmp/kvad-bench: the synthesized models, shared with
#        bench/compare_llamacpp.py), OUT (/tmp/kvad-amx-<time>).
# Build first: cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVAD_TESTS=ON -DKVAD_UNIT_TESTS=ON && ninja -C build
# Needs an idle machine (docs/kernels.md): every comparison here is interleaved, but two busy
# processes on 2 cores make any figure meaningless.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
peer="$root/../shared/peer"
build="${KVAD_BUILD:-$root/build}"
work="${WORK:-/tmp/kvad-bench}"
quick=0 llama=1 train=0 emulate=0
out="${OUT:-/tmp/kvad-amx-$(date +%Y%m%d-%H%M)}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-llama) llama=0 ;;
    --train) train=1 ;;
    --emulate) emulate=1 ;;
    --out) out="$2"; shift ;;
    *) echo "unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
kvad="$build/kvad"
for b in kvad test_kernels test_train kvad_micro; do
  [ -x "$build/$b" ] || { echo "no $build/$b: build first (the command is at the top of $0)" >&2; exit 2; }
done
mkdir -p "$out" "$work"
log() { echo "== $*" | tee -a "$out/summary.txt"; }

# 1. The machine: model, flags, whether the tiles are there.
amx_flags="$(grep -o -w 'amx_[a-z0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
{ lscpu; echo; echo "amx flags: ${amx_flags:-none}"; uname -r; } > "$out/machine.txt"
log "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs; AMX: ${amx_flags:-none}"
if [ -z "$amx_flags" ] && [ "$emulate" = 0 ]; then
  echo "this CPU has no AMX (lscpu shows no amx_tile / amx_int8 / amx_bf16): nothing here can be measured on it." >&2
  echo "(--emulate runs the script over the software model of the tiles, to check the script itself)" >&2
  exit 2
fi
if [ "$emulate" = 1 ]; then
  export KVAD_AMX_EMULATE=1
  log "KVAD_AMX_EMULATE=1: the tiles' software model; figures below are NOT the hardware's"
  [ "$llama" = 1 ] && llama=0 && log "--emulate: llama.cpp skipped (kvad's side would run on the slow model)"
fi

# 2. The hardware tests must run, not skip, and pass.
tests_ok=1
run_tests() {  # BINARY FILTER
  local name; name="$(basename "$1")"
  if ! "$1" --gtest_filter="$2" > "$out/$name.txt" 2>&1; then tests_ok=0; fi
  local passed skipped
  passed="$(grep -c '^\[       OK \]' "$out/$name.txt" || true)"
  skipped="$(grep -c '^\[  SKIPPED \]' "$out/$name.txt" || true)"
  log "$name $2: $passed passed, $skipped skipped$(grep -q '^\[  FAILED  \]' "$out/$name.txt" && echo ', FAILURES (see '"$out/$name.txt"')')"
  if [ "$skipped" != 0 ] && [ "$emulate" = 0 ]; then tests_ok=0; grep -A1 '^\[  SKIPPED \]' "$out/$name.txt" | head -4 | tee -a "$out/summary.txt"; fi
}
run_tests "$build/test_kernels" 'AmxTiles*:KQuant.Amx*:Cpu.Amx*:CpuFirstRun.*'
run_tests "$build/test_train" 'TrainGemm.*Amx*'

# 3. The models: Qwen2.5-0.5B shapes (kvad's q8 / q4 / bf16 from one synthesized checkpoint) and
# a Q4_K_M GGUF by llama.cpp's own quantizer (qwen3-0.6b shapes: K-quants want widths of 256).
q05="$work/qwen2.5-0.5b"
[ -f "$q05/config.json" ] || "$kvad" synth --arch qwen2 --preset qwen2.5-0.5b --out "$q05" >> "$out/models.log" 2>&1
kqm="$work/qwen3-0.6b-q4_k_m.gguf"
if [ ! -f "$kqm" ]; then
  /usr/bin/python3 "$peer/synth.py" qwen3-0.6b "$work/qwen3-0.6b" >> "$out/models.log" 2>&1
  /usr/bin/python3 "$peer/to_gguf.py" "$work/qwen3-0.6b" "$work/qwen3-0.6b-f32.gguf" --type f32 >> "$out/models.log" 2>&1
  "$peer/quantize" "$work/qwen3-0.6b-f32.gguf" "$kqm" Q4_K_M --threads "$(nproc)" >> "$out/models.log" 2>&1
fi

# 4. The first-use check: a prompt past 16 tokens takes the tiles in every format, and a tile
# kernel that disagrees with AVX-512 says so on stderr (then it stays on AVX-512).
first_use_ok=1
for m in "$q05 q8" "$q05 q4" "$q05 bf16" "$kqm auto"; do
  set -- $m
  "$kvad" run -m "$1" -q "$2" --prompt-tokens "$(seq -s, 100 163)" -n 8 > /dev/null 2> "$out/first-use-$2.txt" || first_use_ok=0
  if grep -q 'warning: the AMX tiles' "$out/first-use-$2.txt"; then first_use_ok=0; fi
  log "kvad run $(basename "$1") -q $2: $(grep -c 'warning: the AMX tiles' "$out/first-use-$2.txt" || true) AMX warnings"
done

# 5. Tiles against the vector kernels of the same binary (KVAD_ISA=avx512 turns the tiles off),
# alternating A B B A so a drift of the machine falls on both.
rounds=2 gen=32 reps=2 prompts=128,512
[ "$quick" = 1 ] && rounds=1 gen=16 reps=1
[ "$emulate" = 1 ] && rounds=1 gen=4 reps=1 prompts=32  # the model of the tiles is slow: bf16 at 512 takes minutes
bench() {  # LABEL ISA MODEL QUANT
  local env=(); [ "$2" = vector ] && env=(KVAD_ISA=avx512)
  env "${env[@]}" "$kvad" bench -m "$3" -q "$4" -p "$prompts" -g "$gen" -r "$reps" --json 2>/dev/null |
    sed -n "s/^{/{\"label\": \"$1\", \"isa\": \"$2\", /p" >> "$out/tiles-vs-vector.jsonl"
}
: > "$out/tiles-vs-vector.jsonl"
for r in $(seq "$rounds"); do
  for m in "q8 $q05 q8" "q4 $q05 q4" "bf16 $q05 bf16" "Q4_K_M $kqm auto"; do
    set -- $m
    if [ $((r % 2)) = 1 ]; then order="amx vector"; else order="vector amx"; fi
    for isa in $order; do bench "$1" "$isa" "$2" "$3"; done
  done
done

# 6. kvad against llama.cpp's own build (its loader takes the sapphirerapids CPU variant, with
# AMX, on this CPU: the summary says which one it took).
if [ "$llama" = 1 ]; then
  /usr/bin/python3 "$root/bench/compare_llamacpp.py" --prompt-tokens "$prompts" --gen-tokens "$gen" --reps "$reps" \
    --rounds "$rounds" --threads "$(nproc)" --work "$work" --kvad "$kvad" --json-out "$out/llamacpp.json" > "$out/llamacpp.txt" 2>&1 ||
    log "compare_llamacpp.py failed: $out/llamacpp.txt"
  lb="$("$peer/build-llamacpp" | tail -1)"
  : > "$out/llamacpp-q4_k_m.txt"; : > "$out/kvad-q4_k_m.jsonl"
  for r in $(seq "$rounds"); do
    LD_LIBRARY_PATH="$lb" "$lb/llama-batched-bench" -m "$kqm" -t "$(nproc)" -c 2048 -b 2048 -ub 512 -npp 512 -ntg "$gen" -npl 1 \
      >> "$out/llamacpp-q4_k_m.txt" 2>> "$out/llamacpp-q4_k_m.log" || true
    "$kvad" bench -m "$kqm" -p 512 -g "$gen" -r "$reps" --json 2>/dev/null | grep '^{' >> "$out/kvad-q4_k_m.jsonl" || true
  done
  # ggml opens every CPU variant to score it, then the one it keeps a second time: the last one opened.
  variant="unknown (no strace)"
  if command -v strace > /dev/null; then
    LD_LIBRARY_PATH="$lb" strace -f -e trace=openat -o "$out/llama-strace.txt" "$lb/llama-batched-bench" -m "$kqm" -t "$(nproc)" \
      -c 512 -b 512 -ub 512 -npp 16 -ntg 2 -npl 1 > /dev/null 2>&1 || true
    variant="$(grep -v ENOENT "$out/llama-strace.txt" | grep -o 'libggml-cpu-[a-z0-9_]*' | tail -1)"
  fi
  log "llama.cpp CPU variant: $variant (sapphirerapids is its AMX build)"
fi

# 7. Tuning figures: isa 3 = AVX-512 with the tiles, 2 = the vector kernels, in one process.
"$build/kvad_micro" --benchmark_filter='BM_(k?qmatmul|matmul)/.*/128/.*/[23]/|BM_gemm_packed' \
  --benchmark_enable_random_interleaving=true --benchmark_repetitions="$([ "$quick" = 1 ] && echo 2 || echo 5)" \
  --benchmark_report_aggregates_only=true > "$out/micro.txt" 2>&1 || log "kvad_micro failed: $out/micro.txt"

# 7b. Decode's side of issue 18 here ("q4 decode reads ~14 GB/s where the machine streams 17-21"):
# the decode stacks' read rate beside plain streams, interleaved in one process, on two threads and
# on one; and whether the two CPUs are one core's two hyperthreads (then they share its L1 fill
# buffers, which the decode's NTA prefetch into L1 uses: docs/kernels.md "Decode: the prefetch hint").
echo "cpu0's thread siblings: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null || echo unknown)" |
  tee -a "$out/machine.txt" >> "$out/summary.txt"
for threads in 2 1; do
  KVAD_MICRO_THREADS=$threads "$build/kvad_micro" --benchmark_filter='qdecode_stack|stream_read' \
    --benchmark_enable_random_interleaving=true --benchmark_repetitions="$([ "$quick" = 1 ] && echo 3 || echo 6)" \
    --benchmark_min_time=0.3 --benchmark_report_aggregates_only=true > "$out/decode-stack-$threads.txt" 2>&1 ||
    log "kvad_micro decode stack failed: $out/decode-stack-$threads.txt"
done

# 8. The trainer's bf16 products against PyTorch (docs/training.md).
if [ "$train" = 1 ]; then
  "$root/bench/train/run.sh" /tmp/kjv.txt c > "$out/train-f32.txt" 2>&1 || log "train f32 failed: $out/train-f32.txt"
  KVAD_ARGS="--precision bf16" "$root/bench/train/run.sh" /tmp/kjv.txt c > "$out/train-bf16.txt" 2>&1 ||
    log "train bf16 failed: $out/train-bf16.txt"
fi

# 9. The summary against issue 18's targets.
/usr/bin/python3 - "$out" "$tests_ok" "$first_use_ok" "$emulate" <<'PY' | tee -a "$out/summary.txt"
import json, os, statistics, sys
out, tests_ok, first_ok, emulated = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4] == "1"
med = lambda v: statistics.median(v) if v else float("nan")
print(f"hardware tests ran and passed: {'NO (emulated: they were skipped)' if emulated else 'yes' if tests_ok else 'NO'}; "
      f"first-use checks quiet: {'yes' if first_ok else 'NO'}")
runs = [json.loads(l) for l in open(os.path.join(out, "tiles-vs-vector.jsonl"))]
print("\ntiles / vector kernels, same binary (medians over rounds):")
for label in dict.fromkeys(r["label"] for r in runs):
    for P in sorted({r["prompt_tokens"] for r in runs}):
        pick = lambda isa, key: [r[key]["median"] for r in runs if r["label"] == label and r["isa"] == isa
                                 and r["prompt_tokens"] == P and r.get(key)]
        amx, vec = med(pick("amx", "prefill_tok_s")), med(pick("vector", "prefill_tok_s"))
        da, dv = med(pick("amx", "decode_tok_s")), med(pick("vector", "decode_tok_s"))
        print(f"  {label:7s} pp{P:<4d} prefill {amx:8.1f} / {vec:8.1f} tok/s = {amx / vec:5.2f}x   decode {da:7.2f} / {dv:7.2f}")
share = [r.get("decode_bandwidth_pct") for r in runs if r["isa"] == "amx" and r["label"] in ("q8", "q4")]
print("decode share of the probed read bandwidth (q8, q4 runs): " + ", ".join(f"{s:.0f}%" for s in share if s) +
      " (target >= 90%)")
path = os.path.join(out, "llamacpp.json")
if os.path.exists(path):
    ratios = json.load(open(path))["ratios"]
    targets = {"kvad-q8/llama-Q8_0": (2.5, 1.2), "kvad-q4/llama-Q4_0": (2.5, 1.2), "kvad-bf16/llama-F16": (2.0, None)}
    print("\nkvad / llama.cpp (its CPU variant is named above; sapphirerapids is the AMX one):")
    for k, (pre_t, dec_t) in targets.items():
        if k in ratios:
            r = ratios[k]
            pre = r["prefill"].get("512", r["prefill"].get(512, float("nan")))
            print(f"  {k:22s} prefill 512 {pre:5.2f}x (target {pre_t}x)  decode {r['decode']:5.2f}x" +
                  (f" (target {dec_t}x)" if dec_t else ""))
kq = os.path.join(out, "kvad-q4_k_m.jsonl")
lq = os.path.join(out, "llamacpp-q4_k_m.txt")
if os.path.exists(kq) and os.path.exists(lq):
    k = [json.loads(l) for l in open(kq)]
    rows = [l.split("|") for l in open(lq) if l.startswith("|") and l.split("|")[1].strip() == "512"]
    if k and rows:
        kp, kd = med([r["prefill_tok_s"]["median"] for r in k]), med([r["decode_tok_s"]["median"] for r in k])
        lp, ld = med([float(r[6]) for r in rows]), med([float(r[8]) for r in rows])
        print(f"  Q4_K_M                 prefill 512 {kp / lp:5.2f}x ({kp:.0f} / {lp:.0f})  decode {kd / ld:5.2f}x ({kd:.1f} / {ld:.1f})")
import re
for threads in (2, 1):
    path = os.path.join(out, f"decode-stack-{threads}.txt")
    if not os.path.exists(path):
        continue
    rate = {}
    for line in open(path):
        m = re.match(r"BM_(\w+)/(\w+)/real_time_median.*bytes_per_second=([\d.]+)([GM])/s", line)
        if m:
            rate[f"{m.group(1)}/{m.group(2)}"] = float(m.group(3)) * (1 if m.group(4) == "G" else 1e-3)
    stream = max((v for k, v in rate.items() if k.startswith("stream_read")), default=float("nan"))
    name = {"kqdecode_stack/1": "Q4_K_M", "kqdecode_stack/0": "Q4_K_M in 4 KB pages"}
    stacks = ", ".join(f"{name.get(k, k.split('/')[1])} {v:.1f} ({100 * v / stream:.0f}%)"
                       for k, v in sorted(rate.items()) if "decode_stack" in k)
    print(f"decode stacks on {threads} thread(s), GB/s (of the best plain stream, {stream:.1f}): {stacks}")
print(f"\nall outputs: {out}")
PY
