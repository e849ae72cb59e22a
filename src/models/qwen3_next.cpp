// The Qwen3-Next family (Qwen3NextForCausalLM): a hybrid stack of gated DeltaNet layers (linear
// attention with a fixed-size recurrent state) and gated full attention every
// full_attention_interval layers, with MoE MLPs. One forward:
//   x = embed(tokens)
//   per layer: h = rmsnorm1p(x)                                     (rmsnorm1p: x / rms(x) * (1 + w))
//     linear:  x += out_proj(gated DeltaNet of in_proj_qkvz(h), in_proj_ba(h))   (kernels/gated_delta.h)
//     full:    q | gate = q_proj(h) per head;  q = rope(rmsnorm1p(q)), k = rope(rmsnorm1p(k_proj(h)))
//              x += o_proj(attention(q, k, v_proj(h)) * sigmoid(gate))    (rope on the first rotary dims)
//     h = rmsnorm1p(x);  x += sum over h's top-k experts of weight x expert(h)
//                            + sigmoid(shared_expert_gate(h)) x shared_expert(h)      (routed layers)
//                       or x += down(silu(gate(h)) * up(h))                             (mlp_only_layers)
//   logits = lm_head(rmsnorm1p(x))
// The (1 + w) norms are held as 1 + w, so the forward uses the ordinary RMSNorm (llama.cpp's
// converter stores them the same way). The DeltaNet layers keep their state in the Recurrent
// memory kind: one slot per sequence, which cannot rewind (runtime/block_manager.h: truncation
// lands on a snapshot or at 0). This file is the whole family (models/registry.h): config parser,
// tensor table, forward, GGUF translation and synth presets. Semantics follow transformers'
// modeling_qwen3_next.py as the peer's float64 reference (../shared/peer/ref_forward.py) does.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/gguf_model.h"
#include "models/moe.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/weight_source.h"

namespace kvad {

namespace {

void parse_layer_types(const Json& j, const std::string& what, ModelConfig& c) {
  DeltaNetConfig& d = c.delta;
  d.linear.assign((size_t)std::clamp<int64_t>(c.n_layers, 0, ConfigBounds::kMaxLayers), false);
  auto types = j.find("layer_types");
  if (types == j.end() || types->is_null()) {  // transformers' default pattern
    const int64_t every = json_int_or(j, "full_attention_interval", 4, what);
    if (every < 1 || every > ConfigBounds::kMaxLayers) fail("{}: full_attention_interval {} is out of range", what, every);
    for (size_t l = 0; l < d.linear.size(); l++) d.linear[l] = (int64_t)(l + 1) % every != 0;
    return;
  }
  if (!types->is_array() || (int64_t)types->size() != c.n_layers)
    fail("{}: layer_types must be a list of num_hidden_layers ({}) names", what, c.n_layers);
  for (size_t l = 0; l < d.linear.size(); l++) {
    const Json& t = (*types)[l];
    if (!t.is_string() || (t != "linear_attention" && t != "full_attention"))
      fail("{}: layer_types[{}] is '{}', not linear_attention or full_attention", what, l, json_snippet(t));
    d.linear[l] = t == "linear_attention";
  }
}

void parse_delta_net(const Json& j, const std::string& what, DeltaNetConfig& d) {
  auto count = [&](const char* key, int64_t dflt, int64_t max) {
    const int64_t v = json_int_or(j, key, dflt, what);
    if (v < 1 || v > max) fail("{}: {} must be from 1 to {}, got {}", what, key, max, v);
    return v;
  };
  // transformers' Qwen3NextConfig defaults (the 80B-A3B's shape).
  d.key_heads = count("linear_num_key_heads", 16, ConfigBounds::kMaxHeads);
  d.value_heads = count("linear_num_value_heads", 32, ConfigBounds::kMaxHeads);
  d.key_dim = count("linear_key_head_dim", 128, ConfigBounds::kMaxHeadDim);
  d.value_dim = count("linear_value_head_dim", 128, kernels::kMaxDeltaValueDim);
  d.conv_kernel = count("linear_conv_kernel_dim", 4, 64);
  if (d.value_heads % d.key_heads)
    fail("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", what, d.value_heads,
         d.key_heads);
}

}  // namespace

ModelConfig parse_qwen3_next_config(const Json& j, const std::string& what) {
  ModelConfig c;
  c.architecture = architecture_field(j, what);
  c.model_type = json_str_or(j, "model_type", "qwen3_next", what);
  c.hidden = positive_field(j, "hidden_size", what);
  c.n_layers = positive_field(j, "num_hidden_layers", what);
  c.n_heads = positive_field(j, "num_attention_heads", what);
  c.n_kv_heads = positive_field(j, "num_key_value_heads", what);
  c.head_dim = json_int_or(j, "head_dim", 256, what);
  c.intermediate = positive_field(j, "intermediate_size", what);
  c.vocab_size = positive_field(j, "vocab_size", what);
  c.max_positions = json_int_or(j, "max_position_embeddings", 32768, what);
  c.norm_eps = (float)json_num_or(j, "rms_norm_eps", 1e-6, what);
  c.rope_theta = json_num_or(j, "rope_theta", 10000.0, what);
  c.tie_embeddings = json_bool_or(j, "tie_word_embeddings", false, what);
  const std::string act = json_str_or(j, "hidden_act", "silu", what);
  if (act != "silu") fail("{}: hidden_act '{}' is not supported for Qwen3-Next (only silu)", what, act);
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null())
    fail("{}: rope_scaling is not supported for Qwen3-Next (the released models have none)", what);
  const double partial = json_num_or(j, "partial_rotary_factor", 0.25, what);
  if (!(partial > 0) || partial > 1) fail("{}: partial_rotary_factor {} must be in (0, 1]", what, partial);
  c.rotary_dims = (int64_t)((double)c.head_dim * partial);  // int(head_dim * factor), as transformers
  if (c.rotary_dims < 2 || c.rotary_dims % 2)
    fail("{}: head_dim x partial_rotary_factor = {} rotary dimensions (must be even and at least 2)", what,
         c.rotary_dims);
  c.qk_norm = true;
  parse_delta_net(j, what, c.delta);
  parse_layer_types(j, what, c);
  c.moe = parse_qwen_moe_config(j, c.n_layers, what);
  if (c.moe.n_experts) {
    c.moe.shared_intermediate = json_int_or(j, "shared_expert_intermediate_size", 0, what);
    if (c.moe.shared_intermediate < 0 || c.moe.shared_intermediate > ConfigBounds::kMaxIntermediate)
      fail("{}: shared_expert_intermediate_size {} is out of range", what, c.moe.shared_intermediate);
    c.moe.shared_gate = c.moe.shared_intermediate > 0;
  }
  // The multi-token-prediction head (mtp.*) is not run, as transformers does not.
  c.unused_tensors.push_back("mtp.");
  c.eos_ids = eos_ids_field(j, what);
  c.bos_id = bos_id_field(j, what);
  c.fp8_blocks = quantization_field(j, what);
  validate_config(c, what);
  return c;
}

namespace {

struct NextLayer {
  std::vector<float> attn_norm, mlp_norm;  // held as 1 + w
  // gated DeltaNet
  Weight qkvz, ba, out;
  std::vector<float> conv, a_log, dt_bias, delta_norm, decay;  // decay = -exp(A_log), computed at load
  // gated full attention
  Weight wq, wk, wv, wo;
  std::vector<float> q_norm, k_norm;  // held as 1 + w
  // MLP: routed experts + gated shared expert, or dense
  MoeWeights moe;
  Weight shared_gate, shared_up, shared_down, shared_expert_gate;
  Weight gate, up, down;
};

struct NextWeights {
  Weight embed_, lm_head_;
  std::vector<float> final_norm_;  // held as 1 + w
  std::vector<NextLayer> layers_;
};

// The tensors of layer l. GGUF names are llama.cpp's qwen3next names where the converter copies a
// tensor as it is; the others (regrouped qkvz, reshaped conv, -exp(A_log), norms stored as 1 + w)
// have none and are rebuilt from the file by qwen3_next_gguf_derive.
void next_layer_tensors(const ModelConfig& c, int64_t l, NextLayer& L, TensorList& t) {
  const DeltaNetConfig& d = c.delta;
  const int64_t H = c.hidden, hd = c.head_dim;
  const std::string p = "model.layers." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
  auto mat = [&](const std::string& hf, const std::string& gguf, int64_t rows, int64_t cols, Weight* to) {
    t.push_back(matrix_tensor(p + hf + ".weight", gguf.empty() ? "" : g + gguf + ".weight", rows, cols, to));
    t.back().adaptable = true;
  };
  auto vec = [&](const std::string& hf, const std::string& gguf, std::vector<int64_t> shape, TensorInit init,
                 std::vector<float>* to) {
    t.push_back(vector_tensor(p + hf, gguf.empty() ? "" : g + gguf, std::move(shape), init, to));
  };
  vec("input_layernorm.weight", "", {H}, TensorInit::Zero, &L.attn_norm);
  if (d.is_linear(l)) {
    const kernels::DeltaNetShape s{(int)d.key_heads, (int)d.value_heads, (int)d.key_dim, (int)d.value_dim,
                                   (int)d.conv_kernel, c.norm_eps};
    mat("linear_attn.in_proj_qkvz", "", s.qkvz_width(), H, &L.qkvz);
    mat("linear_attn.in_proj_ba", "ssm_ba", s.ba_width(), H, &L.ba);
    vec("linear_attn.conv1d.weight", "", {s.conv_channels(), 1, d.conv_kernel}, TensorInit::Normal, &L.conv);
    vec("linear_attn.dt_bias", "ssm_dt.bias", {d.value_heads}, TensorInit::One, &L.dt_bias);
    vec("linear_attn.A_log", "", {d.value_heads}, TensorInit::Zero, &L.a_log);
    vec("linear_attn.norm.weight", "ssm_norm.weight", {d.value_dim}, TensorInit::One, &L.delta_norm);
    mat("linear_attn.out_proj", "ssm_out", H, s.out_width(), &L.out);
  } else {
    mat("self_attn.q_proj", "attn_q", 2 * c.n_heads * hd, H, &L.wq);  // per head: query | output gate
    mat("self_attn.k_proj", "attn_k", c.kv_dim(), H, &L.wk);
    mat("self_attn.v_proj", "attn_v", c.kv_dim(), H, &L.wv);
    mat("self_attn.o_proj", "attn_output", H, c.q_dim(), &L.wo);
    vec("self_attn.q_norm.weight", "", {hd}, TensorInit::Zero, &L.q_norm);
    vec("self_attn.k_norm.weight", "", {hd}, TensorInit::Zero, &L.k_norm);
  }
  vec("post_attention_layernorm.weight", "", {H}, TensorInit::Zero, &L.mlp_norm);
  if (c.moe.routed(l)) {
    moe_tensors(c, l, L.moe, t);
    if (const int64_t S = c.moe.shared_intermediate) {
      mat("mlp.shared_expert.gate_proj", "ffn_gate_shexp", S, H, &L.shared_gate);
      mat("mlp.shared_expert.up_proj", "ffn_up_shexp", S, H, &L.shared_up);
      mat("mlp.shared_expert.down_proj", "ffn_down_shexp", H, S, &L.shared_down);
      mat("mlp.shared_expert_gate", "ffn_gate_inp_shexp", 1, H, &L.shared_expert_gate);
    }
    return;
  }
  mat("mlp.gate_proj", "ffn_gate", c.intermediate, H, &L.gate);
  mat("mlp.up_proj", "ffn_up", c.intermediate, H, &L.up);
  mat("mlp.down_proj", "ffn_down", H, c.intermediate, &L.down);
}

// THE tensor table of the family, in the order transformers saves them.
TensorList next_tensors(const ModelConfig& c, NextWeights& w) {
  const int64_t H = c.hidden, V = c.vocab_size;
  TensorList t;
  t.push_back(matrix_tensor("model.embed_tokens.weight", "token_embd.weight", V, H, &w.embed_));
  t.back().row_lookup = !c.tie_embeddings;
  for (int64_t l = 0; l < c.n_layers; l++) next_layer_tensors(c, l, w.layers_[(size_t)l], t);
  t.push_back(vector_tensor("model.norm.weight", "", {H}, TensorInit::Zero, &w.final_norm_));
  if (c.tie_embeddings)
    t.push_back(tied_tensor("lm_head.weight", "output.weight", "model.embed_tokens.weight", {V, H}));
  else
    t.push_back(matrix_tensor("lm_head.weight", "output.weight", V, H, &w.lm_head_));
  return t;
}

TensorList next_tensor_names(const ModelConfig& c) { return table_without_destinations<NextWeights>(c, next_tensors); }

void add_one(std::vector<float>& w) {
  for (float& x : w) x += 1.0f;
}

class Qwen3NextModel : public Model, private NextWeights {
 public:
  Qwen3NextModel(const ModelConfig& c, WeightSource& src) {
    config_ = c;
    layers_.resize((size_t)c.n_layers);
    TensorList table = next_tensors(c, *this);
    load_tensors(table, src);
    sizes_ = loaded_stats(table);
    adaptable_ = adaptable_matrices(table);
    matrices_ = named_matrices(table);
    inv_freq_ = rope_inv_freq(c, c.rotary_dims);
    const DeltaNetConfig& d = c.delta;
    shape_ = {(int)d.key_heads, (int)d.value_heads, (int)d.key_dim, (int)d.value_dim, (int)d.conv_kernel, c.norm_eps};
    add_one(final_norm_);
    for (NextLayer& L : layers_) {
      add_one(L.attn_norm);
      add_one(L.mlp_norm);
      add_one(L.q_norm);
      add_one(L.k_norm);
      for (float a : L.a_log) L.decay.push_back(-std::exp(a));
    }
  }

  MemorySpec memory_spec() const override {
    MemorySpec m;
    for (int64_t l = 0; l < config_.n_layers; l++)
      m.layers.push_back(config_.delta.is_linear(l) ? MemorySpec::recurrent_layer(shape_.state_floats())
                                                    : MemorySpec::attention_layer(config_.n_kv_heads, config_.head_dim));
    return m;
  }

  void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const override;
  std::string weight_format() const override { return embed_.format_name(); }

 private:
  const Weight& head() const { return lm_head_.empty() ? embed_ : lm_head_; }
  struct Scratch;
  void delta_net(Backend& ops, const NextLayer& L, int64_t l, const Batch& b, Memory& memory, Scratch& s) const;
  void full_attention(Backend& ops, const NextLayer& L, int64_t l, const Batch& b, Memory& memory, Scratch& s) const;
  void mlp(Backend& ops, const NextLayer& L, int64_t l, Scratch& s) const;

  std::vector<double> inv_freq_;
  kernels::DeltaNetShape shape_{};
};

// The activations of one forward (from the backend's arena).
struct Qwen3NextModel::Scratch {
  Tensor x, xn, qkvz, ba, delta_out, qg, q, k, v, att, angles, routed, sg, su, gate_logit, g, u;
};

void Qwen3NextModel::delta_net(Backend& ops, const NextLayer& L, int64_t l, const Batch& b, Memory& memory,
                               Scratch& s) const {
  ops.linear_group(s.xn, {{&L.qkvz, s.qkvz}, {&L.ba, s.ba}});
  const kernels::DeltaNetWeights w{L.conv.data(), L.decay.data(), L.dt_bias.data(), L.delta_norm.data()};
  ops.gated_delta_net(memory, l, b, shape_, w, s.qkvz, s.ba, s.delta_out);
  ops.linear(L.out, s.delta_out, s.xn);
}

void Qwen3NextModel::full_attention(Backend& ops, const NextLayer& L, int64_t l, const Batch& b, Memory& memory,
                                    Scratch& s) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size(), hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads;
  ops.linear_group(s.xn, {{&L.wq, s.qg}, {&L.wk, s.k}, {&L.wv, s.v}});
  Tensor heads = s.qg.reshape(n * nh, 2 * hd);  // each head's query, then its output gate
  ops.rmsnorm(heads.cols_view(0, hd), L.q_norm, c.norm_eps, s.q.reshape(n * nh, hd));
  ops.rmsnorm(s.k.reshape(n * nkv, hd), L.k_norm, c.norm_eps, s.k.reshape(n * nkv, hd));
  ops.rope_part(s.q, nh, 0, c.rotary_dims, RopePairs::Half, s.angles);
  ops.rope_part(s.k, nkv, 0, c.rotary_dims, RopePairs::Half, s.angles);
  const kernels::AttentionShape shape{(int)nh, (int)nkv, (int)hd, (float)(1.0 / std::sqrt((double)hd))};
  ops.attention(memory, l, b, shape, s.q, s.k, s.v, s.att);
  ops.sigmoid_gate(s.att.reshape(n * nh, hd), heads.cols_view(hd, hd));
  ops.linear(L.wo, s.att, s.xn);
}

void Qwen3NextModel::mlp(Backend& ops, const NextLayer& L, int64_t l, Scratch& s) const {
  const ModelConfig& c = config_;
  if (!c.moe.routed(l)) {
    ops.linear_group(s.xn, {{&L.gate, s.g}, {&L.up, s.u}});
    ops.silu_mul(s.g, s.u);
    ops.linear(L.down, s.g, s.xn);
    ops.add(s.x, s.xn);
    return;
  }
  ops.moe(L.moe, c.moe.routing, s.xn, s.routed);
  if (c.moe.shared_intermediate) {
    ops.linear_group(s.xn, {{&L.shared_gate, s.sg}, {&L.shared_up, s.su}, {&L.shared_expert_gate, s.gate_logit}});
    ops.silu_mul(s.sg, s.su);
    ops.linear(L.shared_down, s.sg, s.xn);
    ops.sigmoid_gate(s.xn, s.gate_logit);
    ops.add(s.x, s.xn);
  }
  ops.add(s.x, s.routed);
}

void Qwen3NextModel::forward(const Batch& b, Memory& memory, Backend& ops, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size(), H = c.hidden, S = c.moe.shared_intermediate;
  check_positions(b);
  ops.begin_forward(b);
  Scratch s;
  s.x = ops.tensor(n, H), s.xn = ops.tensor(n, H);
  s.qkvz = ops.tensor(n, shape_.qkvz_width()), s.ba = ops.tensor(n, shape_.ba_width());
  s.delta_out = ops.tensor(n, shape_.out_width());
  s.qg = ops.tensor(n, 2 * c.q_dim()), s.q = ops.tensor(n, c.q_dim()), s.att = ops.tensor(n, c.q_dim());
  s.k = ops.tensor(n, c.kv_dim()), s.v = ops.tensor(n, c.kv_dim());
  s.angles = ops.tensor(n, c.rotary_dims);
  if (c.moe.n_experts) s.routed = ops.tensor(n, H);
  if (S) s.sg = ops.tensor(n, S), s.su = ops.tensor(n, S), s.gate_logit = ops.tensor(n, 1);
  s.g = ops.tensor(n, c.intermediate), s.u = ops.tensor(n, c.intermediate);
  ops.embed(embed_, b, s.x);
  ops.rope_table(b, inv_freq_, s.angles);

  for (int64_t l = 0; l < c.n_layers; l++) {
    const NextLayer& L = layers_[(size_t)l];
    ops.rmsnorm(s.x, L.attn_norm, c.norm_eps, s.xn);
    if (c.delta.is_linear(l)) delta_net(ops, L, l, b, memory, s);
    else full_attention(ops, L, l, b, memory, s);
    ops.add(s.x, s.xn);
    ops.rmsnorm(s.x, L.mlp_norm, c.norm_eps, s.xn);
    mlp(ops, L, l, s);
  }
  rmsnorm_head_outputs(ops, b, s.x, final_norm_, head(), logits);
}

// ------------------------------------------------------------------------------------------------
// GGUF: llama.cpp's qwen3next files. The converter splits in_proj_qkvz into attn_qkv ([all q |
// all k | all v]) and attn_gate (z), squeezes conv1d, stores -exp(A_log) as ssm_a and every
// (1 + w) norm as 1 + w; the derive step rebuilds the checkpoint's tensors from those.

const std::vector<GgufConfigKey> kNextGgufKeys = {
    {"embedding_length", "hidden_size", GgufKeyKind::Count, true},
    {"block_count", "num_hidden_layers", GgufKeyKind::Count, true},
    {"feed_forward_length", "intermediate_size", GgufKeyKind::Count, true},
    {"attention.head_count", "num_attention_heads", GgufKeyKind::Count, true},
    {"attention.head_count_kv", "num_key_value_heads", GgufKeyKind::Count, true},
    {"attention.key_length", "head_dim", GgufKeyKind::Count, true},
    {"context_length", "max_position_embeddings", GgufKeyKind::Count, true},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", GgufKeyKind::Float, true},
    {"rope.freq_base", "rope_theta", GgufKeyKind::Float, false},
    {"expert_count", "num_experts", GgufKeyKind::Count, true},
    {"expert_used_count", "num_experts_per_tok", GgufKeyKind::Count, true},
    {"expert_feed_forward_length", "moe_intermediate_size", GgufKeyKind::Count, true},
    {"expert_shared_feed_forward_length", "shared_expert_intermediate_size", GgufKeyKind::Count, true},
    {"ssm.conv_kernel", "linear_conv_kernel_dim", GgufKeyKind::Count, true},
    {"ssm.state_size", "linear_key_head_dim", GgufKeyKind::Count, true},
    {"ssm.group_count", "linear_num_key_heads", GgufKeyKind::Count, true},
    {"ssm.time_step_rank", "linear_num_value_heads", GgufKeyKind::Count, true},
    {"full_attention_interval", "full_attention_interval", GgufKeyKind::Count, false},
};

void qwen3_next_gguf_finish(const GgufFile& f, const std::string& A, Json& c) {
  const int64_t inner = gguf_count(f, A + ".ssm.inner_size"), nv = c["linear_num_value_heads"];
  if (inner % nv) fail("{}: ssm.inner_size ({}) is not a multiple of ssm.time_step_rank ({})", f.what(), inner, nv);
  c["linear_value_head_dim"] = inner / nv;
  c["hidden_act"] = "silu";
  c["tie_word_embeddings"] = f.tensor("output.weight") == nullptr;
  c["norm_topk_prob"] = true;  // llama.cpp's qwen3next loader renormalises, whatever the checkpoint said
  const int64_t hd = c["head_dim"], rot = gguf_count(f, A + ".rope.dimension_count");
  c["partial_rotary_factor"] = (double)rot / (double)hd;
  if (auto types = f.get_int_array(A + ".attention.recurrent_layers")) {  // booleans: recurrent or not
    Json t = Json::array();
    for (int64_t linear : *types) t.push_back(linear ? "linear_attention" : "full_attention");
    c["layer_types"] = t;
  }
}

// A derived f32 tensor named as the checkpoint names it.
void add_f32(GgufCheckpoint& ck, const std::string& name, std::vector<int64_t> shape, const std::string& from,
             const std::vector<float>& values) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(values.size() * sizeof(float));
  std::memcpy(bytes->data(), values.data(), bytes->size());
  TensorView v;
  v.name = name;
  v.dtype = DType::F32;
  v.shape = std::move(shape);
  v.file = ck.description() + " (" + from + ")";
  ck.add_derived(std::move(v), std::move(bytes));
}

// A (1 + w) norm stored as 1 + w: the checkpoint's w.
void derive_norm(GgufCheckpoint& ck, const std::string& gguf, const std::string& hf, int64_t n) {
  std::vector<float> w = to_f32(ck.get(gguf, {n}));
  for (float& x : w) x -= 1.0f;  // exact: the stored values are near 1 (Sterbenz)
  add_f32(ck, hf, {n}, gguf, w);
}

// in_proj_qkvz's rows grouped by key head, from attn_qkv's [all q | all k | all v] rows and
// attn_gate's z rows: whole rows moved, so a block format stays as it is.
void derive_qkvz(GgufCheckpoint& ck, const ModelConfig& c, const std::string& g, const std::string& hf) {
  const DeltaNetConfig& d = c.delta;
  const int64_t nk = d.key_heads, dk = d.key_dim, vr = d.value_heads / d.key_heads * d.value_dim, H = c.hidden;
  const TensorView qkv = ck.get(g + "attn_qkv.weight", {2 * nk * dk + nk * vr, H}),
                   z = ck.get(g + "attn_gate.weight", {nk * vr, H});
  if (qkv.dtype != z.dtype || qkv.transposed || z.transposed)
    fail("{}: {}attn_qkv and attn_gate must share one format ({} vs {})", ck.description(), g, dtype_name(qkv.dtype),
         dtype_name(z.dtype));
  const size_t row = qkv.nbytes / (size_t)qkv.dim(0);
  auto bytes = std::make_shared<std::vector<uint8_t>>(row * (size_t)(nk * (2 * dk + 2 * vr)));
  uint8_t* o = bytes->data();
  auto rows = [&](const TensorView& t, int64_t first, int64_t n) {
    std::memcpy(o, t.data + (size_t)first * row, (size_t)n * row);
    o += (size_t)n * row;
  };
  for (int64_t h = 0; h < nk; h++) {
    rows(qkv, h * dk, dk);
    rows(qkv, nk * dk + h * dk, dk);
    rows(qkv, 2 * nk * dk + h * vr, vr);
    rows(z, h * vr, vr);
  }
  TensorView v;
  v.name = hf;
  v.dtype = qkv.dtype;
  v.shape = {nk * (2 * dk + 2 * vr), H};
  v.file = ck.description() + " (" + g + "attn_qkv + attn_gate)";
  ck.add_derived(std::move(v), std::move(bytes));
}

void qwen3_next_gguf_derive(GgufCheckpoint& ck, const ModelConfig& c) {
  const DeltaNetConfig& d = c.delta;
  const int64_t H = c.hidden, channels = 2 * d.key_heads * d.key_dim + d.value_heads * d.value_dim;
  derive_norm(ck, "output_norm.weight", "model.norm.weight", H);
  for (int64_t l = 0; l < c.n_layers; l++) {
    const std::string g = "blk." + std::to_string(l) + ".", p = "model.layers." + std::to_string(l) + ".";
    derive_norm(ck, g + "attn_norm.weight", p + "input_layernorm.weight", H);
    derive_norm(ck, g + "post_attention_norm.weight", p + "post_attention_layernorm.weight", H);
    if (!d.is_linear(l)) {
      derive_norm(ck, g + "attn_q_norm.weight", p + "self_attn.q_norm.weight", c.head_dim);
      derive_norm(ck, g + "attn_k_norm.weight", p + "self_attn.k_norm.weight", c.head_dim);
      continue;
    }
    derive_qkvz(ck, c, g, p + "linear_attn.in_proj_qkvz.weight");
    add_f32(ck, p + "linear_attn.conv1d.weight", {channels, 1, d.conv_kernel}, g + "ssm_conv1d.weight",
            to_f32(ck.get(g + "ssm_conv1d.weight", {channels, d.conv_kernel})));
    std::vector<float> a = to_f32(ck.get(g + "ssm_a", {d.value_heads}));
    for (float& x : a) {
      if (!(x < 0)) fail("{}: {}ssm_a holds {}, but -exp(A_log) is negative", ck.description(), g, x);
      x = std::log(-x);
    }
    add_f32(ck, p + "linear_attn.A_log", {d.value_heads}, g + "ssm_a", a);
  }
}

GgufDescription qwen3_next_gguf() {
  GgufDescription d{"qwen3next", kNextGgufKeys, qwen3_next_gguf_finish, false, {}};
  d.derive = qwen3_next_gguf_derive;
  return d;
}

// ------------------------------------------------------------------------------------------------
// Synth presets: the peer's tiny shape (../shared/peer/synth.py tiny-qwen3-next), the same on the
// 512-token tokenizer and a 256-wide one for GGUF fixtures, a mid-size one for measurements, and
// the real 80B-A3B's.

Json next_shape(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t key_heads,
                int64_t value_heads, int64_t key_dim, int64_t experts, int64_t top_k, int64_t expert_width,
                int64_t shared_width, int64_t interval, int64_t vocab, int64_t bos, int64_t eos) {
  return {{"hidden_size", hidden}, {"intermediate_size", hidden == 64 ? 160 : 4 * hidden},
          {"num_hidden_layers", layers}, {"full_attention_interval", interval}, {"num_attention_heads", heads},
          {"num_key_value_heads", kv_heads}, {"head_dim", head_dim}, {"partial_rotary_factor", 0.25},
          {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", key_dim}, {"linear_value_head_dim", key_dim},
          {"linear_num_key_heads", key_heads}, {"linear_num_value_heads", value_heads}, {"num_experts", experts},
          {"num_experts_per_tok", top_k}, {"moe_intermediate_size", expert_width},
          {"shared_expert_intermediate_size", shared_width}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
          {"mlp_only_layers", Json::array()}, {"max_position_embeddings", 262144}, {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000000}, {"rope_scaling", nullptr}, {"tie_word_embeddings", false},
          {"vocab_size", vocab}, {"bos_token_id", bos}, {"eos_token_id", eos}};
}

std::vector<SynthPreset> qwen3_next_presets() {
  Json real = next_shape(2048, 48, 16, 2, 256, 16, 32, 128, 512, 10, 512, 512, 4, 151936, 151643, 151645);
  real["intermediate_size"] = 5120;
  return {{"qwen3-next-80b-a3b", "qwen3", real},
          {"tiny", "qwen3", next_shape(64, 4, 4, 2, 32, 2, 4, 16, 8, 2, 32, 48, 2, 151936, 151643, 151645)},
          {"tiny-v512", "gpt2-trim512", next_shape(64, 4, 4, 2, 32, 2, 4, 16, 8, 2, 32, 48, 2, 512, 511, 511)},
          // Every matrix 256 wide (K-quant GGUF fixtures): 4 value heads x 64, 4 heads x 64, experts 256.
          {"tiny-kq", "gpt2-trim512", next_shape(256, 2, 4, 2, 64, 2, 4, 64, 4, 2, 256, 256, 2, 512, 511, 511)},
          // 12 layers (3 full), 16 experts top-4: ~0.2 B parameters, for the snapshot measurements.
          {"bench-next", "gpt2-trim512", next_shape(512, 12, 8, 2, 64, 4, 8, 64, 16, 4, 256, 256, 4, 512, 511, 511)}};
}

std::unique_ptr<Model> load_qwen3_next(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<Qwen3NextModel>(config, src);
}

}  // namespace

std::vector<Architecture> qwen3_next_family() {
  Architecture a{"Qwen3NextForCausalLM", "qwen3_next", parse_qwen3_next_config, load_qwen3_next, next_tensor_names,
                 {"rotary_emb.inv_freq"}, Json::object(), std::nullopt, {}};
  a.config_defaults = {{"hidden_act", "silu"}, {"attention_bias", false}, {"attention_dropout", 0.0},
                       {"initializer_range", 0.02}};
  a.gguf = qwen3_next_gguf();
  a.presets = qwen3_next_presets();
  return {a};
}

}  // namespace kvad
