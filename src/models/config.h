// A model's hyper-parameters as one plain struct, parsed from config.json by the family's parser
// (see registry.h). Everything the forward pass needs and nothing else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe.h"

namespace kvad {

// The mixture-of-experts part of a config (models/moe.h): which layers route, to how many experts.
struct MoeConfig {
  int64_t n_experts = 0;            // 0: every layer is dense
  int64_t expert_intermediate = 0;  // each expert's hidden width (moe_intermediate_size)
  kernels::Routing routing;         // the family's rule, with top_k
  bool score_bias = false;          // DeepSeek-V3: e_score_correction_bias is a tensor of the router
  int64_t shared_intermediate = 0;  // the always-on shared expert's width (0: none)
  bool shared_gate = false;         // Qwen3-Next: the shared expert's output x sigmoid(shared_expert_gate x)
  std::vector<bool> sparse;         // per layer: true = routed experts, false = the dense MLP

  bool routed(int64_t layer) const { return n_experts > 0 && sparse.at((size_t)layer); }
};

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "linear", "yarn" or "freq_factors"
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_positions = 8192;
  // "yarn" (DeepSeek V2/V3): the ramp between beta_fast and beta_slow rotations over
  // original_max_positions, and the magnitude terms (models/rope.h). 0 = absent in config.json.
  double beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0, attention_factor = 0;
  bool truncate = true;  // round the ramp's ends to whole dimensions (transformers' default)
  // "freq_factors": inv_freq[i] is divided by freq_factors[i] (what a GGUF's rope_freqs.weight
  // holds: llama.cpp's precomputed form of llama3 scaling).
  std::vector<double> freq_factors;
};

// Multi-head latent attention (DeepSeek V2/V3): queries through an optional low-rank q_a/q_b pair,
// keys and values from one compressed latent per position (models/deepseek.cpp).
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;  // complex-pair rope on the rope dims (false: rotate-half, V3 only)
  bool attention_bias = false;  // q_a_proj, kv_a_proj_with_mqa and o_proj have biases

  int64_t latent_width() const { return kv_lora_rank + qk_rope_head_dim; }  // cached per position and layer
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool enabled() const { return kv_lora_rank > 0; }
};

// Qwen3-Next's hybrid stack: gated DeltaNet (linear attention) layers with a recurrent state,
// and gated full attention every full_attention_interval layers (models/qwen3_next.cpp).
struct DeltaNetConfig {
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 0;
  std::vector<bool> linear;  // per layer: a gated DeltaNet layer (else full attention)

  bool enabled() const { return key_heads > 0; }
  bool is_linear(int64_t layer) const { return enabled() && linear.at((size_t)layer); }
};

// An FP8 checkpoint's block scaling (config.json "quantization_config", quant_method "fp8"): each
// entry of a weight's `<name>_scale_inv` multiplies one rows x cols block of it
// (weight_block_size, DeepSeek-V3's [128, 128]). 0 x 0: the checkpoint is not FP8.
struct Fp8Blocks {
  int64_t rows = 0, cols = 0;
  bool any() const { return rows > 0 && cols > 0; }
};

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen2ForCausalLM"
  std::string model_type;    // e.g. "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t max_positions = 0;  // the context length the model supports
  float norm_eps = 1e-5f;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k
  MlaConfig mla;  // DeepSeek: attention through a compressed latent (mla.enabled())
  DeltaNetConfig delta;  // Qwen3-Next: the linear-attention layers (delta.enabled())
  int64_t rotary_dims = 0;  // rope turns the first rotary_dims of each head (0: all of it)
  // Name prefixes of tensors a checkpoint of this config holds that the model does not compute
  // (DeepSeek-V3's multi-token-prediction layers past num_hidden_layers): read by nothing, and
  // named here so the unread-tensor guard knows them (registry.h `unread_allowed`).
  std::vector<std::string> unused_tensors;
  std::vector<int32_t> eos_ids;  // from config.json (generation_config.json adds to these)
  int32_t bos_id = -1;
  MoeConfig moe;
  Fp8Blocks fp8_blocks;  // how the checkpoint's F8_E4M3 weights are scaled (none when not FP8)

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace kvad
