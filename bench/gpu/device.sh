#!/usr/bin/env bash
# The GPU performance run of docs/gpu.md, in one call on a lent GPU machine (the device tool), from
# the repository root with .gpu/bundle.tar.xz carried (bench/gpu/prepare.sh makes it here):
#   run(carry=[".gpu/bundle.tar.xz"], timeout_s=540, command="bash bench/gpu/device.sh")
# 1. Correct first: the GPU backend's op and model tests on this GPU (both kernel families).
# 2. Qwen2.5-0.5B shapes (kvad synth, bf16) and its GGUFs (bf16, Q8_0, Q4_0; the peer's converter).
# 3. Two rounds, interleaved: kvad bench at bf16, q8, q4 (prefill at 128, 512, 1024 and 4096
#    tokens: the quantised-prefill crossover; decode 128 tokens with its share of the device's read
#    bandwidth) beside llama.cpp's Vulkan build (llama-batched-bench, -ngl 99) on the matching GGUF.
# 4. After the first round, one more bench per format with KVAD_VULKAN_PROFILE=1: the GPU time per
#    shader and grid.
# 5. The KV cache's type (f32, bf16, q8) at the longest prompt, q4 weights.
# Logs and JSON go to $OUT (they come back); a short table is printed last.
# LOCAL=1 runs the same on this machine's lavapipe with a tiny preset, to check the script.
set -uo pipefail
ROOT=$(pwd)
OUTD=${OUT:-/tmp/gpu-out}
mkdir -p "$OUTD"
W=/tmp/kvad-gpu
mkdir -p "$W"
tar -C "$W" -xJf "$ROOT/.gpu/bundle.tar.xz" || { echo "no .gpu/bundle.tar.xz: run bench/gpu/prepare.sh and carry .gpu/bundle.tar.xz"; exit 1; }
if [ "${LOCAL:-0}" = 1 ]; then
  DEV=gpu:0 PRESET=${PRESET:-tiny} PS=16,64 G=8 R=1 ROUNDS=1 PROF_P=64
  PY=${PY:-/usr/bin/python3}  # Debian's, with python3-numpy (the peer's setup installs it)
  export KVAD_VULKAN_ALLOW_CPU=1
  export GGML_VK_VISIBLE_DEVICES=0  # llama.cpp skips a CPU driver unless it is named
else
  # Debian's Vulkan loader beside NVIDIA's driver (the device tool's README).
  if ! ldconfig -p | grep -q libvulkan.so.1; then
    for f in "$W"/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -f "$icd" ] && export VK_DRIVER_FILES=$icd
  PY=${PY:-python3}  # the device image's python3 has numpy (to_gguf.py needs it)
  DEV=gpu PRESET=qwen2.5-0.5b PS=128,512,1024,4096 G=128 R=3 ROUNDS=2 PROF_P=512
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee "$OUTD/nvidia-smi.txt"
fi
# The carried Debian libraries for kvad and llama.cpp only (python3 keeps the machine's own).
K() { LD_LIBRARY_PATH=$W/lib "$W/bin/kvad" "$@"; }
K devices | tee "$OUTD/devices.txt"

echo "== 1. the backend's tests on this device"
# The runtime's test binary holds them as the suites GpuOps, GpuLinear (op tests) and GpuModels.
for t in 'GpuOps.*:*GpuLinear*' 'GpuModels.*'; do
  log=$OUTD/test-${t%%.*}.log; log=${log//\*/}
  KVAD_SOURCE_DIR=$W/src LD_LIBRARY_PATH=$W/lib KVAD_REQUIRE_VULKAN=1 KVAD_TEST_DEVICE=$DEV timeout 150 "$W/bin/test_runtime" --gtest_filter="$t" --gtest_brief=1 >"$log" 2>&1
  echo "$t: exit $? ($(grep -cE '^\[ +OK|^\[  PASSED' "$log") ok lines; $(grep -c 'FAILED' "$log") FAILED lines)"
done

echo "== 2. the model"
M=$W/model
[ -f "$M/config.json" ] || K synth --arch qwen2 --preset "$PRESET" --out "$M" >/dev/null || exit 1
for t in bf16 q8_0 q4_0; do
  [ -f "$W/m-$t.gguf" ] || "$PY" "$W/to_gguf.py" "$M" "$W/m-$t.gguf" --type "$t" >"$OUTD/gguf-$t.log" 2>&1 &
done
wait
ls -la "$W"/m-*.gguf

echo "== 3. kvad and llama.cpp (Vulkan), $ROUNDS round(s), interleaved"
lastp=${PS##*,}
# Each step has a time limit and the rounds a budget (BUDGET seconds since the start): a hung
# command or a slow device still leaves the call's files and table to come back.
BUDGET=${BUDGET:-400}
profile() {
  echo "== 4. where the GPU time goes (KVAD_VULKAN_PROFILE: per shader and grid, prefill $PROF_P then decode $G)"
  for q in bf16 q8 q4; do
    KVAD_VULKAN_PROFILE=1 timeout 120 env LD_LIBRARY_PATH=$W/lib "$W/bin/kvad" bench -m "$M" -q "$q" --device "$DEV" \
      -p "$PROF_P" -g "$G" -r 1 >/dev/null 2>"$OUTD/profile-$q.txt" || echo "profiled bench $q failed: $(tail -2 "$OUTD/profile-$q.txt")"
    # The last profile is the model's device (the first, if two, is the bandwidth probe's).
    awk '/^Vulkan profile/ {b = ""} {b = b $0 "\n"} END {printf "%s", b}' "$OUTD/profile-$q.txt" | head -14
  done
}
for round in $(seq "$ROUNDS"); do
  for f in bf16:bf16 q8:q8_0 q4:q4_0; do
    q=${f%%:*} g=${f##*:}
    if [ "$SECONDS" -gt "$BUDGET" ]; then echo "round $round $q skipped: ${SECONDS}s of the ${BUDGET}s budget spent"; continue; fi
    timeout 150 env LD_LIBRARY_PATH=$W/lib "$W/bin/kvad" bench -m "$M" -q "$q" --device "$DEV" -p "$PS" -g "$G" -r "$R" --json \
      >"$OUTD/kvad-$q-$round.jsonl" 2>"$OUTD/kvad-$q-$round.err" || echo "kvad bench $q failed: $(tail -2 "$OUTD/kvad-$q-$round.err")"
    timeout 150 env LD_LIBRARY_PATH=$W/lib:$W/llama "$W/llama/llama-batched-bench" -m "$W/m-$g.gguf" -ngl 99 \
      -c $((lastp + G + 16)) -b 2048 -ub 512 -npp "$PS" -ntg "$G" -npl 1 >"$OUTD/llama-$g-$round.txt" 2>&1 ||
      echo "llama $g failed: $(tail -3 "$OUTD/llama-$g-$round.txt")"
    grep -q "no usable GPU" "$OUTD/llama-$g-$round.txt" && echo "llama $g ran on the CPU (its Vulkan backend found no device): not a GPU figure"
    echo "round $round $q: done at ${SECONDS}s"
  done
  [ "$round" = 1 ] && profile
done

echo "== 5. the KV cache's type on the device: f32, bf16 (the default) and q8, q4 weights, $lastp positions"
for kv in f32 bf16 q8; do
  if [ "$SECONDS" -gt $((BUDGET + 60)) ]; then echo "kv $kv skipped: ${SECONDS}s spent"; continue; fi
  timeout 100 env LD_LIBRARY_PATH=$W/lib "$W/bin/kvad" bench -m "$M" -q q4 --kv-type "$kv" --device "$DEV" -p "$lastp" \
    -g "$G" -r "$R" --json >"$OUTD/kv-$kv.jsonl" 2>"$OUTD/kv-$kv.err" || echo "kv $kv failed: $(tail -2 "$OUTD/kv-$kv.err")"
  "$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        j = json.loads(line)
        p, pre, dec = j["prompt_tokens"], j["prefill_tok_s"]["median"], (j.get("decode_tok_s") or {}).get("median", 0)
        print("kv %-5s prompt %d: prefill %.1f tok/s, decode %.1f tok/s" % (sys.argv[2], p, pre, dec))' \
    "$OUTD/kv-$kv.jsonl" "$kv"
done

echo "== table (tok/s; kvad's share of the device's read bandwidth in brackets)"
python3 - "$OUTD" "$ROUNDS" <<'EOF'
import json, re, sys, os
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'format':6} {'round':5} {'prompt':>6} {'kvad prefill':>12} {'llama prefill':>13} {'kvad decode':>18} {'llama decode':>12}")
for r in range(1, rounds + 1):
    for q, g in (("bf16", "bf16"), ("q8", "q8_0"), ("q4", "q4_0")):
        kv = {}
        p = f"{out}/kvad-{q}-{r}.jsonl"
        if os.path.exists(p):
            for line in open(p):
                if line.startswith("{"):
                    j = json.loads(line)
                    d = j.get("decode_tok_s") or {}
                    kv[j["prompt_tokens"]] = (j["prefill_tok_s"]["median"], d.get("median"), j.get("decode_bandwidth_pct"))
        ll = {}
        p = f"{out}/llama-{g}-{r}.txt"
        if os.path.exists(p):
            for line in open(p):
                c = [x.strip() for x in line.strip().strip("|").split("|")]
                if len(c) >= 8 and c[0].isdigit():
                    ll[int(c[0])] = (float(c[5]), float(c[7]))
        for P in sorted(set(kv) | set(ll)):
            k, l = kv.get(P, (None, None, None)), ll.get(P, (None, None))
            dec = f"{k[1]:.1f} ({k[2]:.0f}%)" if k[1] and k[2] else (f"{k[1]:.1f}" if k[1] else "-")
            fmt = lambda v: f"{v:.1f}" if v else "-"
            print(f"{q:6} {r:5} {P:6} {fmt(k[0]):>12} {fmt(l[0]):>13} {dec:>18} {fmt(l[1]):>12}")
EOF
