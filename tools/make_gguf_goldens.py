#!/usr/bin/python3
"""GGUF fixtures and llama.cpp's logits on them, for tests/models_gguf.cpp.

For each fixture: `kvad synth` writes a small checkpoint (random weights, jittered norms, GPT-2's BPE
cut to 512 tokens); ../shared/peer/to_gguf.py converts it like llama.cpp's convert_hf_to_gguf.py
(F32/F16/BF16/Q8_0/Q4_0; the llama Q/K permutation, rope_freqs, GPT-2's transposes), and
../shared/peer/quantize makes the K-quant files with llama.cpp's own quantiser (Q4_K_S, Q4_K_M,
Q5_K_M, Q6_K: every matrix is 256 wide in the "tiny-kq" preset, so no tensor falls back). llama.cpp
(../shared/peer/llamacpp.mjs, f32 KV cache, no flash attention) gives the logits at every position of
a fixed prompt and a greedy continuation. Written: the .gguf files to tests/fixtures/gguf/ and
tests/golden/gguf/<name>.json with a subset of the logits (every 8th id plus each position's top 8),
max |logit|, argmax and the top-2 margin per position. The tests never run the peers.

  /usr/bin/python3 tools/make_gguf_goldens.py [--kvad build/kvad] [--peer ../shared/peer] [name ...]
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = [15, 284, 72, 101, 256, 400, 13, 11, 290, 318, 262, 64, 88, 499, 300, 1]
SYNTH = dict(seed=1, std=0.1, norm_jitter=0.1, dtype="bf16")
N_GREEDY = 16

# name -> (arch, preset, to_gguf type, llama.cpp quantize type or None[, synth seed[, synth std]])
# A seed other than SYNTH's: that fixture's random weights at seed 1 left near-ties along the
# greedy path (the check then says nothing about the engine). No deepseek2 Q8_0 fixture: on these
# random weights llama.cpp's own Q8_0 logits sit 20% (of max |logit|) from its F32 ones (experts
# flip at the routers' margins), so neither engine's Q8_0 is a reference for the other's. qwen3next
# at std 0.04: at 0.1 llama.cpp's Q8_0 sits 41% from its F32 (and kvad's 45%); at 0.04, 3.5% (kvad's
# 2.5%), so the two Q8_0 engines can be held to each other.
FIXTURES = {
    "llama-f16": ("llama", "tiny-v512", "f16", None),
    "llama-q4_0": ("llama", "tiny-v512", "q4_0", None),
    "qwen2-f32": ("qwen2", "tiny-v512", "f32", None),
    "qwen3-bf16": ("qwen3", "tiny-v512", "bf16", None),
    "gpt2-q8_0": ("gpt2", "tiny-v512", "q8_0", None),
    "llama-q4_k_m": ("llama", "tiny-kq", "f32", "Q4_K_M"),
    "qwen2-q6_k": ("qwen2", "tiny-kq", "f32", "Q6_K"),
    "qwen3-q5_k_m": ("qwen3", "tiny-kq", "f32", "Q5_K_M"),
    "gpt2-q4_k_s": ("gpt2", "tiny-kq", "f32", "Q4_K_S"),
    "qwen3moe-q8_0": ("qwen3_moe", "tiny-v512", "q8_0", None, 4),
    "qwen3moe-q4_k_m": ("qwen3_moe", "tiny-kq", "f32", "Q4_K_M"),
    "deepseek2-f32": ("deepseek_v2", "tiny-v512", "f32", None),
    "qwen3next-f32": ("qwen3_next", "tiny-v512", "f32", None, 3, 0.04),
    "qwen3next-q8_0": ("qwen3_next", "tiny-v512", "q8_0", None, 3, 0.04),
    "qwen3next-q4_k_m": ("qwen3_next", "tiny-kq", "f32", "Q4_K_M", 3, 0.04),
}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", default=os.path.join(ROOT, "build", "kvad"))
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(ROOT), "shared", "peer"))
    ap.add_argument("names", nargs="*", default=list(FIXTURES))
    a = ap.parse_args()
    fix_dir = os.path.join(ROOT, "tests", "fixtures", "gguf")
    gold_dir = os.path.join(ROOT, "tests", "golden", "gguf")
    os.makedirs(fix_dir, exist_ok=True)
    os.makedirs(gold_dir, exist_ok=True)
    for name in a.names:
        arch, preset, gtype, qtype, *seed = FIXTURES[name]
        synth = dict(SYNTH, **dict(zip(("seed", "std"), seed)))
        with tempfile.TemporaryDirectory() as work:
            md = os.path.join(work, "hf")
            run([a.kvad, "synth", "--arch", arch, "--preset", preset, "--seed", str(synth["seed"]),
                 "--std", str(synth["std"]), "--norm-jitter", str(synth["norm_jitter"]), "--dtype", synth["dtype"],
                 "--out", md])
            g0 = os.path.join(work, "base.gguf")
            run(["/usr/bin/python3", os.path.join(a.peer, "to_gguf.py"), md, g0, "--type", gtype, "--name", name])
            out = os.path.join(fix_dir, name + ".gguf")
            if qtype:
                q = run([os.path.join(a.peer, "quantize"), g0, os.path.join(work, "q.gguf"), qtype, "--threads", "2",
                         "--quiet"])
                shutil.copy(os.path.join(work, "q.gguf"), out)
                tensors = q.strip().split("tensors:")[-1].strip()
            else:
                shutil.copy(g0, out)
                tensors = gtype.upper()
            tf = os.path.join(work, "prompt.json")
            json.dump(PROMPT, open(tf, "w"))
            lf = os.path.join(work, "llama.f32")
            run(["node", os.path.join(a.peer, "llamacpp.mjs"), "logits", out, tf, "--all", "--out", lf,
                 "--kv-type", "f32", "--flash-attn", "off", "--threads", "2"])
            logits = np.fromfile(lf, dtype="<f4").reshape(len(PROMPT), -1)
            V = logits.shape[1]
            greedy = json.loads(run(["node", os.path.join(HERE, "peer_greedy.mjs"), out, tf, str(N_GREEDY)]))["greedy"]
            idx = set(range(0, V, 8))
            for row in logits:
                idx.update(int(i) for i in np.argsort(-row)[:8])
            idx = sorted(idx)
            top2 = np.sort(logits, axis=1)[:, -2:]
            g = {
                "about": "made by tools/make_gguf_goldens.py: llama.cpp (../shared/peer/llamacpp.mjs, f32 KV cache, "
                         "no flash attention) on tests/fixtures/gguf/" + name + ".gguf",
                "file": name + ".gguf",
                "sha256": hashlib.sha256(open(out, "rb").read()).hexdigest(),
                "synth": dict(synth, arch=arch, preset=preset),
                "gguf_type": gtype if not qtype else qtype,
                "tensor_types": tensors,
                "prompt": PROMPT,
                "vocab": V,
                "indices": idx,
                "logits": [[float(row[i]) for i in idx] for row in logits],
                "max_abs": [float(np.abs(row).max()) for row in logits],
                "argmax": [int(np.argmax(row)) for row in logits],
                "margin": [float(t[1] - t[0]) for t in top2],
                "greedy": greedy,
            }
            with open(os.path.join(gold_dir, name + ".json"), "w") as f:
                json.dump(g, f)
            print(f"{name}: {os.path.getsize(out)} bytes ({tensors}), vocab {V}, {len(idx)} logits per position")


if __name__ == "__main__":
    main()
