#!/usr/bin/python3
"""Golden logits and greedy continuations for the model tests, from two independent references.

For each architecture: `kvad synth` writes a tiny checkpoint (random weights, jittered norms, real
tokenizer); the peer harness's float64 numpy forward (../shared/peer/ref_forward.py) gives logits at
every position of a fixed prompt and a 32-token greedy continuation; llama.cpp (tools/peer_greedy.mjs
over ../shared/peer/to_gguf.py's f32 GGUF) gives its own greedy continuation. Written to
tests/golden/models/<arch>.json; the tests compare kvad against these and never run the peers.

An argument ARCH:PRESET makes the golden of another preset than "tiny", written to
tests/golden/models/<preset>.json (the DeepSeek presets: tests/models_deepseek.cpp);
ARCH:PRESET:KEY=JSON also sets one config.json key after synth (recorded as "config_set", the
file named <preset>-<key>-<value>.json): a variant of a layout no preset has. llama.cpp's
continuation is left out (null) for a checkpoint llama.cpp cannot load: its deepseek2 needs at
least one shared expert, so the dense DeepSeek presets have the numpy reference alone.

  /usr/bin/python3 tools/make_model_goldens.py [--kvad build/kvad] [--peer ../shared/peer] [arch[:preset] ...]
  e.g. tools/make_model_goldens.py deepseek_v2:tiny-deepseek-v2-lite-dense deepseek_v2:tiny-deepseek-v2-dense \
       deepseek_v3:tiny-deepseek-v3-dense deepseek_v3:tiny-deepseek-v3-dense:rope_interleave=false
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


def reference_fields(logits):
    """What a golden keeps of the reference's logits [positions, vocab]: a subset of the vocabulary keeps
    the fixture small (every 199th id plus each position's top 8), and each position's max |logit| and argmax."""
    idx = set(range(0, logits.shape[1], 199))
    for row in logits:
        idx.update(int(i) for i in np.argsort(-row)[:8])
    idx = sorted(idx)
    return {
        "indices": idx,
        "ref_logits": [[float(row[i]) for i in idx] for row in logits],
        "ref_max_abs": [float(np.abs(row).max()) for row in logits],
        "ref_argmax": [int(np.argmax(row)) for row in logits],
    }


def llamacpp_can_run(model_dir):
    """Whether llama.cpp loads this checkpoint's GGUF (../shared/peer/README.md, "Loadable subsets")."""
    c = json.load(open(os.path.join(model_dir, "config.json")))
    if c["architectures"][0].startswith("Deepseek"):
        return bool(c.get("n_routed_experts")) and bool(c.get("n_shared_experts"))
    return True


def llamacpp_greedy(peer, model_dir, work):
    gguf = os.path.join(work, "m.gguf")
    run(["/usr/bin/python3", os.path.join(peer, "to_gguf.py"), model_dir, gguf, "--type", "f32"])
    tf = os.path.join(work, "prompt.json")
    json.dump(PROMPT, open(tf, "w"))
    return json.loads(run(["node", os.path.join(HERE, "peer_greedy.mjs"), gguf, tf, str(N_GREEDY)]))["greedy"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", default=os.path.join(ROOT, "build", "kvad"))
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(ROOT), "shared", "peer"))
    ap.add_argument("archs", nargs="*", default=["llama", "qwen2", "qwen3", "gpt2"])
    a = ap.parse_args()
    out_dir = os.path.join(ROOT, "tests", "golden", "models")
    os.makedirs(out_dir, exist_ok=True)
    for item in a.archs:
        arch, _, preset = item.partition(":")
        preset, _, setting = preset.partition(":")
        synth = dict(SYNTH, preset=preset or SYNTH["preset"])
        name = preset or arch
        config_set = {}
        if setting:
            key, _, value = setting.partition("=")
            config_set[key] = json.loads(value)
            name += f"-{key}-{value}"
        with tempfile.TemporaryDirectory() as work:
            md = os.path.join(work, arch)
            run([a.kvad, "synth", "--arch", arch, "--preset", synth["preset"], "--seed", str(synth["seed"]),
                 "--std", str(synth["std"]), "--norm-jitter", str(synth["norm_jitter"]), "--dtype", synth["dtype"],
                 "--out", md])
            if config_set:
                cf = os.path.join(md, "config.json")
                json.dump(dict(json.load(open(cf)), **config_set), open(cf, "w"), indent=2)
            sha = hashlib.sha256(open(os.path.join(md, "model.safetensors"), "rb").read()).hexdigest()
            logits = ref_logits(a.peer, md, PROMPT, work)
            V = logits.shape[1]
            # Greedy continuation in the numpy reference (one full forward per token: tiny model).
            seq = list(PROMPT)
            ref_greedy = [int(np.argmax(logits[-1]))]
            while len(ref_greedy) < N_GREEDY:
                seq_all = seq + ref_greedy
                ref_greedy.append(int(np.argmax(ref_logits(a.peer, md, seq_all, work)[-1])))
            lc = llamacpp_greedy(a.peer, md, work) if llamacpp_can_run(md) else None
            agree = 0
            while lc and agree < N_GREEDY and lc[agree] == ref_greedy[agree]:
                agree += 1
            g = {
                "about": "made by tools/make_model_goldens.py from ../shared/peer/ref_forward.py (numpy float64) "
                         "and llama.cpp (tools/peer_greedy.mjs on an f32 GGUF from to_gguf.py, f32 KV cache)",
                "synth": dict(synth, arch=arch, sha256=sha),
                **({"config_set": config_set} if config_set else {}),
                "prompt": PROMPT,
                "vocab": V,
                **reference_fields(logits),
                "ref_greedy": ref_greedy,
                "llamacpp_greedy": lc,
                "greedy_agree": agree,
            }
            with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
                json.dump(g, f)
            print(f"{name}: vocab {V}, {len(g['indices'])} logits per position, references agree on "
                  f"{agree if lc else 'no llama.cpp'}/{N_GREEDY} greedy tokens")


if __name__ == "__main__":
    main()
