// The DeepSeek family: DeepSeek-V2, V2-Lite and V3 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM),
// whose attention is multi-head latent attention (MLA). One forward:
//   x = embed(tokens)
//   per layer: h = rmsnorm(x)
//              q = q_proj(h)  or  q_b_proj(rmsnorm(q_a_proj(h)))            [heads x (nope | rope)]
//              c | k_pe = kv_a_proj_with_mqa(h);  latent = rmsnorm(c) | rope(k_pe)   (one per position)
//              x += o_proj(latent attention of (q_nope | rope(q_pe)) through kv_b_proj)
//              x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)                    (dense layers)
//                or shared(h) + sum over h's top-k experts of weight x expert(h)   (routed: models/moe.h)
//   logits = lm_head(rmsnorm(x))
// The cache holds only each position's latent (kv_lora_rank + qk_rope_head_dim values a layer):
// kv_b_proj is absorbed into the queries and the attention's output (kernels/latent_attention.h)
// instead of expanding every head's keys and values. Rope is YaRN-scaled, on the rope dimensions
// only, over adjacent pairs (V3's rope_interleave = false: rotate-half), with YaRN's magnitude on
// cos/sin and on the softmax scale (models/rope.h), as the reference (../shared/peer/ref_forward.py)
// and DeepSeek's code do.
// Routed layers (from first_k_dense_replace on) run V2's softmax routing (greedy or limited to the
// best groups by their best expert, x routed_scaling_factor) or V3's sigmoid + bias choice (groups
// by their two best, renormalised): one rule in kernels/moe.h, parsed in models/moe.cpp. The
// shared experts are one MLP n_shared_experts x moe_intermediate_size wide. This file is the whole family (models/registry.h): config
// parser, tensor table, forward and synth presets.
#include <cmath>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/gguf_model.h"
#include "models/moe.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/weight_source.h"

namespace kvad {

namespace {

// A count that may be null or absent (then dflt), or 0 (DeepSeek's own "none" for q_lora_rank).
int64_t optional_count(const Json& j, const char* key, int64_t dflt, const std::string& what) {
  int64_t v = json_int_or(j, key, dflt, what);
  if (v < 0 || v > (int64_t)1 << 31) fail("{}: field '{}' must be a count from 0 to 2^31, got {}", what, key, v);
  return v;
}

void parse_mla(const Json& j, bool v3, const std::string& what, MlaConfig& m) {
  m.q_lora_rank = optional_count(j, "q_lora_rank", 0, what);  // null or 0: a plain q_proj (V2-Lite)
  m.kv_lora_rank = positive_field(j, "kv_lora_rank", what);
  m.qk_nope_head_dim = positive_field(j, "qk_nope_head_dim", what);
  m.qk_rope_head_dim = positive_field(j, "qk_rope_head_dim", what);
  m.v_head_dim = positive_field(j, "v_head_dim", what);
  for (int64_t d : {m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.v_head_dim})
    if (d > ConfigBounds::kMaxHeadDim)
      fail("{}: q_lora_rank, kv_lora_rank, qk_nope_head_dim and v_head_dim must be at most {}, got {}", what,
           ConfigBounds::kMaxHeadDim, d);
  if (m.qk_rope_head_dim % 2 || m.qk_rope_head_dim > ConfigBounds::kMaxHeadDim)
    fail("{}: qk_rope_head_dim ({}) must be even (rope turns pairs) and at most {}", what, m.qk_rope_head_dim,
         ConfigBounds::kMaxHeadDim);
  // transformers' V2 always rotates adjacent pairs; V3 by default, rotate-half when told not to.
  m.rope_interleave = !v3 || json_bool_or(j, "rope_interleave", true, what);
  m.attention_bias = json_bool_or(j, "attention_bias", false, what);
}

// rope_scaling (or newer transformers' rope_parameters): none or YaRN, as the reference knows.
void parse_rope(const Json& j, const std::string& what, ModelConfig& c) {
  const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling" : "rope_parameters";
  auto rs = j.find(key);
  if (rs == j.end() || rs->is_null()) return;
  std::string where = what + ": " + key;
  if (!rs->is_object()) fail("{}: must be an object", where);
  c.rope_theta = json_num_or(*rs, "rope_theta", c.rope_theta, where);
  std::string type = json_str_or(*rs, "rope_type", json_str_or(*rs, "type", "default", where), where);
  if (type == "default") return;
  if (type != "yarn") fail("{}: rope type '{}' is not supported for DeepSeek (default, yarn)", where, type);
  RopeScaling& s = c.rope_scaling;
  s.type = type;
  s.factor = json_num_or(*rs, "factor", 1, where);
  s.original_max_positions = json_int_or(*rs, "original_max_position_embeddings", c.max_positions, where);
  s.beta_fast = json_num_or(*rs, "beta_fast", 32, where);
  s.beta_slow = json_num_or(*rs, "beta_slow", 1, where);
  s.mscale = json_num_or(*rs, "mscale", 0, where);
  s.mscale_all_dim = json_num_or(*rs, "mscale_all_dim", 0, where);
  s.attention_factor = json_num_or(*rs, "attention_factor", 0, where);
  if (rs->contains("attention_factor") && !(*rs)["attention_factor"].is_null() && !(s.attention_factor > 0))
    fail("{}: attention_factor must be positive, got {}", where, s.attention_factor);
  s.truncate = json_bool_or(*rs, "truncate", true, where);
}

}  // namespace

ModelConfig parse_deepseek_config(const Json& j, const std::string& what) {
  ModelConfig c;
  c.architecture = architecture_field(j, what);
  const bool v3 = c.architecture == "DeepseekV3ForCausalLM" ||
                  (c.architecture.empty() && json_str_or(j, "model_type", "", what) == "deepseek_v3");
  c.model_type = json_str_or(j, "model_type", v3 ? "deepseek_v3" : "deepseek_v2", what);
  c.hidden = positive_field(j, "hidden_size", what);
  c.n_layers = positive_field(j, "num_hidden_layers", what);
  c.n_heads = positive_field(j, "num_attention_heads", what);
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null())
    positive_field(j, "num_key_value_heads", what);  // checked, unused: MLA shares one latent instead
  c.n_kv_heads = c.n_heads;
  c.intermediate = positive_field(j, "intermediate_size", what);
  c.vocab_size = positive_field(j, "vocab_size", what);
  c.max_positions = json_int_or(j, "max_position_embeddings", 2048, what);
  c.norm_eps = (float)json_num_or(j, "rms_norm_eps", 1e-6, what);
  c.rope_theta = json_num_or(j, "rope_theta", 10000.0, what);
  c.tie_embeddings = json_bool_or(j, "tie_word_embeddings", false, what);
  std::string act = json_str_or(j, "hidden_act", "silu", what);
  if (act != "silu") fail("{}: hidden_act '{}' is not supported for DeepSeek (only silu)", what, act);
  parse_mla(j, v3, what, c.mla);
  c.moe = parse_deepseek_moe_config(j, c.n_layers, v3, what);
  // V3 checkpoints carry their multi-token-prediction module as layers past the last one
  // (num_nextn_predict_layers of them): transformers does not run it, neither does kvad.
  const int64_t mtp = json_int_or(j, "num_nextn_predict_layers", 0, what);
  if (mtp < 0 || mtp > 64) fail("{}: num_nextn_predict_layers {} is out of range (0 to 64)", what, mtp);
  for (int64_t i = 0; i < mtp; i++) c.unused_tensors.push_back(fmt::format("model.layers.{}.", c.n_layers + i));
  parse_rope(j, what, c);
  c.head_dim = c.mla.qk_head_dim();  // a query's and a (naive) key's head: what q_dim() counts
  c.eos_ids = eos_ids_field(j, what);
  c.bos_id = bos_id_field(j, what);
  c.fp8_blocks = quantization_field(j, what);
  validate_config(c, what);
  return c;
}

namespace {

struct DeepseekLayer {
  std::vector<float> attn_norm, q_a_norm, kv_a_norm, mlp_norm, b_q_a, b_kv_a, b_o;
  std::vector<float> kv_b;  // kv_b_proj in f32: absorbed per head, never applied to the cache
  Weight wq, wq_a, wq_b, wkv_a, wo, gate, up, down;
  MoeWeights moe;                                 // routed layers: the experts and their router
  Weight shared_gate, shared_up, shared_down;     // routed layers: the always-on shared experts
};

// Where the loaded tensors live (DeepseekModel derives from it, so the forward reads them by name).
struct DeepseekWeights {
  Weight embed_, lm_head_;  // lm_head_ empty when tied
  std::vector<float> final_norm_;
  std::vector<DeepseekLayer> layers_;
};

// The tensors of layer l, appended to t (see deepseek_tensors). GGUF names are llama.cpp's deepseek2
// names where one tensor maps to one; kv_b_proj has none (the converter splits it per head).
void deepseek_layer_tensors(const ModelConfig& c, int64_t l, DeepseekLayer& L, TensorList& t) {
  const MlaConfig& m = c.mla;
  const int64_t H = c.hidden, I = c.intermediate, nh = c.n_heads, Q = nh * m.qk_head_dim();
  std::string p = "model.layers." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
  auto mat = [&](const char* hf, const char* gguf, int64_t rows, int64_t cols, Weight* to) {
    t.push_back(matrix_tensor(p + hf + ".weight", g + gguf + ".weight", rows, cols, to));
    t.back().adaptable = true;
  };
  auto vec = [&](const char* hf, const char* gguf, const char* suffix, int64_t n, TensorInit init,
                 std::vector<float>* to) {
    t.push_back(vector_tensor(p + hf + suffix, g + gguf + suffix, {n}, init, to));
  };
  vec("input_layernorm", "attn_norm", ".weight", H, TensorInit::One, &L.attn_norm);
  if (m.q_lora_rank == 0) {
    mat("self_attn.q_proj", "attn_q", Q, H, &L.wq);
  } else {
    mat("self_attn.q_a_proj", "attn_q_a", m.q_lora_rank, H, &L.wq_a);
    if (m.attention_bias) vec("self_attn.q_a_proj", "attn_q_a", ".bias", m.q_lora_rank, TensorInit::Normal, &L.b_q_a);
    vec("self_attn.q_a_layernorm", "attn_q_a_norm", ".weight", m.q_lora_rank, TensorInit::One, &L.q_a_norm);
    mat("self_attn.q_b_proj", "attn_q_b", Q, m.q_lora_rank, &L.wq_b);
  }
  mat("self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa", m.latent_width(), H, &L.wkv_a);
  if (m.attention_bias)
    vec("self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa", ".bias", m.latent_width(), TensorInit::Normal, &L.b_kv_a);
  vec("self_attn.kv_a_layernorm", "attn_kv_a_norm", ".weight", m.kv_lora_rank, TensorInit::One, &L.kv_a_norm);
  t.push_back(vector_tensor(p + "self_attn.kv_b_proj.weight", "",
                            {nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, TensorInit::Normal, &L.kv_b));
  mat("self_attn.o_proj", "attn_output", H, nh * m.v_head_dim, &L.wo);
  if (m.attention_bias) vec("self_attn.o_proj", "attn_output", ".bias", H, TensorInit::Normal, &L.b_o);
  vec("post_attention_layernorm", "ffn_norm", ".weight", H, TensorInit::One, &L.mlp_norm);
  if (c.moe.routed(l)) {
    moe_tensors(c, l, L.moe, t);
    if (const int64_t S = c.moe.shared_intermediate) {
      mat("mlp.shared_experts.gate_proj", "ffn_gate_shexp", S, H, &L.shared_gate);
      mat("mlp.shared_experts.up_proj", "ffn_up_shexp", S, H, &L.shared_up);
      mat("mlp.shared_experts.down_proj", "ffn_down_shexp", H, S, &L.shared_down);
    }
    return;
  }
  mat("mlp.gate_proj", "ffn_gate", I, H, &L.gate);
  mat("mlp.up_proj", "ffn_up", I, H, &L.up);
  mat("mlp.down_proj", "ffn_down", H, I, &L.down);
}

// THE tensor table of the family, in the order transformers saves them (see llama_tensors).
TensorList deepseek_tensors(const ModelConfig& c, DeepseekWeights& w) {
  const int64_t H = c.hidden, V = c.vocab_size;
  TensorList t;
  t.push_back(matrix_tensor("model.embed_tokens.weight", "token_embd.weight", V, H, &w.embed_));
  t.back().row_lookup = !c.tie_embeddings;
  for (int64_t l = 0; l < c.n_layers; l++) deepseek_layer_tensors(c, l, w.layers_[(size_t)l], t);
  t.push_back(vector_tensor("model.norm.weight", "output_norm.weight", {H}, TensorInit::One, &w.final_norm_));
  if (c.tie_embeddings)
    t.push_back(tied_tensor("lm_head.weight", "output.weight", "model.embed_tokens.weight", {V, H}));
  else
    t.push_back(matrix_tensor("lm_head.weight", "output.weight", V, H, &w.lm_head_));
  return t;
}

TensorList deepseek_tensor_names(const ModelConfig& c) {
  return table_without_destinations<DeepseekWeights>(c, deepseek_tensors);
}

class DeepseekModel : public Model, private DeepseekWeights {
 public:
  DeepseekModel(const ModelConfig& c, WeightSource& src) {
    config_ = c;
    layers_.resize((size_t)c.n_layers);
    TensorList table = deepseek_tensors(c, *this);
    load_tensors(table, src);
    sizes_ = loaded_stats(table);
    adaptable_ = adaptable_matrices(table);
    matrices_ = named_matrices(table);
    const MlaConfig& m = c.mla;
    inv_freq_ = rope_inv_freq(c, m.qk_rope_head_dim);
    rope_magnitude_ = yarn_attention_factor(c.rope_scaling);
    double scale = yarn_softmax_factor(c.rope_scaling) / std::sqrt((double)m.qk_head_dim());
    shape_ = {(int)c.n_heads, (int)m.qk_nope_head_dim, (int)m.qk_rope_head_dim, (int)m.kv_lora_rank, (int)m.v_head_dim,
              (float)scale};
  }

  // One latent row a position and layer: what the absorbed attention reads, nothing per head.
  MemorySpec memory_spec() const override { return MemorySpec::latent(config_.n_layers, config_.mla.latent_width()); }

  void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const override;

  std::string weight_format() const override { return embed_.format_name(); }

 private:
  const Weight& head() const { return lm_head_.empty() ? embed_ : lm_head_; }
  // q and the latent [c | k_pe] of layer L from the normed input h; rope applied, c normed.
  void project_attention_inputs(Backend& ops, const DeepseekLayer& L, Tensor h, Tensor q, Tensor qa, Tensor latent,
                                Tensor angles) const;

  std::vector<double> inv_freq_;
  double rope_magnitude_ = 1;
  kernels::LatentShape shape_{};
};

void DeepseekModel::project_attention_inputs(Backend& ops, const DeepseekLayer& L, Tensor h, Tensor q, Tensor qa,
                                             Tensor latent, Tensor angles) const {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  if (m.q_lora_rank == 0) {
    ops.linear_group(h, {{&L.wq, q}, {&L.wkv_a, latent}});
  } else {
    ops.linear_group(h, {{&L.wq_a, qa}, {&L.wkv_a, latent}});
    if (m.attention_bias) ops.add_bias(qa, L.b_q_a);
    ops.rmsnorm(qa, L.q_a_norm, c.norm_eps, qa);
    ops.linear(L.wq_b, qa, q);
  }
  if (m.attention_bias) ops.add_bias(latent, L.b_kv_a);
  Tensor ckv = latent.cols_view(0, m.kv_lora_rank);
  ops.rmsnorm(ckv, L.kv_a_norm, c.norm_eps, ckv);
  RopePairs pairs = m.rope_interleave ? RopePairs::Adjacent : RopePairs::Half;
  ops.rope_part(latent, 1, m.kv_lora_rank, m.qk_rope_head_dim, pairs, angles);  // k_pe: one key shared by every head
  ops.rope_part(q, c.n_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, pairs, angles);
}

void DeepseekModel::forward(const Batch& b, Memory& memory, Backend& ops, float* logits) const {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const int64_t n = b.size(), H = c.hidden, I = c.intermediate;
  check_positions(b);
  ops.begin_forward(b);
  Tensor x = ops.tensor(n, H), xn = ops.tensor(n, H), q = ops.tensor(n, c.n_heads * m.qk_head_dim()),
         qa = m.q_lora_rank ? ops.tensor(n, m.q_lora_rank) : Tensor{}, latent = ops.tensor(n, m.latent_width()),
         att = ops.tensor(n, c.n_heads * m.v_head_dim), g = ops.tensor(n, I), u = ops.tensor(n, I),
         angles = ops.tensor(n, m.qk_rope_head_dim);
  const int64_t S = c.moe.shared_intermediate;
  Tensor routed = c.moe.n_experts ? ops.tensor(n, H) : Tensor{}, sg = S ? ops.tensor(n, S) : Tensor{},
         su = S ? ops.tensor(n, S) : Tensor{};
  ops.embed(embed_, b, x);
  ops.rope_table(b, inv_freq_, angles, rope_magnitude_);  // every row's position, shared by all layers

  for (int64_t l = 0; l < c.n_layers; l++) {
    const DeepseekLayer& L = layers_[(size_t)l];
    ops.rmsnorm(x, L.attn_norm, c.norm_eps, xn);
    project_attention_inputs(ops, L, xn, q, qa, latent, angles);
    ops.latent_attention(memory, l, b, shape_, L.kv_b, q, latent, att);
    ops.linear(L.wo, att, xn);
    if (m.attention_bias) ops.add_bias(xn, L.b_o);
    ops.add(x, xn);

    ops.rmsnorm(x, L.mlp_norm, c.norm_eps, xn);
    if (c.moe.routed(l)) {
      ops.moe(L.moe, c.moe.routing, xn, routed);
      if (S) {
        ops.linear_group(xn, {{&L.shared_gate, sg}, {&L.shared_up, su}});
        ops.silu_mul(sg, su);
        ops.linear(L.shared_down, sg, xn);
        ops.add(x, xn);
      }
      ops.add(x, routed);
      continue;
    }
    ops.linear_group(xn, {{&L.gate, g}, {&L.up, u}});
    ops.silu_mul(g, u);
    ops.linear(L.down, g, xn);
    ops.add(x, xn);
  }

  rmsnorm_head_outputs(ops, b, x, final_norm_, head(), logits);
}

// ------------------------------------------------------------------------------------------------
// GGUF: llama.cpp's deepseek2 files (V2, V2-Lite and V3 alike; V3 is told by its sigmoid gating).
// llama.cpp writes MLA as one KV head and splits kv_b_proj per head into attn_k_b (transposed)
// and attn_v_b; the derive step joins them back into kv_b_proj, which this family absorbs itself.

const std::vector<GgufConfigKey> kDeepseekGgufKeys = {
    {"embedding_length", "hidden_size", GgufKeyKind::Count, true},
    {"block_count", "num_hidden_layers", GgufKeyKind::Count, true},
    {"feed_forward_length", "intermediate_size", GgufKeyKind::Count, true},
    {"attention.head_count", "num_attention_heads", GgufKeyKind::Count, true},
    {"context_length", "max_position_embeddings", GgufKeyKind::Count, true},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", GgufKeyKind::Float, true},
    {"rope.freq_base", "rope_theta", GgufKeyKind::Float, false},
    {"attention.q_lora_rank", "q_lora_rank", GgufKeyKind::Count, false},  // absent: V2-Lite's plain q_proj
    {"attention.kv_lora_rank", "kv_lora_rank", GgufKeyKind::Count, true},
    {"rope.dimension_count", "qk_rope_head_dim", GgufKeyKind::Count, true},
    {"attention.value_length_mla", "v_head_dim", GgufKeyKind::Count, true},
    {"expert_count", "n_routed_experts", GgufKeyKind::Count, false},
    {"expert_used_count", "num_experts_per_tok", GgufKeyKind::Count, false},
    {"expert_feed_forward_length", "moe_intermediate_size", GgufKeyKind::Count, false},
    {"expert_weights_scale", "routed_scaling_factor", GgufKeyKind::Float, false},
    {"expert_group_count", "n_group", GgufKeyKind::Count, false},
    {"expert_group_used_count", "topk_group", GgufKeyKind::Count, false},
};

// A count that may be 0 (leading_dense_block_count, expert_shared_count).
int64_t gguf_count_or_zero(const GgufFile& f, const std::string& key) {
  int64_t v = f.get_int(key).value_or(0);
  if (v < 0 || v > ((int64_t)1 << 31)) fail("{}: metadata '{}' = {} is out of range", f.what(), key, v);
  return v;
}

void deepseek_gguf_finish(const GgufFile& f, const std::string& A, Json& c) {
  const int64_t rope = c["qk_rope_head_dim"], key_mla = gguf_count(f, A + ".attention.key_length_mla");
  if (key_mla <= rope) fail("{}: attention.key_length_mla ({}) must exceed rope.dimension_count ({})", f.what(), key_mla, rope);
  c["qk_nope_head_dim"] = key_mla - rope;
  c["hidden_act"] = "silu";
  c["tie_word_embeddings"] = f.tensor("output.weight") == nullptr;
  c["first_k_dense_replace"] = gguf_count_or_zero(f, A + ".leading_dense_block_count");
  c["n_shared_experts"] = gguf_count_or_zero(f, A + ".expert_shared_count");
  c["norm_topk_prob"] = f.get_bool(A + ".expert_weights_norm").value_or(false);
  // llama.cpp's gating ids: 1 softmax (V2), 2 sigmoid (V3, with its choice bias exp_probs_b).
  const int64_t gating = f.get_int(A + ".expert_gating_func").value_or(1);
  if (gating != 1 && gating != 2) fail("{}: expert_gating_func {} is not softmax (1) or sigmoid (2)", f.what(), gating);
  if (gating == 2) {
    c["architectures"] = {"DeepseekV3ForCausalLM"};
    c["model_type"] = "deepseek_v3";
    c["scoring_func"] = "sigmoid";
    c["topk_method"] = "noaux_tc";
  } else {
    c["scoring_func"] = "softmax";
    // The file does not say how V2 ranks groups: the reference's rule (a group's best), not
    // llama.cpp's (the sum of its two best), as ../shared/peer/README.md records.
    c["topk_method"] = c.value("n_group", 1) > 1 ? "group_limited_greedy" : "greedy";
  }
  const std::string type = f.get_string(A + ".rope.scaling.type").value_or("none");
  if (type == "yarn") {
    // yarn_log_multiplier is 0.1 x mscale_all_dim (llama.cpp's converter); llama.cpp takes mscale = mscale_all_dim.
    const double mscale = f.get_float(A + ".rope.scaling.yarn_log_multiplier").value_or(0) / 0.1;
    c["rope_scaling"] = {{"type", "yarn"}, {"factor", f.get_float(A + ".rope.scaling.factor").value_or(1)},
                         {"original_max_position_embeddings",
                          gguf_count(f, A + ".rope.scaling.original_context_length")},
                         {"mscale", mscale}, {"mscale_all_dim", mscale},
                         {"beta_fast", f.get_float(A + ".rope.scaling.yarn_beta_fast").value_or(32)},
                         {"beta_slow", f.get_float(A + ".rope.scaling.yarn_beta_slow").value_or(1)}};
  } else if (type != "none") {
    fail("{}: rope scaling '{}' is not supported for deepseek2 (none, yarn)", f.what(), type);
  }
}

// kv_b_proj [heads x (nope + v), kv_rank] from attn_k_b [heads, kv_rank, nope] (each head's K part
// transposed) and attn_v_b [heads, v, kv_rank], in f32 (the family keeps kv_b_proj f32).
void deepseek_gguf_derive(GgufCheckpoint& ck, const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t nh = c.n_heads, r = m.kv_lora_rank, dn = m.qk_nope_head_dim, dv = m.v_head_dim;
  for (int64_t l = 0; l < c.n_layers; l++) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const std::vector<float> kb = to_f32(ck.get(g + "attn_k_b.weight", {nh, r, dn})),
                             vb = to_f32(ck.get(g + "attn_v_b.weight", {nh, dv, r}));
    auto bytes = std::make_shared<std::vector<uint8_t>>((size_t)(nh * (dn + dv) * r) * sizeof(float));
    float* kv = reinterpret_cast<float*>(bytes->data());
    for (int64_t h = 0; h < nh; h++) {
      float* head = kv + h * (dn + dv) * r;
      for (int64_t i = 0; i < dn; i++)
        for (int64_t j = 0; j < r; j++) head[i * r + j] = kb[(size_t)((h * r + j) * dn + i)];
      std::copy_n(vb.data() + h * dv * r, dv * r, head + dn * r);
    }
    TensorView v;
    v.name = "model.layers." + std::to_string(l) + ".self_attn.kv_b_proj.weight";
    v.dtype = DType::F32;
    v.shape = {nh * (dn + dv), r};
    v.file = ck.description() + " (" + g + "attn_k_b + attn_v_b)";
    ck.add_derived(std::move(v), std::move(bytes));
  }
}

GgufDescription deepseek_gguf() {
  GgufDescription d{"deepseek2", kDeepseekGgufKeys, deepseek_gguf_finish, false, {}};
  d.derive = deepseek_gguf_derive;
  return d;
}

// ------------------------------------------------------------------------------------------------
// Synth presets: the peer's tiny shapes (../shared/peer/synth.py; the Qwen3 tokenizer stands in for
// DeepSeek's there, as their goldens were made with its ids), each also as a dense variant of 2 layers (n_routed_experts null) that runs until
// the MoE layers do. The V2 dense variant sets mscale 1.0 against mscale_all_dim 0.707, so that
// YaRN's attention factor on cos/sin is not 1 in at least one golden.

Json yarn(double mscale, double mscale_all_dim) {
  return {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", mscale}, {"mscale_all_dim", mscale_all_dim},
          {"original_max_position_embeddings", 4096}, {"type", "yarn"}};
}

Json tiny_deepseek(int64_t layers, Json q_lora_rank, int64_t experts, int64_t shared, int64_t top_k, int64_t groups,
                   const char* method, const char* scoring, bool norm_topk, double scaling, Json rope_scaling) {
  return {{"hidden_size", 64}, {"intermediate_size", 160}, {"moe_intermediate_size", 32},
          {"num_hidden_layers", layers}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
          {"q_lora_rank", q_lora_rank}, {"kv_lora_rank", 32}, {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8},
          {"v_head_dim", 16}, {"n_routed_experts", experts}, {"n_shared_experts", shared},
          {"num_experts_per_tok", top_k}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"n_group", groups},
          {"topk_group", groups == 1 ? 1 : 2}, {"topk_method", method}, {"scoring_func", scoring},
          {"norm_topk_prob", norm_topk}, {"routed_scaling_factor", scaling}, {"max_position_embeddings", 163840},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 10000}, {"rope_scaling", rope_scaling},
          {"tie_word_embeddings", false}, {"vocab_size", 151936}, {"bos_token_id", 151643}, {"eos_token_id", 151645}};
}

// A real model's shape (the public config.json's keys): for counts and `kvad synth` at full size.
// V3 comes with DeepSeek-V3's own tokenizer (tests/fixtures/tokenizers/deepseek_v3); V2's is not
// bundled, so those write token ids only.
Json real_deepseek(int64_t hidden, int64_t inter, int64_t expert_inter, int64_t layers, int64_t heads, Json q_lora_rank,
                   int64_t experts, int64_t shared, int64_t top_k, int64_t first_dense, int64_t groups,
                   int64_t top_groups, const char* method, const char* scoring, bool norm_topk, double scaling,
                   double mscale, int64_t vocab, int64_t bos, int64_t eos) {
  Json c = tiny_deepseek(layers, q_lora_rank, experts, shared, top_k, groups, method, scoring, norm_topk, scaling,
                         yarn(mscale, mscale));
  c.update({{"hidden_size", hidden}, {"intermediate_size", inter}, {"moe_intermediate_size", expert_inter},
            {"num_attention_heads", heads}, {"num_key_value_heads", heads}, {"kv_lora_rank", 512},
            {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128},
            {"first_k_dense_replace", first_dense}, {"topk_group", top_groups}, {"vocab_size", vocab},
            {"bos_token_id", bos}, {"eos_token_id", eos}});
  return c;
}

SynthPreset dense_variant(SynthPreset p) {
  p.name += "-dense";
  p.config["n_routed_experts"] = nullptr;
  p.config["num_hidden_layers"] = 2;
  return p;
}

std::vector<SynthPreset> deepseek_v2_presets() {
  // V2-Lite: no q_lora; 27 layers because llama.cpp reads a GGUF without q_lora_rank as "lite" only then.
  SynthPreset lite{"tiny-deepseek-v2-lite", "qwen3",
                   tiny_deepseek(27, nullptr, 8, 2, 3, 1, "greedy", "softmax", false, 1.0, yarn(0.707, 0.707))};
  SynthPreset v2{"tiny-deepseek-v2", "qwen3",
                 tiny_deepseek(3, 48, 16, 2, 4, 4, "group_limited_greedy", "softmax", false, 16.0, yarn(0.707, 0.707))};
  SynthPreset v2_dense = dense_variant(v2);
  v2_dense.config["rope_scaling"] = yarn(1.0, 0.707);
  SynthPreset real_lite{"deepseek-v2-lite", "",
                        real_deepseek(2048, 10944, 1408, 27, 16, nullptr, 64, 2, 6, 1, 1, 1, "greedy", "softmax",
                                      false, 1.0, 0.707, 102400, 100000, 100001)};
  SynthPreset real_v2{"deepseek-v2", "",
                      real_deepseek(5120, 12288, 1536, 60, 128, 1536, 160, 2, 6, 1, 8, 3, "group_limited_greedy",
                                    "softmax", false, 16.0, 0.707, 102400, 100000, 100001)};
  // V2's layout on the 512-token tokenizer, for small GGUF fixtures; greedy routing, where
  // llama.cpp computes what the reference does (its group-limited rule differs: peer README).
  SynthPreset v512{"tiny-v512", "gpt2-trim512", v2.config};
  v512.config.update({{"vocab_size", 512}, {"bos_token_id", 511}, {"eos_token_id", 511}, {"topk_method", "greedy"},
                      {"n_group", 1}, {"topk_group", 1}});
  // A V2-Lite-shaped model that fits here, for benchmarks against llama.cpp ("bench-lite": 27 layers, as
  // llama.cpp reads a GGUF without q_lora_rank as Lite only then; 32 experts top-4 + 2 shared,
  // 0.37 B parameters, ~0.1 GB read per token at q8) on the 512-token tokenizer.
  SynthPreset bench{"bench-lite", "gpt2-trim512",
                    real_deepseek(512, 1536, 256, 27, 8, nullptr, 32, 2, 4, 1, 1, 1, "greedy", "softmax", false, 1.0,
                                  0.707, 512, 511, 511)};
  bench.config.update({{"kv_lora_rank", 128}, {"qk_nope_head_dim", 64}, {"qk_rope_head_dim", 32}, {"v_head_dim", 64}});
  return {real_lite, real_v2, lite, v2, dense_variant(lite), v2_dense, v512, bench};
}

std::vector<SynthPreset> deepseek_v3_presets() {
  SynthPreset v3{"tiny-deepseek-v3", "qwen3",
                 tiny_deepseek(3, 48, 16, 1, 4, 4, "noaux_tc", "sigmoid", true, 2.5, yarn(1.0, 1.0))};
  SynthPreset real_v3{"deepseek-v3", "deepseek_v3",
                      real_deepseek(7168, 18432, 2048, 61, 128, 1536, 256, 1, 8, 3, 8, 4, "noaux_tc", "sigmoid", true,
                                    2.5, 1.0, 129280, 0, 1)};
  // The tiny V3 shape with the real vocabulary and DeepSeek's own tokenizer (its 128815 ids in the
  // 129280 rows, BOS 0, EOS 1): the V3 preset's tokenizer running end to end at a size tests write.
  SynthPreset v3_tok{"tiny-deepseek-v3-tok", "deepseek_v3", v3.config};
  v3_tok.config.update({{"vocab_size", 129280}, {"bos_token_id", 0}, {"eos_token_id", 1}});
  return {real_v3, v3, dense_variant(v3), v3_tok};
}

std::unique_ptr<Model> load_deepseek(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<DeepseekModel>(config, src);
}

Architecture deepseek_architecture(const char* name, const char* type) {
  Architecture a{name, type, parse_deepseek_config, load_deepseek, deepseek_tensor_names, {"rotary_emb.inv_freq"},
                 Json::object(), std::nullopt, {}};
  // Keys of the official DeepSeek config.json files beyond the shape (as the peer's synth writes them).
  a.config_defaults = {{"hidden_act", "silu"}, {"attention_bias", false}, {"attention_dropout", 0.0},
                       {"initializer_range", 0.02}, {"aux_loss_alpha", 0.001}, {"pretraining_tp", 1},
                       {"seq_aux", true}};
  return a;
}

}  // namespace

std::vector<Architecture> deepseek_family() {
  Architecture v2 = deepseek_architecture("DeepseekV2ForCausalLM", "deepseek_v2"),
               v3 = deepseek_architecture("DeepseekV3ForCausalLM", "deepseek_v3");
  v2.gguf = deepseek_gguf();  // one GGUF architecture for both: the finish step names V3 when it is
  v2.presets = deepseek_v2_presets();
  v3.presets = deepseek_v3_presets();
  return {v2, v3};
}

}  // namespace kvad
