#!/usr/bin/env bash
# Speculative decoding on an input-grounded task (docs/speculative.md, "Measured"): trains two
# copy-task models with kvad train (a 7.1M target, a 0.41M draft; ~65 min on 2 Zen 4 cores, skipped
# when they exist), then measures kvad's prompt lookup, draft model and q4 self-draft, and the same
# configurations in llama.cpp on the same weights when the peer is set up (../shared/peer/setup).
#   bench/speculative/run.sh [WORK_DIR]      (KVAD=path/to/kvad, PEER=../shared/peer, REPS=4)
# Needs an idle machine: every figure is a ratio of runs that alternate.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-/tmp/kvad-spec}
KVAD=${KVAD:-$root/build/kvad}
PEER=${PEER:-$root/../shared/peer}
REPS=${REPS:-4}
export KVAD_HOME=$work/home
mkdir -p "$work" && cd "$work"

# ---- the task: a line of random words, then the same line; passages none of the models saw
[ -f randcopy.txt ] || python3 "$root/tools/make_copy_corpus.py" randcopy.txt
[ -f line.txt ] || python3 "$root/tools/make_copy_corpus.py" --line line.txt
for s in 11 12 13; do [ -f l$s.txt ] || python3 "$root/tools/make_copy_corpus.py" --line l$s.txt $s --length 100; done

# ---- the models (constant learning rate: a run stopped early is the run trained to that step)
if [ ! -d "$KVAD_HOME/models/copy7" ]; then
  "$KVAD" train --data randcopy.txt --name copy7 --arch llama --layers 4 --dim 384 --heads 6 --ctx 256 \
    --batch 32 --steps 3300 --lr 2e-3 --warmup 100 --schedule constant --precision bf16 --sample-chars 0
fi
if [ ! -d "$KVAD_HOME/models/copy-tiny" ]; then
  "$KVAD" train --data randcopy.txt --name copy-tiny --arch llama --layers 2 --dim 128 --heads 4 --ctx 256 \
    --batch 32 --steps 4000 --lr 3e-3 --warmup 100 --sample-chars 0
  "$KVAD" train --name copy-tiny --resume --steps 8000 --sample-chars 0
fi
# greedy copies (run --file would drop the passage's final newline; kvad bench keeps it)
for m in copy7 copy-tiny; do
  for f in line l11 l12 l13; do
    printf '%-9s %-4s ' $m $f; "$KVAD" run --model $m --prompt "$(cat $f.txt)"$'\n' -n 110 --temp 0 2>/dev/null | tr '\n' '|'; echo
  done
done

# ---- kvad
bench() { echo "kvad bench $*"; "$KVAD" bench "$@" -g 100 2>&1 | tail -3; }
for f in line l11 l12 l13; do bench -m copy7 --spec ngram --prompt-file $f.txt -r 6; done
bench -m copy7 -q q8 --spec ngram --prompt-file line.txt -r 6
bench -m copy7 --draft copy-tiny --prompt-file line.txt -r 4
bench -m copy7 --draft copy-tiny --draft-p-min 0.3 --prompt-file line.txt -r 4
bench -m copy7 -q bf16 --draft copy7 --draft-quant q4 --prompt-file line.txt -r 4

# ---- llama.cpp on the same weights
cache=${KVAD_PEER_HOME:-$HOME/.cache/kvad-peer}
src=$cache/llama-src
if [ ! -d "$cache/node_modules/node-llama-cpp" ]; then echo "no llama.cpp peer (run $PEER/setup): done"; exit 0; fi
[ -d "$src/.git" ] || git clone -q "$cache/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src" 2>/dev/null
B=$src/build-spec/bin
if [ ! -x "$B/llama-speculative-simple" ]; then  # peer/build-llamacpp's flags, plus the examples
  cmake -S "$src" -B "$src/build-spec" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON \
    -DGGML_CPU=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$src/build-spec" --target llama-speculative-simple llama-completion -j"$(nproc)" >/dev/null
  cp "$cache"/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-cpu-*.so "$B/"
fi
mkdir -p gg
to_gguf() {  # model, name, type
  rm -rf gg/$2-hf && mkdir -p gg/$2-hf
  cp "$KVAD_HOME"/models/$1/{config.json,model.safetensors,tokenizer.json,tokenizer_config.json} gg/$2-hf/
  # llama.cpp refuses a BPE vocabulary without merges: add one that never applies ("\n " is not in the corpus)
  python3 -c "import json; p='gg/$2-hf/tokenizer.json'; t=json.load(open(p)); t['model']['merges']=['Ċ Ġ']; json.dump(t, open(p, 'w'))"
  /usr/bin/python3 "$PEER/to_gguf.py" gg/$2-hf gg/$2-$3.gguf --type $3 --pre gpt-2 >/dev/null
}
to_gguf copy7 copy7 f32; to_gguf copy7 copy7 bf16; to_gguf copy7 copy7 q4_0; to_gguf copy-tiny tiny f32
spec() {
  LD_LIBRARY_PATH=$B "$B/llama-speculative-simple" -n 100 --temp 0 --top-k 1 -t 2 -c 512 -f line.txt "$@" 2>&1 |
    grep -E "decoded|n_drafted|n_accept" | sed 's/.* I //' | tr '\n' ' ' || echo -n "(no result: exit $?)"
  echo
}
plain() {
  LD_LIBRARY_PATH=$B "$B/llama-completion" -n 100 --temp 0 --top-k 1 -t 2 -c 512 -no-cnv --ignore-eos -f line.txt "$@" 2>&1 |
    grep -E " eval time .* runs" | sed 's/.*eval time/eval time/' || echo "(no result: exit $?)"
}
poll0="--poll 0 --spec-draft-poll 0"  # two contexts' thread pools on two cores: see docs/speculative.md
for r in $(seq "$REPS"); do
  echo "-- rep $r"
  echo -n "llama.cpp plain f32:               "; plain -m gg/copy7-f32.gguf
  echo -n "llama.cpp ngram-simple (defaults): "; spec -m gg/copy7-f32.gguf --spec-type ngram-simple
  echo -n "llama.cpp ngram-simple n 4, m 16:  "; spec -m gg/copy7-f32.gguf --spec-type ngram-simple \
    --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 16
  echo -n "llama.cpp draft copy-tiny:         "; spec -m gg/copy7-f32.gguf -md gg/tiny-f32.gguf --spec-type draft-simple \
    --spec-draft-n-max 16 --spec-draft-p-min 0.75 $poll0
  echo -n "llama.cpp draft copy-tiny, polling:"; spec -m gg/copy7-f32.gguf -md gg/tiny-f32.gguf --spec-type draft-simple \
    --spec-draft-n-max 16 --spec-draft-p-min 0.75
  echo -n "llama.cpp plain bf16:              "; plain -m gg/copy7-bf16.gguf
  echo -n "llama.cpp bf16 + q4_0 self-draft:  "; spec -m gg/copy7-bf16.gguf -md gg/copy7-q4_0.gguf --spec-type draft-simple \
    --spec-draft-n-max 16 --spec-draft-p-min 0.75 $poll0
  echo -n "kvad prompt lookup f32, 2 reps:    "; "$KVAD" bench -m copy7 --spec ngram --prompt-file line.txt -g 100 -r 2 2>&1 |
    tail -2 | tr '\n' ' '
  echo
done
