#!/usr/bin/python3
"""Golden expert choices for tests/kernels_moe.cpp, from the peer's float64 numpy routing
(../shared/peer/ref_forward.py `route`: transformers' rules for Qwen3-MoE, DeepSeek-V2 greedy and
group_limited_greedy, DeepSeek-V3 noaux_tc). Random router logits (and V3 score biases) per rule;
a draw whose smallest gap at a top-k or top-group boundary is under 1e-3 is drawn again, so float32
and float64 must choose alike. Written to tests/golden/routing/routing.json.

  /usr/bin/python3 tools/make_routing_goldens.py [--peer ../shared/peer]
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CASES = {
    "qwen3_moe": ("Qwen3MoeForCausalLM", dict(num_experts_per_tok=4, norm_topk_prob=True), 16),
    "qwen3_moe_unnormalised": ("Qwen3MoeForCausalLM", dict(num_experts_per_tok=2, norm_topk_prob=False), 8),
    "deepseek_v2_greedy": ("DeepseekV2ForCausalLM",
                           dict(num_experts_per_tok=6, topk_method="greedy", routed_scaling_factor=1.0), 64),
    "deepseek_v2_group": ("DeepseekV2ForCausalLM",
                          dict(num_experts_per_tok=4, topk_method="group_limited_greedy", n_group=4, topk_group=2,
                               routed_scaling_factor=16.0), 16),
    "deepseek_v3": ("DeepseekV3ForCausalLM",
                    dict(num_experts_per_tok=8, n_group=8, topk_group=4, norm_topk_prob=True,
                         routed_scaling_factor=2.5), 64),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(ROOT), "shared", "peer"))
    a = ap.parse_args()
    sys.path.insert(0, a.peer)
    import ref_forward as rf
    rng = np.random.default_rng(7)
    out = {"about": "made by tools/make_routing_goldens.py from ../shared/peer/ref_forward.py route() (float64)"}
    for name, (arch, hp, E) in CASES.items():
        T = 32
        while True:
            logits = (rng.standard_normal((T, E)) * 2).astype(np.float32)
            bias = (rng.standard_normal(E) * 0.05).astype(np.float32) if arch == "DeepseekV3ForCausalLM" else None
            stats = rf.Stats()
            idx, w = rf.route(arch, hp, logits.astype(np.float64), None if bias is None else bias.astype(np.float64),
                              stats)
            if stats.topk_margin > 1e-3 and stats.group_margin > 1e-3:
                break
        case = {"arch": arch, "config": hp, "experts": E, "logits": logits.tolist(), "ids": idx.tolist(),
                "weights": w.tolist()}
        if bias is not None:
            case["score_bias"] = bias.tolist()
        out[name] = case
        print(f"{name}: {T} tokens, {E} experts, top-{hp['num_experts_per_tok']}, min gap {stats.topk_margin:.2e}")
    with open(os.path.join(ROOT, "tests", "golden", "routing", "routing.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
