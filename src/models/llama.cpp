// The Llama family: Llama 2/3/3.x (incl. llama3 rope scaling), Mistral-style configs, SmolLM2,
// TinyLlama, Qwen2/2.5 (q/k/v biases) and Qwen3 (RMSNorm over each head of q and k). One forward:
//   x = embed(tokens)
//   per layer: x += o_proj(attention(rope(q), rope(k), v) of rmsnorm(x))
//              x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)
//   logits = lm_head(rmsnorm(x))
#include <cmath>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/weight_source.h"

namespace kvad {

ModelConfig parse_llama_config(const Json& j, const std::string& what) {
  ModelConfig c;
  c.architecture = architecture_field(j, what);
  c.model_type = json_str_or(j, "model_type", "llama", what);
  c.hidden = positive_field(j, "hidden_size", what);
  c.n_layers = positive_field(j, "num_hidden_layers", what);
  c.n_heads = positive_field(j, "num_attention_heads", what);
  c.n_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? positive_field(j, "num_key_value_heads", what)
                     : c.n_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? positive_field(j, "head_dim", what)
                                                                  : c.hidden / c.n_heads;
  if (!j.contains("head_dim") && c.hidden % c.n_heads)
    fail("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim is not given", what,
         c.hidden, c.n_heads);
  c.intermediate = positive_field(j, "intermediate_size", what);
  c.vocab_size = positive_field(j, "vocab_size", what);
  c.max_positions = json_int_or(j, "max_position_embeddings", 2048, what);
  c.norm_eps = (float)json_num_or(j, "rms_norm_eps", 1e-6, what);
  c.rope_theta = json_num_or(j, "rope_theta", 10000.0, what);
  c.tie_embeddings = json_bool_or(j, "tie_word_embeddings", false, what);
  std::string act = json_str_or(j, "hidden_act", "silu", what);
  if (act != "silu") fail("{}: hidden_act '{}' is not supported for {} (only silu)", what, act, c.model_type);

  bool attention_bias = json_bool_or(j, "attention_bias", false, what);
  c.qkv_bias = c.model_type == "qwen2" || attention_bias;
  c.o_bias = c.model_type != "qwen2" && c.model_type != "qwen3" && attention_bias;
  c.mlp_bias = json_bool_or(j, "mlp_bias", false, what);
  c.qk_norm = c.model_type == "qwen3";

  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    std::string where = what + ": rope_scaling";
    std::string type = json_str_or(*rs, "rope_type", json_str_or(*rs, "type", "", where), where);
    if (type == "llama3") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = json_num_or(*rs, "factor", 8, where);
      c.rope_scaling.low_freq_factor = json_num_or(*rs, "low_freq_factor", 1, where);
      c.rope_scaling.high_freq_factor = json_num_or(*rs, "high_freq_factor", 4, where);
      c.rope_scaling.original_max_positions = json_int_or(*rs, "original_max_position_embeddings", 8192, where);
      if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
        fail("{}: high_freq_factor must be greater than low_freq_factor", where);
    } else if (type == "linear") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = json_num_or(*rs, "factor", 1, where);
    } else if (type == "freq_factors") {  // not HF: how a GGUF's rope_freqs.weight arrives (io/gguf.h)
      c.rope_scaling.type = type;
      auto ff = rs->find("factors");
      int64_t half = c.head_dim / 2;
      if (ff == rs->end() || !ff->is_array() || (int64_t)ff->size() != half)
        fail("{}: factors must be a list of head_dim / 2 = {} numbers", where, half);
      for (const Json& x : *ff) {
        if (!x.is_number() || !(x.get<double>() > 0)) fail("{}: factors must be positive numbers", where);
        c.rope_scaling.freq_factors.push_back(x.get<double>());
      }
    } else if (type != "default" && !type.empty()) {
      fail("{}: rope scaling type '{}' is not supported (supported: llama3, linear)", where, type);
    }
    if (!(c.rope_scaling.factor > 0)) fail("{}: factor must be positive", where);
  }
  // A sliding window shorter than the context changes the attention pattern past the window; we
  // do not implement it, so the usable context stops there rather than computing the wrong thing.
  bool sliding = c.model_type == "mistral" || json_bool_or(j, "use_sliding_window", false, what);
  if (sliding && j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
    int64_t w = j["sliding_window"].get<int64_t>();
    if (w > 0 && w < c.max_positions) c.max_positions = w;
  }
  c.eos_ids = eos_ids_field(j, what);
  c.bos_id = bos_id_field(j, what);
  validate_config(c, what);
  return c;
}

namespace {

struct LlamaLayer {
  std::vector<float> attn_norm, mlp_norm, q_norm, k_norm;
  Weight wq, wk, wv, wo, gate, up, down;
  std::vector<float> bq, bk, bv, bo, b_gate, b_up, b_down;
};

class LlamaModel : public Model {
 public:
  LlamaModel(const ModelConfig& c, WeightSource& src) {
    config_ = c;
    const int64_t H = c.hidden, V = c.vocab_size, I = c.intermediate, Q = c.q_dim(), KV = c.kv_dim();
    auto W = [&](const std::string& name, int64_t rows, int64_t cols) { return src.matrix(name, rows, cols); };
    auto vec = [&](const std::string& name, int64_t n) { return src.vector(name, {n}); };
    embed_ = W("model.embed_tokens.weight", V, H);
    for (int64_t l = 0; l < c.n_layers; l++) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      LlamaLayer L;
      L.attn_norm = vec(p + "input_layernorm.weight", H);
      L.mlp_norm = vec(p + "post_attention_layernorm.weight", H);
      L.wq = W(p + "self_attn.q_proj.weight", Q, H);
      L.wk = W(p + "self_attn.k_proj.weight", KV, H);
      L.wv = W(p + "self_attn.v_proj.weight", KV, H);
      L.wo = W(p + "self_attn.o_proj.weight", H, Q);
      if (c.qkv_bias) {
        L.bq = vec(p + "self_attn.q_proj.bias", Q);
        L.bk = vec(p + "self_attn.k_proj.bias", KV);
        L.bv = vec(p + "self_attn.v_proj.bias", KV);
      }
      if (c.o_bias) L.bo = vec(p + "self_attn.o_proj.bias", H);
      if (c.qk_norm) {
        L.q_norm = vec(p + "self_attn.q_norm.weight", c.head_dim);
        L.k_norm = vec(p + "self_attn.k_norm.weight", c.head_dim);
      }
      L.gate = W(p + "mlp.gate_proj.weight", I, H);
      L.up = W(p + "mlp.up_proj.weight", I, H);
      L.down = W(p + "mlp.down_proj.weight", H, I);
      if (c.mlp_bias) {
        L.b_gate = vec(p + "mlp.gate_proj.bias", I);
        L.b_up = vec(p + "mlp.up_proj.bias", I);
        L.b_down = vec(p + "mlp.down_proj.bias", H);
      }
      layers_.push_back(std::move(L));
    }
    final_norm_ = vec("model.norm.weight", H);
    if (!c.tie_embeddings) {
      lm_head_ = W("lm_head.weight", V, H);
    } else if (src.has("lm_head.weight")) {
      // Some exports save the tied head anyway; accept it only if it really is the same matrix.
      if (!src.same_tensor("lm_head.weight", "model.embed_tokens.weight", {V, H}))
        fail("{}: tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight",
             src.checkpoint().description());
    }
    inv_freq_ = rope_inv_freq(c, c.head_dim);
  }

  MemorySpec memory_spec() const override {
    return MemorySpec::attention(config_.n_layers, config_.n_kv_heads, config_.head_dim);
  }

  void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const override;

  size_t weight_bytes() const override {
    size_t b = embed_.bytes() + (lm_head_.empty() ? 0 : lm_head_.bytes()) + final_norm_.size() * 4;
    for (const LlamaLayer& L : layers_)
      for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) b += w->bytes();
    return b;
  }
  size_t decode_read_bytes() const override { return weight_bytes() - (lm_head_.empty() ? 0 : embed_.bytes()); }
  std::string weight_format() const override { return embed_.format_name(); }
  int64_t parameter_count() const override {
    const ModelConfig& c = config_;
    int64_t per_layer = 2 * c.hidden + c.hidden * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * c.hidden +
                        3 * c.hidden * c.intermediate + (c.qkv_bias ? c.q_dim() + 2 * c.kv_dim() : 0) +
                        (c.qk_norm ? 2 * c.head_dim : 0);
    return c.vocab_size * c.hidden * (c.tie_embeddings ? 1 : 2) + c.hidden + c.n_layers * per_layer;
  }

 private:
  const Weight& head() const { return lm_head_.empty() ? embed_ : lm_head_; }

  Weight embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<LlamaLayer> layers_;
  std::vector<double> inv_freq_;
};

void LlamaModel::forward(const Batch& b, Memory& memory, Backend& ops, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size(), H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, hd = c.head_dim;
  check_positions(b);
  ops.begin_forward();
  Tensor x = ops.tensor(n, H), xn = ops.tensor(n, H), q = ops.tensor(n, Q), k = ops.tensor(n, KV), v = ops.tensor(n, KV),
         att = ops.tensor(n, Q), g = ops.tensor(n, I), u = ops.tensor(n, I), angles = ops.tensor(n, hd);
  ops.embed(embed_, b, x);
  ops.rope_table(b, inv_freq_, angles);  // every row's position, shared by all layers and heads
  kernels::AttentionShape shape{(int)c.n_heads, (int)c.n_kv_heads, (int)hd, (float)(1.0 / std::sqrt((double)hd))};

  for (int64_t l = 0; l < c.n_layers; l++) {
    const LlamaLayer& L = layers_[(size_t)l];
    ops.rmsnorm(x, L.attn_norm, c.norm_eps, xn);
    ops.linear_group(xn, {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}});
    if (c.qkv_bias) {
      ops.add_bias(q, L.bq);
      ops.add_bias(k, L.bk);
      ops.add_bias(v, L.bv);
    }
    if (c.qk_norm) {  // Qwen3: each head of q and k normalised on its own
      ops.rmsnorm(q.reshape(n * c.n_heads, hd), L.q_norm, c.norm_eps, q.reshape(n * c.n_heads, hd));
      ops.rmsnorm(k.reshape(n * c.n_kv_heads, hd), L.k_norm, c.norm_eps, k.reshape(n * c.n_kv_heads, hd));
    }
    ops.rope(q, c.n_heads, angles);
    ops.rope(k, c.n_kv_heads, angles);
    ops.attention(memory, l, b, shape, q, k, v, att);
    ops.linear(L.wo, att, xn);
    if (c.o_bias) ops.add_bias(xn, L.bo);
    ops.add(x, xn);

    ops.rmsnorm(x, L.mlp_norm, c.norm_eps, xn);
    ops.linear_group(xn, {{&L.gate, g}, {&L.up, u}});
    if (c.mlp_bias) {
      ops.add_bias(g, L.b_gate);
      ops.add_bias(u, L.b_up);
    }
    ops.silu_mul(g, u);
    ops.linear(L.down, g, xn);
    if (c.mlp_bias) ops.add_bias(xn, L.b_down);
    ops.add(x, xn);
  }

  if (b.n_logits() == 0) return;
  Tensor last = ops.tensor(b.n_logits(), H);
  ops.logit_rows(x, b, last);
  ops.rmsnorm(last, final_norm_, c.norm_eps, last);
  ops.linear(head(), last, Tensor::wrap(logits, b.n_logits(), c.vocab_size));
}

}  // namespace

std::unique_ptr<Model> load_llama(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<LlamaModel>(config, src);
}

}  // namespace kvad
