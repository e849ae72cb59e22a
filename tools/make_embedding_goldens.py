#!/usr/bin/python3
"""Golden embeddings for tests/runtime_embed.cpp, from the peer harness's float64 numpy forward.

For each case: `kvad synth` writes a tiny checkpoint (as tools/make_model_goldens.py does), this
script adds the sentence-transformers files the case names (modules.json, 1_Pooling/config.json),
and ../shared/peer/ref_forward.py runs each input; its last normalisation's output is the final
hidden state (captured by wrapping the module's rmsnorm / layernorm: the final norm is the last
call of a forward). Pooling and the L2 normalisation are written out here with numpy, as
sentence-transformers defines them. The test never runs the peer.

  /usr/bin/python3 tools/make_embedding_goldens.py [--kvad build/kvad] [--peer ../shared/peer]
"""
import json
import os
import tempfile

import numpy as np

from golden_synth import args_and_reference, synth

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYNTH = dict(preset="tiny", seed=3, std=0.1, norm_jitter=0.1, dtype="bf16")
# Inputs of different lengths (token ids, in every tiny vocabulary), so a batch mixes them.
INPUTS = [[9707, 11, 1879, 0, 358, 1079, 264, 1273, 13], [576, 3974], [220, 16, 17, 18, 100, 42, 7, 9, 11, 13, 15, 300, 301, 302, 303, 304, 305, 306, 307]]
# arch, pooling mode (None: no sentence-transformers files: mean + normalise), Normalize module
CASES = [("qwen3", "pooling_mode_lasttoken", True), ("qwen2", None, True), ("llama", "pooling_mode_cls_token", False),
         ("gpt2", "pooling_mode_mean_tokens", False), ("qwen2", "pooling_mode_weightedmean_tokens", True),
         ("llama", "pooling_mode_max_tokens", False)]


def write_st_config(md, mode, normalize):
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    json.dump(mods, open(os.path.join(md, "modules.json"), "w"))
    os.makedirs(os.path.join(md, "1_Pooling"), exist_ok=True)
    keys = ["pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"]
    json.dump({"word_embedding_dimension": 0, **{k: k == mode for k in keys}, "include_prompt": True},
              open(os.path.join(md, "1_Pooling", "config.json"), "w"))


def hidden_states(rf, md, tokens):
    last = {}
    orig_rms, orig_ln = rf.rmsnorm, rf.layernorm

    def rms(x, w, eps):
        last["y"] = orig_rms(x, w, eps)
        return last["y"]

    def ln(x, w, b, eps):
        last["y"] = orig_ln(x, w, b, eps)
        return last["y"]

    rf.rmsnorm, rf.layernorm = rms, ln
    try:
        rf.forward(md, tokens)
    finally:
        rf.rmsnorm, rf.layernorm = orig_rms, orig_ln
    return last["y"]  # [T, H] float64


def pool(h, mode):
    n = h.shape[0]
    if mode == "pooling_mode_lasttoken":
        return h[-1]
    if mode == "pooling_mode_cls_token":
        return h[0]
    if mode == "pooling_mode_max_tokens":
        return h.max(axis=0)
    if mode == "pooling_mode_weightedmean_tokens":
        w = np.arange(1, n + 1, dtype=np.float64)
        return (h * w[:, None]).sum(axis=0) / w.sum()
    return h.mean(axis=0)  # mean, and the default


def main():
    a, rf = args_and_reference(ROOT)
    cases = []
    for arch, mode, normalize in CASES:
        with tempfile.TemporaryDirectory() as work:
            md = os.path.join(work, arch)
            sha = synth(a.kvad, arch, SYNTH, md)
            if mode:
                write_st_config(md, mode, normalize)
            vecs = []
            for tokens in INPUTS:
                v = pool(hidden_states(rf, md, tokens), mode)
                if normalize:
                    v = v / max(np.linalg.norm(v), 1e-12)
                vecs.append([float(x) for x in v])
            cases.append({"arch": arch, "pooling": mode, "normalize": normalize, "sha256": sha, "embeddings": vecs})
            print(f"{arch} {mode or 'default'}: width {len(vecs[0])}")
    g = {"about": "made by tools/make_embedding_goldens.py from ../shared/peer/ref_forward.py (numpy float64)",
         "synth": SYNTH, "inputs": INPUTS, "cases": cases}
    out = os.path.join(ROOT, "tests", "golden", "models", "embeddings.json")
    with open(out, "w") as f:
        json.dump(g, f)
    print("wrote", out)


if __name__ == "__main__":
    main()
