// The Llama family: Llama 2/3/3.x (incl. llama3 rope scaling), Mistral-style configs, SmolLM2,
// TinyLlama, Qwen2/2.5 (q/k/v biases), Qwen3 (RMSNorm over each head of q and k) and Qwen3-MoE
// (Qwen3 with routed experts in place of the MLP: models/moe.h). One forward:
//   x = embed(tokens)
//   per layer: x += o_proj(attention(rope(q), rope(k), v) of rmsnorm(x))
//              x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)
//                   (Qwen3-MoE: x += sum over h's top-k experts of weight x expert(h))
//   logits = lm_head(rmsnorm(x))
// This file is the whole family (models/registry.h): config parser, tensor table (from which
// loading, sizes, GGUF names and synth follow: models/tensors.h), forward, GGUF metadata
// translation and synth presets.
#include <cmath>
#include <cstring>

#include <fmt/ranges.h>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/gguf_model.h"
#include "models/moe.h"
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
  const bool qwen3 = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  c.qkv_bias = c.model_type == "qwen2" || attention_bias;
  c.o_bias = c.model_type != "qwen2" && !qwen3 && attention_bias;
  c.mlp_bias = json_bool_or(j, "mlp_bias", false, what);
  c.qk_norm = qwen3;
  if (c.model_type == "qwen3_moe") c.moe = parse_qwen_moe_config(j, c.n_layers, what);

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
  c.fp8_blocks = quantization_field(j, what);
  validate_config(c, what);
  return c;
}

namespace {

struct LlamaLayer {
  std::vector<float> attn_norm, mlp_norm, q_norm, k_norm;
  Weight wq, wk, wv, wo, gate, up, down;
  std::vector<float> bq, bk, bv, bo, b_gate, b_up, b_down;
  MoeWeights moe;  // Qwen3-MoE's routed layers, in place of gate/up/down
};

// Where the loaded tensors live (LlamaModel derives from it, so the forward reads them by name).
struct LlamaWeights {
  Weight embed_, lm_head_;  // lm_head_ empty when tied
  std::vector<float> final_norm_;
  std::vector<LlamaLayer> layers_;
};

// The tensors of layer l, appended to t (see llama_tensors).
void llama_layer_tensors(const ModelConfig& c, int64_t l, LlamaLayer& L, TensorList& t) {
  const int64_t H = c.hidden, I = c.intermediate, Q = c.q_dim(), KV = c.kv_dim(), hd = c.head_dim;
  std::string p = "model.layers." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
  // permuted_heads: llama.cpp permutes Q and K rows per head in llama GGUF files.
  auto mat = [&](const char* hf, const char* gguf, int64_t rows, int64_t cols, Weight* to, int64_t permuted_heads = 0) {
    t.push_back(matrix_tensor(p + hf + ".weight", g + gguf + ".weight", rows, cols, to));
    t.back().gguf_permuted_heads = permuted_heads;
    t.back().adaptable = true;
  };
  auto vec = [&](const char* hf, const char* gguf, const char* suffix, int64_t n, TensorInit init,
                 std::vector<float>* to) {
    t.push_back(vector_tensor(p + hf + suffix, g + gguf + suffix, {n}, init, to));
  };
  auto bias = [&](const char* hf, const char* gguf, int64_t n, std::vector<float>* to, int64_t permuted_heads = 0) {
    vec(hf, gguf, ".bias", n, TensorInit::Normal, to);
    t.back().gguf_permuted_heads = permuted_heads;
  };
  vec("input_layernorm", "attn_norm", ".weight", H, TensorInit::One, &L.attn_norm);
  mat("self_attn.q_proj", "attn_q", Q, H, &L.wq, c.n_heads);
  if (c.qkv_bias) bias("self_attn.q_proj", "attn_q", Q, &L.bq, c.n_heads);
  mat("self_attn.k_proj", "attn_k", KV, H, &L.wk, c.n_kv_heads);
  if (c.qkv_bias) bias("self_attn.k_proj", "attn_k", KV, &L.bk, c.n_kv_heads);
  mat("self_attn.v_proj", "attn_v", KV, H, &L.wv);
  if (c.qkv_bias) bias("self_attn.v_proj", "attn_v", KV, &L.bv);
  mat("self_attn.o_proj", "attn_output", H, Q, &L.wo);
  if (c.o_bias) bias("self_attn.o_proj", "attn_output", H, &L.bo);
  if (c.qk_norm) {  // Qwen3
    vec("self_attn.q_norm", "attn_q_norm", ".weight", hd, TensorInit::One, &L.q_norm);
    vec("self_attn.k_norm", "attn_k_norm", ".weight", hd, TensorInit::One, &L.k_norm);
  }
  vec("post_attention_layernorm", "ffn_norm", ".weight", H, TensorInit::One, &L.mlp_norm);
  if (c.moe.routed(l)) return moe_tensors(c, l, L.moe, t);
  mat("mlp.gate_proj", "ffn_gate", I, H, &L.gate);
  if (c.mlp_bias) bias("mlp.gate_proj", "ffn_gate", I, &L.b_gate);
  mat("mlp.up_proj", "ffn_up", I, H, &L.up);
  if (c.mlp_bias) bias("mlp.up_proj", "ffn_up", I, &L.b_up);
  mat("mlp.down_proj", "ffn_down", H, I, &L.down);
  if (c.mlp_bias) bias("mlp.down_proj", "ffn_down", H, &L.b_down);
}

// THE tensor table of the family: every tensor a config implies, with its Hugging Face and GGUF
// names, shape and destination in `w` (whose layers_ must already hold n_layers entries). The
// order is the order synth writes (the order transformers saves).
TensorList llama_tensors(const ModelConfig& c, LlamaWeights& w) {
  const int64_t H = c.hidden, V = c.vocab_size;
  TensorList t;
  t.push_back(matrix_tensor("model.embed_tokens.weight", "token_embd.weight", V, H, &w.embed_));
  t.back().row_lookup = !c.tie_embeddings;  // tied, it is also the head: read whole
  for (int64_t l = 0; l < c.n_layers; l++) llama_layer_tensors(c, l, w.layers_[(size_t)l], t);
  t.push_back(vector_tensor("model.norm.weight", "output_norm.weight", {H}, TensorInit::One, &w.final_norm_));
  if (c.tie_embeddings)
    t.push_back(tied_tensor("lm_head.weight", "output.weight", "model.embed_tokens.weight", {V, H}));
  else
    t.push_back(matrix_tensor("lm_head.weight", "output.weight", V, H, &w.lm_head_));
  return t;
}

TensorList llama_tensor_names(const ModelConfig& c) { return table_without_destinations<LlamaWeights>(c, llama_tensors); }

class LlamaModel : public Model, private LlamaWeights {
 public:
  LlamaModel(const ModelConfig& c, WeightSource& src) {
    config_ = c;
    layers_.resize((size_t)c.n_layers);
    TensorList table = llama_tensors(c, *this);
    load_tensors(table, src);
    sizes_ = loaded_stats(table);
    adaptable_ = adaptable_matrices(table);
    matrices_ = named_matrices(table);
    inv_freq_ = rope_inv_freq(c, c.head_dim);
  }

  MemorySpec memory_spec() const override {
    return MemorySpec::attention(config_.n_layers, config_.n_kv_heads, config_.head_dim);
  }

  void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const override;

  std::string weight_format() const override { return embed_.format_name(); }

 private:
  const Weight& head() const { return lm_head_.empty() ? embed_ : lm_head_; }

  std::vector<double> inv_freq_;
};

void LlamaModel::forward(const Batch& b, Memory& memory, Backend& ops, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size(), H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, hd = c.head_dim;
  check_positions(b);
  ops.begin_forward(b);
  Tensor x = ops.tensor(n, H), xn = ops.tensor(n, H), q = ops.tensor(n, Q), k = ops.tensor(n, KV), v = ops.tensor(n, KV),
         att = ops.tensor(n, Q), g = ops.tensor(n, I), u = ops.tensor(n, I), angles = ops.tensor(n, hd),
         routed = c.moe.n_experts ? ops.tensor(n, H) : Tensor{};
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
    if (c.moe.routed(l)) {
      ops.moe(L.moe, c.moe.routing, xn, routed);
      ops.add(x, routed);
      continue;
    }
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

  rmsnorm_head_outputs(ops, b, x, final_norm_, head(), logits);
}

// ------------------------------------------------------------------------------------------------
// GGUF: llama.cpp's llama, qwen2 and qwen3 files. Mistral checkpoints convert to "llama".

// The metadata that is a plain copy into config.json ("<arch>.<key>").
const std::vector<GgufConfigKey> kLlamaGgufKeys = {
    {"embedding_length", "hidden_size", GgufKeyKind::Count, true},
    {"block_count", "num_hidden_layers", GgufKeyKind::Count, true},
    {"feed_forward_length", "intermediate_size", GgufKeyKind::Count, true},
    {"attention.head_count", "num_attention_heads", GgufKeyKind::Count, true},
    {"attention.head_count_kv", "num_key_value_heads", GgufKeyKind::Count, false},  // absent: = head_count
    {"context_length", "max_position_embeddings", GgufKeyKind::Count, true},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", GgufKeyKind::Float, true},
    {"rope.freq_base", "rope_theta", GgufKeyKind::Float, false},
};

// head_dim from key_length / value_length (kvad needs them equal, and a full-width rotary).
int64_t gguf_head_dim(const GgufFile& f, const std::string& A, Json& c) {
  int64_t H = c["hidden_size"], nh = c["num_attention_heads"];
  auto kl = gguf_optional_count(f, A + ".attention.key_length"), vl = gguf_optional_count(f, A + ".attention.value_length");
  if (kl && vl && *kl != *vl)
    fail("{}: attention.key_length ({}) != value_length ({}) is not supported", f.what(), *kl, *vl);
  int64_t hd = kl ? *kl : vl ? *vl : H / nh;
  if (kl || vl) c["head_dim"] = hd;
  if (auto rd = gguf_optional_count(f, A + ".rope.dimension_count"); rd && *rd != hd)
    fail("{}: rope.dimension_count ({}) != head size ({}): partial rotary embeddings are not supported", f.what(), *rd,
         hd);
  return hd;
}

// llama.cpp's precomputed llama3 scaling: one divisor per rotary frequency in rope_freqs.weight.
Json gguf_freq_factors(const GgufFile& f, const GgufTensorInfo& t, int64_t hd) {
  if (t.dtype != DType::F32 || t.ne != std::vector<int64_t>{hd / 2})
    fail("{}: rope_freqs.weight must be F32 [{}] (one divisor per frequency), is {} [{}]", f.what(), hd / 2,
         dtype_name(t.dtype), fmt::join(t.ne, ", "));
  Json factors = Json::array();
  for (int64_t i = 0; i < hd / 2; i++) {
    float x;
    std::memcpy(&x, t.data + 4 * i, 4);  // GGUF is little-endian, as every machine kvad runs on
    if (!(x > 0) || x > 1e30f) fail("{}: rope_freqs.weight[{}] = {} must be positive", f.what(), i, x);
    factors.push_back(x);
  }
  return {{"rope_type", "freq_factors"}, {"factors", factors}};
}

// Rope scaling: "linear" (with its factor) or llama.cpp's per-frequency divisors.
void gguf_rope_scaling(const GgufFile& f, const std::string& A, int64_t hd, Json& c) {
  std::string type = f.get_string(A + ".rope.scaling.type").value_or("");
  double factor = f.get_float(A + ".rope.scaling.factor").value_or(f.get_float(A + ".rope.scale_linear").value_or(0));
  if (type == "yarn" || type == "longrope")
    fail("{}: rope scaling '{}' is not supported (supported: none, linear, llama3 via rope_freqs)", f.what(), type);
  if (!type.empty() && type != "none" && type != "linear") fail("{}: unknown rope scaling type '{}'", f.what(), type);
  if (type != "none" && factor != 0 && factor != 1) {
    if (!(factor > 0)) fail("{}: rope scaling factor {} must be positive", f.what(), factor);
    c["rope_scaling"] = {{"type", "linear"}, {"factor", factor}};
  }
  if (const GgufTensorInfo* t = f.tensor("rope_freqs.weight")) {
    if (A != "llama") fail("{}: rope_freqs.weight is only used by the llama architecture", f.what());
    if (c.contains("rope_scaling")) fail("{}: both linear rope scaling and rope_freqs.weight are given", f.what());
    c["rope_scaling"] = gguf_freq_factors(f, *t, hd);
  }
}

// What the key table cannot say: derived sizes, facts read off the tensors, rope scaling.
void llama_gguf_finish(const GgufFile& f, const std::string& A, Json& c) {
  int64_t hd = gguf_head_dim(f, A, c);
  c["hidden_act"] = "silu";
  c["tie_word_embeddings"] = f.tensor("output.weight") == nullptr;
  if (A == "llama") {  // qwen2's q/k/v biases follow from its model_type
    c["attention_bias"] = f.tensor("blk.0.attn_q.bias") != nullptr;
    c["mlp_bias"] = f.tensor("blk.0.ffn_up.bias") != nullptr;
  }
  gguf_rope_scaling(f, A, hd, c);
}

GgufDescription llama_gguf(const std::string& arch) {
  // Only llama.cpp's "llama" converter permutes Q/K rows (for its interleaved rope kernel).
  bool llama = arch == "llama";
  return {arch, kLlamaGgufKeys, llama_gguf_finish, llama,
          llama ? std::vector<std::string>{"rope_freqs.weight"} : std::vector<std::string>{}};
}

// llama.cpp's qwen3moe files: Qwen3's keys, the experts' sizes, and the renormalised top-k that
// llama.cpp applies to every qwen3moe file whatever the checkpoint said (its loader hard-codes it).
GgufDescription qwen3_moe_gguf() {
  GgufDescription d = llama_gguf("qwen3moe");
  d.keys.push_back({"expert_count", "num_experts", GgufKeyKind::Count, true});
  d.keys.push_back({"expert_used_count", "num_experts_per_tok", GgufKeyKind::Count, true});
  d.keys.push_back({"expert_feed_forward_length", "moe_intermediate_size", GgufKeyKind::Count, true});
  d.finish = [](const GgufFile& f, const std::string& A, Json& c) {
    llama_gguf_finish(f, A, c);
    c["norm_topk_prob"] = true;
  };
  return d;
}

// ------------------------------------------------------------------------------------------------
// Synth presets. Real shapes copy the public config.json of each model; "tiny" keeps the
// family's structure (GQA, biases, q/k norms, llama3 rope scaling, untied heads) at toy sizes with
// the real vocabulary; "tiny-v512" is tiny with GPT-2's BPE cut to 512 tokens and "tiny-kq" as
// small as llama.cpp's K-quants allow (every matrix 256 wide, one layer), for GGUF fixtures.

// The shape keys shared by the tiny presets of one model type, at a hidden width.
Json tiny_shape(const std::string& type, int64_t hidden, int64_t layers, int64_t vocab, int64_t bos, int64_t eos) {
  Json c = {{"hidden_size", hidden}, {"intermediate_size", hidden == 64 ? 128 : 256}, {"num_hidden_layers", layers},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 4096},
            {"vocab_size", vocab}, {"bos_token_id", bos}, {"eos_token_id", eos}};
  if (type == "llama") {
    c["head_dim"] = hidden / 4;
    c["rms_norm_eps"] = 1e-5;
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                         {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
    c["tie_word_embeddings"] = false;
  } else {
    if (type == "qwen3") c["head_dim"] = hidden == 64 ? 32 : 64;
    c["rms_norm_eps"] = 1e-6;
    c["rope_theta"] = type == "qwen2" ? Json(1000000.0) : Json(1000000);
    c["tie_word_embeddings"] = type == "qwen2";
  }
  return c;
}

std::vector<SynthPreset> tiny_presets(const std::string& type, const std::string& tokenizer, int64_t vocab, int64_t bos,
                                      int64_t eos) {
  return {{"tiny", tokenizer, tiny_shape(type, 64, 2, vocab, bos, eos)},
          {"tiny-v512", "gpt2-trim512", tiny_shape(type, 64, 2, 512, 511, 511)},
          {"tiny-kq", "gpt2-trim512", tiny_shape(type, 256, 1, 512, 511, 511)}};
}

std::vector<SynthPreset> llama_presets() {
  Json llama3_scaling = {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                         {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
  std::vector<SynthPreset> p = {
      {"llama-3.2-1b", "llama3",
       {{"hidden_size", 2048}, {"intermediate_size", 8192}, {"num_hidden_layers", 16}, {"num_attention_heads", 32},
        {"num_key_value_heads", 8}, {"head_dim", 64}, {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0}, {"rope_scaling", llama3_scaling}, {"tie_word_embeddings", true},
        {"vocab_size", 128256}, {"bos_token_id", 128000}, {"eos_token_id", 128001}}},
      {"smollm2-135m", "gpt2-trim49152",
       {{"hidden_size", 576}, {"intermediate_size", 1536}, {"num_hidden_layers", 30}, {"num_attention_heads", 9},
        {"num_key_value_heads", 3}, {"max_position_embeddings", 8192}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 100000}, {"tie_word_embeddings", true}, {"vocab_size", 49152}, {"bos_token_id", 49151},
        {"eos_token_id", 49151}}},
  };
  for (SynthPreset& t : tiny_presets("llama", "llama3", 128256, 128000, 128001)) p.push_back(std::move(t));
  return p;
}

// One real shape of a model type and its tiny presets.
std::vector<SynthPreset> qwen_presets(const std::string& type, SynthPreset real) {
  int64_t bos = real.config["bos_token_id"], eos = real.config["eos_token_id"];
  std::vector<SynthPreset> p = {real};
  for (SynthPreset& t : tiny_presets(type, "qwen3", real.config["vocab_size"], bos, eos)) p.push_back(std::move(t));
  return p;
}

std::vector<SynthPreset> qwen2_presets() {
  return qwen_presets("qwen2", {"qwen2.5-0.5b", "qwen3",
                                {{"hidden_size", 896}, {"intermediate_size", 4864}, {"num_hidden_layers", 24},
                                 {"num_attention_heads", 14}, {"num_key_value_heads", 2},
                                 {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
                                 {"tie_word_embeddings", true}, {"vocab_size", 151936}, {"bos_token_id", 151643},
                                 {"eos_token_id", 151643}}});
}

std::vector<SynthPreset> qwen3_presets() {
  return qwen_presets("qwen3", {"qwen3-0.6b", "qwen3",
                                {{"hidden_size", 1024}, {"intermediate_size", 3072}, {"num_hidden_layers", 28},
                                 {"num_attention_heads", 16}, {"num_key_value_heads", 8}, {"head_dim", 128},
                                 {"max_position_embeddings", 40960}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000},
                                 {"tie_word_embeddings", true}, {"vocab_size", 151936}, {"bos_token_id", 151643},
                                 {"eos_token_id", 151645}}});
}

// Qwen3-MoE: the tiny shape of the peer's `tiny-qwen3-moe` (8 experts, top-2; "tiny-kq" every
// matrix 256 wide, for K-quant GGUF fixtures) and a mid-size
// shape for benchmarks ("bench": 32 experts, top-4, 0.43 GB at q8, 1/8 of the experts read per
// token) on the 512-token tokenizer, so the vocabulary does not hide the experts' cost.
std::vector<SynthPreset> qwen3_moe_presets() {
  auto shape = [](int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t experts,
                  int64_t top_k, int64_t expert_width, int64_t vocab, int64_t bos, int64_t eos) {
    return Json{{"hidden_size", hidden}, {"intermediate_size", hidden == 64 ? 160 : 4 * hidden},
                {"num_hidden_layers", layers}, {"num_attention_heads", heads}, {"num_key_value_heads", kv_heads},
                {"head_dim", head_dim}, {"num_experts", experts}, {"num_experts_per_tok", top_k},
                {"moe_intermediate_size", expert_width}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
                {"mlp_only_layers", Json::array()}, {"max_position_embeddings", 40960}, {"rms_norm_eps", 1e-6},
                {"rope_theta", 1000000.0}, {"tie_word_embeddings", false}, {"vocab_size", vocab},
                {"bos_token_id", bos}, {"eos_token_id", eos}};
  };
  Json a3b = shape(2048, 48, 32, 4, 128, 128, 8, 768, 151936, 151643, 151645);
  a3b["intermediate_size"] = 6144;
  return {{"qwen3-30b-a3b", "qwen3", a3b},
          {"tiny", "qwen3", shape(64, 2, 4, 2, 32, 8, 2, 32, 151936, 151643, 151645)},
          {"tiny-v512", "gpt2-trim512", shape(64, 2, 4, 2, 32, 8, 2, 32, 512, 511, 511)},
          {"tiny-kq", "gpt2-trim512", shape(256, 1, 4, 2, 64, 4, 2, 256, 512, 511, 511)},
          {"bench", "gpt2-trim512", shape(1024, 8, 16, 4, 64, 32, 4, 512, 512, 511, 511)}};
}

std::unique_ptr<Model> load_llama(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<LlamaModel>(config, src);
}

// Keys transformers writes into each model type's config.json beyond the shape.
Json llama_config_defaults(const std::string& type) {
  Json d = {{"hidden_act", "silu"}, {"attention_dropout", 0.0}, {"initializer_range", 0.02}};
  if (type != "qwen2") d["attention_bias"] = false;
  if (type == "llama") d["mlp_bias"] = false;
  if (type != "llama") d["use_sliding_window"] = false;
  return d;
}

Architecture llama_architecture(const char* name, const std::string& type) {
  Architecture a{name, type, parse_llama_config, load_llama, llama_tensor_names, {"rotary_emb.inv_freq"}, Json::object(),
                 std::nullopt, {}};
  a.config_defaults = llama_config_defaults(type);
  return a;
}

}  // namespace

std::vector<Architecture> llama_family() {
  Architecture llama = llama_architecture("LlamaForCausalLM", "llama"),
               mistral = llama_architecture("MistralForCausalLM", "mistral"),
               qwen2 = llama_architecture("Qwen2ForCausalLM", "qwen2"),
               qwen3 = llama_architecture("Qwen3ForCausalLM", "qwen3"),
               qwen3_moe = llama_architecture("Qwen3MoeForCausalLM", "qwen3_moe");
  llama.gguf = llama_gguf("llama");
  qwen2.gguf = llama_gguf("qwen2");
  qwen3.gguf = llama_gguf("qwen3");
  llama.presets = llama_presets();
  qwen2.presets = qwen2_presets();
  qwen3.presets = qwen3_presets();
  qwen3_moe.gguf = qwen3_moe_gguf();
  qwen3_moe.presets = qwen3_moe_presets();
  for (Architecture* dense : {&llama, &mistral, &qwen2, &qwen3}) dense->gpu = true;  // the MoE one routes: CPU only
  return {llama, mistral, qwen2, qwen3, qwen3_moe};
}

}  // namespace kvad
