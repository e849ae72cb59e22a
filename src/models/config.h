// A model's hyper-parameters as one plain struct, parsed from config.json by the family's parser
// (see registry.h). Everything the forward pass needs and nothing else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvad {

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
  std::vector<int32_t> eos_ids;  // from config.json (generation_config.json adds to these)
  int32_t bos_id = -1;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace kvad
