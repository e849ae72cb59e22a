#!/usr/bin/python3
"""Golden logits for tests/models_lora.cpp: a base with a LoRA adapter MERGED into its weights, by
numpy, run through ../shared/peer/ref_forward.py (float64). kvad runs the same adapter unmerged.

For each case: `kvad synth` writes a tiny checkpoint (tiny-v512: a 512-token vocabulary keeps the
logits small); this script draws an adapter with numpy, writes it as PEFT saves one
(adapter_config.json + adapter_model.safetensors, by the small writer below) into
tests/golden/lora/<case>/, and merges it the way PEFT's merge_and_unload does:
  W += scale * B @ A                  (a Linear's [out, in] weight)
  W += scale * (B @ A).T              (GPT-2's Conv1D [in, out] weight; fan_in_fan_out = true)
with scale = user_scale * lora_alpha / r (lora_alpha / sqrt(r) with use_rslora). The merge happens
in the reference's weight reader, in float64. The base's own logits are kept too, so a test can
tell the adapter's effect from quantisation error. The test never runs the peer.

  /usr/bin/python3 tools/make_lora_goldens.py [--kvad build/kvad] [--peer ../shared/peer]
"""
import json
import os
import shutil
import struct
import tempfile

import numpy as np

from golden_synth import args_and_reference, synth

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "golden", "lora")
SYNTH = dict(preset="tiny-v512", seed=5, std=0.1, norm_jitter=0.1, dtype="bf16")
TOKENS = [17, 301, 5, 77, 420, 3, 256, 99, 12]
LLAMA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name, arch, rank, alpha, rslora, targets, user scale
CASES = [
    ("llama", "llama", 4, 8, False, ["q_proj", "v_proj", "down_proj"], 0.5),
    ("qwen2", "qwen2", 8, 16, False, LLAMA_ALL, 1.0),
    ("qwen3", "qwen3", 4, 4, True, LLAMA_ALL, 1.0),
    ("gpt2", "gpt2", 4, 8, False, ["c_attn", "c_proj", "c_fc"], 1.0),
]


def write_safetensors(path, tensors):
    """PEFT's file: F32 tensors, a JSON header padded to 8 bytes, data in header order."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def projections(ck, arch):
    """(module, stored [rows, cols], conv1d) of every projection of the checkpoint."""
    out = []
    for name in ck.order:
        if not name.endswith(".weight") or len(ck.shape(name)) != 2:
            continue
        module = name[: -len(".weight")]
        if arch == "gpt2" and (".attn." in module or ".mlp." in module):
            out.append((module, ck.shape(name), True))
        elif ".self_attn." in module or ".mlp." in module:
            out.append((module, ck.shape(name), False))
    return out


def make_adapter(ck, arch, rank, alpha, rslora, targets, rng, adir):
    tensors, deltas = {}, {}
    for module, shape, conv1d in projections(ck, arch):
        if not any(module == t or module.endswith("." + t) for t in targets):
            continue
        inp, out = (shape[0], shape[1]) if conv1d else (shape[1], shape[0])
        a = rng.normal(0, 0.2, (rank, inp)).astype(np.float32)
        b = rng.normal(0, 0.2, (out, rank)).astype(np.float32)
        tensors[f"base_model.model.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.{module}.lora_B.weight"] = b
        d = b.astype(np.float64) @ a.astype(np.float64)
        deltas[module + ".weight"] = d.T if conv1d else d
    os.makedirs(adir, exist_ok=True)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
           "target_modules": targets, "use_rslora": rslora, "fan_in_fan_out": arch == "gpt2", "bias": "none",
           "modules_to_save": None, "use_dora": False, "base_model_name_or_path": f"kvad-synth-{arch}-tiny-v512"}
    json.dump(cfg, open(os.path.join(adir, "adapter_config.json"), "w"), indent=2)
    write_safetensors(os.path.join(adir, "adapter_model.safetensors"), tensors)
    return deltas


def logits_with(rf, md, deltas, scale):
    """ref_forward over md with every delta added (float64) as its weights are read."""
    base_cls = rf.Checkpoint

    class Merged(base_cls):
        def load_f32_or_f16(self, name):
            w = base_cls.load_f32_or_f16(self, name).astype(np.float64)
            return w + scale * deltas[name] if name in deltas else w

    rf.Checkpoint = Merged
    try:
        return rf.forward(md, TOKENS)
    finally:
        rf.Checkpoint = base_cls


def main():
    a, rf = args_and_reference(ROOT)
    shutil.rmtree(OUT, ignore_errors=True)
    cases = []
    for i, (name, arch, rank, alpha, rslora, targets, user_scale) in enumerate(CASES):
        with tempfile.TemporaryDirectory() as work:
            md = os.path.join(work, arch)
            sha = synth(a.kvad, arch, SYNTH, md)
            deltas = make_adapter(rf.Checkpoint(md), arch, rank, alpha, rslora, targets,
                                  np.random.default_rng(100 + i), os.path.join(OUT, name))
            scale = user_scale * (alpha / np.sqrt(rank) if rslora else alpha / rank)
            base = rf.forward(md, TOKENS)
            merged = logits_with(rf, md, deltas, scale)
            print(f"{name}: {len(deltas)} projections adapted, max |merged - base| {np.abs(merged - base).max():.3f}")
            cases.append({"name": name, "arch": arch, "sha256": sha, "user_scale": user_scale,
                          "base_logits": base.astype(np.float32).tolist(),
                          "merged_logits": merged.astype(np.float32).tolist()})
    g = {"about": "made by tools/make_lora_goldens.py: adapters merged by numpy, logits from "
                  "../shared/peer/ref_forward.py (float64)", "synth": SYNTH, "tokens": TOKENS, "cases": cases}
    with open(os.path.join(OUT, "lora.json"), "w") as f:
        json.dump(g, f)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
