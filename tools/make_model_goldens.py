#!/usr/bin/python3
"""Golden logits and greedy continuations for the model tests, from two independent references.

For each architecture: `kvad synth` writes a tiny checkpoint (random weights, jittered norms, real
tokenizer); the peer harness's float64 numpy forward (../shared/peer/ref_forward.py) gives logits at
every position of a fixed prompt and a 32-token greedy continuation; llama.cpp (tools/peer_greedy.mjs
over ../shared/peer/to_gguf.py's f32 GGUF) gives its own greedy continuation. Written to
tests/golden/models/<arch>.json; the tests compare kvad against these and never run the peers.

  /usr/bin/python3 tools/make_model_goldens.py [--kvad build/kvad] [--peer ../shared/peer] [arch ...]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = [9707, 11, 1879, 0, 358, 1079, 264, 1273, 13, 576, 3974, 220, 16, 17, 18, 100]
SYNTH = dict(preset="tiny", seed=1, std=0.1, norm_jitter=0.1, dtype="bf16")
N_GREEDY = 32


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def ref_logits(peer, model_dir, tokens, work):
    tf, out = os.path.join(work, "t.json"), os.path.join(work, "ref.f32")
    json.dump(tokens, open(tf, "w"))
    run(["/usr/bin/python3", os.path.join(peer, "ref_forward.py"), model_dir, tf, "--out", out])
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", default=os.path.join(ROOT, "build", "kvad"))
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(ROOT), "shared", "peer"))
    ap.add_argument("archs", nargs="*", default=["llama", "qwen2", "qwen3", "gpt2"])
    a = ap.parse_args()
    out_dir = os.path.join(ROOT, "tests", "golden", "models")
    os.makedirs(out_dir, exist_ok=True)
    for arch in a.archs:
        with tempfile.TemporaryDirectory() as work:
            md = os.path.join(work, arch)
            run([a.kvad, "synth", "--arch", arch, "--preset", SYNTH["preset"], "--seed", str(SYNTH["seed"]),
                 "--std", str(SYNTH["std"]), "--norm-jitter", str(SYNTH["norm_jitter"]), "--dtype", SYNTH["dtype"],
                 "--out", md])
            sha = hashlib.sha256(open(os.path.join(md, "model.safetensors"), "rb").read()).hexdigest()
            logits = ref_logits(a.peer, md, PROMPT, work)
            V = logits.shape[1]
            # Greedy continuation in the numpy reference (one full forward per token: tiny model).
            seq = list(PROMPT)
            ref_greedy = [int(np.argmax(logits[-1]))]
            while len(ref_greedy) < N_GREEDY:
                seq_all = seq + ref_greedy
                ref_greedy.append(int(np.argmax(ref_logits(a.peer, md, seq_all, work)[-1])))
            gguf = os.path.join(work, "m.gguf")
            run(["/usr/bin/python3", os.path.join(a.peer, "to_gguf.py"), md, gguf, "--type", "f32"])
            tf = os.path.join(work, "prompt.json")
            json.dump(PROMPT, open(tf, "w"))
            lc = json.loads(run(["node", os.path.join(HERE, "peer_greedy.mjs"), gguf, tf, str(N_GREEDY)]))
            agree = 0
            while agree < N_GREEDY and lc["greedy"][agree] == ref_greedy[agree]:
                agree += 1
            # A subset of the vocabulary keeps the fixture small: every 199th id plus each position's top 8.
            idx = set(range(0, V, 199))
            for row in logits:
                idx.update(int(i) for i in np.argsort(-row)[:8])
            idx = sorted(idx)
            g = {
                "about": "made by tools/make_model_goldens.py from ../shared/peer/ref_forward.py (numpy float64) "
                         "and llama.cpp (tools/peer_greedy.mjs on an f32 GGUF from to_gguf.py, f32 KV cache)",
                "synth": dict(SYNTH, arch=arch, sha256=sha),
                "prompt": PROMPT,
                "vocab": V,
                "indices": idx,
                "ref_logits": [[float(row[i]) for i in idx] for row in logits],
                "ref_max_abs": [float(np.abs(row).max()) for row in logits],
                "ref_argmax": [int(np.argmax(row)) for row in logits],
                "ref_greedy": ref_greedy,
                "llamacpp_greedy": lc["greedy"],
                "greedy_agree": agree,
            }
            with open(os.path.join(out_dir, f"{arch}.json"), "w") as f:
                json.dump(g, f)
            print(f"{arch}: vocab {V}, {len(idx)} logits per position, references agree on {agree}/{N_GREEDY} "
                  f"greedy tokens")


if __name__ == "__main__":
    main()
