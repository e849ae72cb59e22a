// Mixture of experts in a family file: the config keys the Qwen MoE families share, and one
// layer's router and experts in the family's tensor table. The math (routing, experts grouped by
// row) is the backend's `moe` op (backend/backend.h, kernels/moe.h); shared experts are ordinary
// MLPs the family adds itself.
#pragma once
#include <string>

#include "backend/backend.h"
#include "core/json.h"
#include "models/config.h"
#include "models/tensors.h"

namespace kvad {

// Qwen3-MoE / Qwen3-Next keys: num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob, decoder_sparse_step, mlp_only_layers (softmax routing, as transformers').
MoeConfig parse_qwen_moe_config(const Json& j, int64_t n_layers, const std::string& what);
// DeepSeek-V2 / V3 keys: n_routed_experts (null: all dense), num_experts_per_tok,
// moe_intermediate_size, n_shared_experts, first_k_dense_replace, moe_layer_freq, topk_method
// (greedy | group_limited_greedy | noaux_tc), scoring_func, n_group, topk_group, norm_topk_prob,
// routed_scaling_factor. `v3`: DeepseekV3ForCausalLM (V2 ignores norm_topk_prob, as transformers).
MoeConfig parse_deepseek_moe_config(const Json& j, int64_t n_layers, bool v3, const std::string& what);
// Bounds every family's MoE fields share (experts, top-k, widths), with errors naming `what`.
void validate_moe_config(const MoeConfig& m, int64_t n_layers, const std::string& what);

// Layer l's router (`model.layers.l.mlp.gate`, f32), its score bias when the config has one, and
// every expert's gate/up/down (`mlp.experts.e.*_proj`; GGUF: expert e of `blk.l.ffn_*_exps`, the
// router `ffn_gate_inp`). A routed expert counts top_k / experts of its bytes per decode step.
void moe_tensors(const ModelConfig& c, int64_t l, MoeWeights& w, TensorList& t);

}  // namespace kvad
