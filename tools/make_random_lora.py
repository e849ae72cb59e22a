#!/usr/bin/python3
"""A PEFT LoRA adapter with random weights for a model folder, for benchmarks (docs/lora.md):
rank R on the named projections of every layer, shapes from the model's config.json.

  /usr/bin/python3 tools/make_random_lora.py MODEL_DIR OUT_DIR [--rank 16] [--alpha 32]
      [--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]
"""
import argparse
import json
import os

import numpy as np

from make_lora_goldens import write_safetensors

ATTN = {"q_proj", "k_proj", "v_proj", "o_proj"}


def shapes(cfg, proj):
    """[out, in] of a Llama-family projection."""
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or H // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd
    return {"q_proj": (q, H), "k_proj": (kv, H), "v_proj": (kv, H), "o_proj": (H, q),
            "gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}[proj]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    targets = a.targets.split(",")
    rng = np.random.default_rng(0)
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for proj in targets:
            out, inp = shapes(cfg, proj)
            m = f"base_model.model.model.layers.{layer}.{'self_attn' if proj in ATTN else 'mlp'}.{proj}"
            tensors[m + ".lora_A.weight"] = rng.normal(0, 0.01, (a.rank, inp)).astype(np.float32)
            tensors[m + ".lora_B.weight"] = rng.normal(0, 0.01, (out, a.rank)).astype(np.float32)
    os.makedirs(a.out, exist_ok=True)
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": a.rank, "lora_alpha": a.alpha,
               "target_modules": targets, "bias": "none", "use_rslora": False, "fan_in_fan_out": False},
              open(os.path.join(a.out, "adapter_config.json"), "w"), indent=2)
    write_safetensors(os.path.join(a.out, "adapter_model.safetensors"), tensors)
    print(f"wrote {a.out}: {len(tensors) // 2} projections, rank {a.rank}")


if __name__ == "__main__":
    main()
