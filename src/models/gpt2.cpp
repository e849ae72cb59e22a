// GPT-2: learned position embeddings, LayerNorm with biases, fused q/k/v projection (c_attn),
// GELU (tanh form) MLP, head tied to the token embedding. Its Conv1D weights are stored
// [in, out] and are transposed once at load into the [out, in] every kernel expects.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "models/config_parse.h"
#include "models/kv_cache.h"
#include "models/registry.h"
#include "models/weight_source.h"

namespace kvad {

ModelConfig parse_gpt2_config(const Json& j, const std::string& what) {
  ModelConfig c;
  c.architecture = "GPT2LMHeadModel";
  c.model_type = "gpt2";
  c.hidden = positive_field(j, "n_embd", what);
  c.n_layers = positive_field(j, "n_layer", what);
  c.n_heads = positive_field(j, "n_head", what);
  c.n_kv_heads = c.n_heads;
  if (c.hidden % c.n_heads) fail("{}: n_embd ({}) must be a multiple of n_head ({})", what, c.hidden, c.n_heads);
  c.head_dim = c.hidden / c.n_heads;
  c.intermediate = j.contains("n_inner") && !j["n_inner"].is_null() ? positive_field(j, "n_inner", what) : 4 * c.hidden;
  c.vocab_size = positive_field(j, "vocab_size", what);
  c.max_positions = j.contains("n_positions") ? positive_field(j, "n_positions", what) : positive_field(j, "n_ctx", what);
  c.norm_eps = (float)json_num_or(j, "layer_norm_epsilon", 1e-5, what);
  std::string act = json_str_or(j, "activation_function", "gelu_new", what);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail("{}: activation_function '{}' is not supported (gelu_new, gelu_pytorch_tanh)", what, act);
  if (!json_bool_or(j, "scale_attn_weights", true, what))
    fail("{}: scale_attn_weights=false is not supported", what);
  if (json_bool_or(j, "scale_attn_by_inverse_layer_idx", false, what))
    fail("{}: scale_attn_by_inverse_layer_idx=true is not supported", what);
  // Always tied in GPT-2 checkpoints; a GGUF file may carry a separately quantised output.weight.
  c.tie_embeddings = json_bool_or(j, "tie_word_embeddings", true, what);
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.eos_ids = eos_ids_field(j, what);
  c.bos_id = (int32_t)json_int_or(j, "bos_token_id", -1, what);
  validate_config(c, what);
  return c;
}

namespace {

struct Gpt2Layer {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b, b_qkv, b_o, b_fc, b_proj;
  Weight qkv, o, fc, proj;
};

class Gpt2Model : public Model {
 public:
  Gpt2Model(const ModelConfig& c, WeightSource& src) {
    config_ = c;
    // Checkpoints saved from GPT2LMHeadModel prefix names with "transformer."; the original
    // openai-community/gpt2 weights (GPT2Model) do not.
    std::string pre = src.has("transformer.wte.weight") ? "transformer." : "";
    const int64_t E = c.hidden, V = c.vocab_size, F = c.intermediate, P = c.max_positions;
    auto conv = [&](const std::string& name, int64_t in, int64_t out) { return src.matrix_transposed(name, in, out); };
    auto vec = [&](const std::string& name, int64_t n) { return src.vector(name, {n}); };
    wte_ = src.matrix(pre + "wte.weight", V, E);
    wpe_ = src.vector(pre + "wpe.weight", {P, E});  // added, not multiplied: kept f32
    for (int64_t l = 0; l < c.n_layers; l++) {
      std::string p = pre + "h." + std::to_string(l) + ".";
      Gpt2Layer L;
      L.ln1_w = vec(p + "ln_1.weight", E);
      L.ln1_b = vec(p + "ln_1.bias", E);
      L.qkv = conv(p + "attn.c_attn.weight", E, 3 * E);
      L.b_qkv = vec(p + "attn.c_attn.bias", 3 * E);
      L.o = conv(p + "attn.c_proj.weight", E, E);
      L.b_o = vec(p + "attn.c_proj.bias", E);
      L.ln2_w = vec(p + "ln_2.weight", E);
      L.ln2_b = vec(p + "ln_2.bias", E);
      L.fc = conv(p + "mlp.c_fc.weight", E, F);
      L.b_fc = vec(p + "mlp.c_fc.bias", F);
      L.proj = conv(p + "mlp.c_proj.weight", F, E);
      L.b_proj = vec(p + "mlp.c_proj.bias", E);
      layers_.push_back(std::move(L));
    }
    lnf_w_ = vec(pre + "ln_f.weight", E);
    lnf_b_ = vec(pre + "ln_f.bias", E);
    if (!c.tie_embeddings)
      lm_head_ = src.matrix("lm_head.weight", V, E);
    else if (src.has("lm_head.weight") && !src.same_tensor("lm_head.weight", pre + "wte.weight", {V, E}))
      fail("{}: lm_head.weight differs from wte.weight, but GPT-2 ties them", src.checkpoint().description());
  }

  std::unique_ptr<ModelState> new_state() const override {
    return std::make_unique<KvCache>(config_.n_layers, config_.n_kv_heads, config_.head_dim);
  }
  void forward(const int32_t* tokens, int64_t n, ModelState& state, float* logits, bool all) const override;
  size_t weight_bytes() const override {
    size_t b = wte_.bytes() + lm_head_.bytes() + wpe_.size() * 4;
    for (const Gpt2Layer& L : layers_) b += L.qkv.bytes() + L.o.bytes() + L.fc.bytes() + L.proj.bytes();
    return b;
  }
  size_t decode_read_bytes() const override {  // one wpe row (and one wte row when the head is separate)
    return weight_bytes() - wpe_.size() * 4 - (lm_head_.empty() ? 0 : wte_.bytes());
  }
  std::string weight_format() const override { return wte_.format_name(); }
  int64_t parameter_count() const override {
    const ModelConfig& c = config_;
    int64_t E = c.hidden, F = c.intermediate;
    int64_t per_layer = 4 * E + (E * 3 * E + 3 * E) + (E * E + E) + (E * F + F) + (F * E + E);
    return c.vocab_size * E * (c.tie_embeddings ? 1 : 2) + c.max_positions * E + 2 * E + c.n_layers * per_layer;
  }

 private:
  Weight wte_, lm_head_;  // lm_head_ empty when tied
  std::vector<float> wpe_, lnf_w_, lnf_b_;
  std::vector<Gpt2Layer> layers_;
};

void Gpt2Model::forward(const int32_t* tokens, int64_t n, ModelState& state, float* logits, bool all) const {
  const ModelConfig& c = config_;
  auto& cache = static_cast<KvCache&>(state);
  const int64_t E = c.hidden, F = c.intermediate, pos0 = cache.size();
  if (pos0 + n > c.max_positions)
    fail("context full: {} positions held + {} new > the model's {}", pos0, n, c.max_positions);
  std::vector<float> x((size_t)(n * E)), xn((size_t)(n * E)), qkv((size_t)(n * 3 * E)), q((size_t)(n * E)),
      k((size_t)(n * E)), v((size_t)(n * E)), att((size_t)(n * E)), h((size_t)(n * F));
  for (int64_t t = 0; t < n; t++) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      fail("token id {} is out of range for this model's vocabulary of {}", tokens[t], c.vocab_size);
    wte_.row(tokens[t], &x[t * E]);
    kernels::add(&x[t * E], &wpe_[(pos0 + t) * E], E);
  }
  cache.reserve(pos0 + n);
  kernels::AttentionShape shape{(int)c.n_heads, (int)c.n_heads, (int)c.head_dim,
                                (float)(1.0 / std::sqrt((double)c.head_dim))};
  for (int64_t l = 0; l < c.n_layers; l++) {
    const Gpt2Layer& L = layers_[(size_t)l];
    for (int64_t t = 0; t < n; t++) kernels::layernorm(&x[t * E], L.ln1_w.data(), L.ln1_b.data(), c.norm_eps, E, &xn[t * E]);
    L.qkv.matmul(xn.data(), n, qkv.data());
    kernels::add_bias(qkv.data(), L.b_qkv.data(), n, 3 * E);
    for (int64_t t = 0; t < n; t++) {
      std::memcpy(&q[t * E], &qkv[t * 3 * E], (size_t)E * 4);
      std::memcpy(&k[t * E], &qkv[t * 3 * E + E], (size_t)E * 4);
      std::memcpy(&v[t * E], &qkv[t * 3 * E + 2 * E], (size_t)E * 4);
    }
    cache.write(l, k.data(), v.data(), n);
    kernels::attention(q.data(), n, pos0, shape, cache.keys(l), cache.values(l), cache.head_stride(), att.data());
    L.o.matmul(att.data(), n, xn.data());
    kernels::add_bias(xn.data(), L.b_o.data(), n, E);
    kernels::add(x.data(), xn.data(), n * E);

    for (int64_t t = 0; t < n; t++) kernels::layernorm(&x[t * E], L.ln2_w.data(), L.ln2_b.data(), c.norm_eps, E, &xn[t * E]);
    L.fc.matmul(xn.data(), n, h.data());
    kernels::add_bias(h.data(), L.b_fc.data(), n, F);
    kernels::gelu_tanh(h.data(), n * F);
    L.proj.matmul(h.data(), n, xn.data());
    kernels::add_bias(xn.data(), L.b_proj.data(), n, E);
    kernels::add(x.data(), xn.data(), n * E);
  }
  cache.commit(n);
  int64_t first = all ? 0 : n - 1;
  for (int64_t t = first; t < n; t++) kernels::layernorm(&x[t * E], lnf_w_.data(), lnf_b_.data(), c.norm_eps, E, &xn[t * E]);
  (lm_head_.empty() ? wte_ : lm_head_).matmul(&xn[first * E], n - first, logits);
}

}  // namespace

std::unique_ptr<Model> load_gpt2(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<Gpt2Model>(config, src);
}

}  // namespace kvad
