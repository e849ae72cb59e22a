// GPT-2: learned position embeddings, LayerNorm with biases, fused q/k/v projection (c_attn),
// GELU (tanh form) MLP, head tied to the token embedding. Its Conv1D weights are stored
// [in, out] and are transposed once at load into the [out, in] every kernel expects.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/config_parse.h"
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
  c.bos_id = bos_id_field(j, what);
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

  MemorySpec memory_spec() const override {
    return MemorySpec::attention(config_.n_layers, config_.n_heads, config_.head_dim);
  }
  void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const override;
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

void Gpt2Model::forward(const Batch& b, Memory& memory, Backend& ops, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size(), E = c.hidden, F = c.intermediate;
  check_positions(b);
  ops.begin_forward();
  Tensor x = ops.tensor(n, E), xn = ops.tensor(n, E), qkv = ops.tensor(n, 3 * E), att = ops.tensor(n, E),
         h = ops.tensor(n, F);
  ops.embed(wte_, b, x);
  ops.add_position_rows(x, wpe_, b);
  kernels::AttentionShape shape{(int)c.n_heads, (int)c.n_heads, (int)c.head_dim,
                                (float)(1.0 / std::sqrt((double)c.head_dim))};
  for (int64_t l = 0; l < c.n_layers; l++) {
    const Gpt2Layer& L = layers_[(size_t)l];
    ops.layernorm(x, L.ln1_w, L.ln1_b, c.norm_eps, xn);
    ops.linear(L.qkv, xn, qkv);
    ops.add_bias(qkv, L.b_qkv);
    ops.attention(memory, l, b, shape, qkv.cols_view(0, E), qkv.cols_view(E, E), qkv.cols_view(2 * E, E), att);
    ops.linear(L.o, att, xn);
    ops.add_bias(xn, L.b_o);
    ops.add(x, xn);

    ops.layernorm(x, L.ln2_w, L.ln2_b, c.norm_eps, xn);
    ops.linear(L.fc, xn, h);
    ops.add_bias(h, L.b_fc);
    ops.gelu_tanh(h);
    ops.linear(L.proj, h, xn);
    ops.add_bias(xn, L.b_proj);
    ops.add(x, xn);
  }
  if (b.n_logits() == 0) return;
  Tensor last = ops.tensor(b.n_logits(), E);
  ops.logit_rows(x, b, last);
  ops.layernorm(last, lnf_w_, lnf_b_, c.norm_eps, last);
  ops.linear(lm_head_.empty() ? wte_ : lm_head_, last, Tensor::wrap(logits, b.n_logits(), c.vocab_size));
}

}  // namespace

std::unique_ptr<Model> load_gpt2(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<Gpt2Model>(config, src);
}

}  // namespace kvad
