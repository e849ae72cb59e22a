// GPT-2: learned position embeddings, LayerNorm with biases, fused q/k/v projection (c_attn),
// GELU (tanh form) MLP, head tied to the token embedding. Its Conv1D weights are stored
// [in, out] and are transposed once at load into the [out, in] every kernel expects.
// This file is the whole family (models/registry.h): config parser, tensor table
// (models/tensors.h), forward, GGUF metadata translation and synth presets.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/gguf_model.h"
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
  c.fp8_blocks = quantization_field(j, what);
  validate_config(c, what);
  return c;
}

namespace {

struct Gpt2Layer {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b, b_qkv, b_o, b_fc, b_proj;
  Weight qkv, o, fc, proj;
};

// Where the loaded tensors live (Gpt2Model derives from it, so the forward reads them by name).
struct Gpt2Weights {
  Weight wte_, lm_head_;  // lm_head_ empty when tied
  std::vector<float> wpe_, lnf_w_, lnf_b_;
  std::vector<Gpt2Layer> layers_;
};

// THE tensor table of GPT-2, in the order transformers saves (and synth writes). `pre` is
// "transformer." for checkpoints saved from GPT2LMHeadModel, "" for the original
// openai-community/gpt2 weights (GPT2Model); lm_head never has it. w.layers_ must hold n_layers.
TensorList gpt2_tensors(const ModelConfig& c, Gpt2Weights& w, const std::string& pre) {
  const int64_t E = c.hidden, V = c.vocab_size, F = c.intermediate, P = c.max_positions;
  TensorList t;
  t.push_back(matrix_tensor(pre + "wte.weight", "token_embd.weight", V, E, &w.wte_));
  t.back().row_lookup = !c.tie_embeddings;  // tied, it is also the head: read whole
  // Added, not multiplied: kept f32; a step reads its position's row.
  t.push_back(vector_tensor(pre + "wpe.weight", "position_embd.weight", {P, E}, TensorInit::Normal, &w.wpe_));
  t.back().row_lookup = true;
  for (int64_t l = 0; l < c.n_layers; l++) {
    Gpt2Layer& L = w.layers_[(size_t)l];
    std::string p = pre + "h." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
    auto conv = [&](const char* hf, const char* gguf, int64_t in, int64_t out, Weight* to) {
      t.push_back(conv1d_tensor(p + hf + ".weight", g + gguf + ".weight", in, out, to));
      t.back().adaptable = true;
    };
    auto vec = [&](const char* hf, const char* gguf, int64_t n, TensorInit init, std::vector<float>* to) {
      t.push_back(vector_tensor(p + hf, g + gguf, {n}, init, to));
    };
    vec("ln_1.weight", "attn_norm.weight", E, TensorInit::One, &L.ln1_w);
    vec("ln_1.bias", "attn_norm.bias", E, TensorInit::Zero, &L.ln1_b);
    conv("attn.c_attn", "attn_qkv", E, 3 * E, &L.qkv);
    vec("attn.c_attn.bias", "attn_qkv.bias", 3 * E, TensorInit::Normal, &L.b_qkv);
    conv("attn.c_proj", "attn_output", E, E, &L.o);
    vec("attn.c_proj.bias", "attn_output.bias", E, TensorInit::Normal, &L.b_o);
    vec("ln_2.weight", "ffn_norm.weight", E, TensorInit::One, &L.ln2_w);
    vec("ln_2.bias", "ffn_norm.bias", E, TensorInit::Zero, &L.ln2_b);
    conv("mlp.c_fc", "ffn_up", E, F, &L.fc);
    vec("mlp.c_fc.bias", "ffn_up.bias", F, TensorInit::Normal, &L.b_fc);
    conv("mlp.c_proj", "ffn_down", F, E, &L.proj);
    vec("mlp.c_proj.bias", "ffn_down.bias", E, TensorInit::Normal, &L.b_proj);
  }
  t.push_back(vector_tensor(pre + "ln_f.weight", "output_norm.weight", {E}, TensorInit::One, &w.lnf_w_));
  t.push_back(vector_tensor(pre + "ln_f.bias", "output_norm.bias", {E}, TensorInit::Zero, &w.lnf_b_));
  // llama.cpp's converter writes the tied head as its own output.weight (the same bytes).
  if (c.tie_embeddings)
    t.push_back(tied_tensor("lm_head.weight", "output.weight", pre + "wte.weight", {V, E}));
  else
    t.push_back(matrix_tensor("lm_head.weight", "output.weight", V, E, &w.lm_head_));
  return t;
}

// Under the names GPT2LMHeadModel saves (and synth writes, and GGUF maps to).
TensorList gpt2_tensor_names(const ModelConfig& c) {
  auto table = [](const ModelConfig& cfg, Gpt2Weights& w) { return gpt2_tensors(cfg, w, "transformer."); };
  return table_without_destinations<Gpt2Weights>(c, table);
}

class Gpt2Model : public Model, private Gpt2Weights {
 public:
  Gpt2Model(const ModelConfig& c, WeightSource& src) {
    config_ = c;
    layers_.resize((size_t)c.n_layers);
    std::string pre = src.has("transformer.wte.weight") ? "transformer." : "";
    TensorList table = gpt2_tensors(c, *this, pre);
    load_tensors(table, src);
    sizes_ = loaded_stats(table);
    adaptable_ = adaptable_matrices(table);
    matrices_ = named_matrices(table);
  }

  MemorySpec memory_spec() const override {
    return MemorySpec::attention(config_.n_layers, config_.n_heads, config_.head_dim);
  }
  void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const override;
  std::string weight_format() const override { return wte_.format_name(); }

};

void Gpt2Model::forward(const Batch& b, Memory& memory, Backend& ops, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size(), E = c.hidden, F = c.intermediate;
  check_positions(b);
  ops.begin_forward(b);
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
  if (b.output() == RowOutput::Hidden) {  // embeddings: the normed state is the answer, no head
    ops.layernorm(last, lnf_w_, lnf_b_, c.norm_eps, Tensor::wrap(logits, b.n_logits(), E));
    return;
  }
  ops.layernorm(last, lnf_w_, lnf_b_, c.norm_eps, last);
  ops.linear(lm_head_.empty() ? wte_ : lm_head_, last, Tensor::wrap(logits, b.n_logits(), c.vocab_size));
}

// ------------------------------------------------------------------------------------------------
// GGUF: llama.cpp's gpt2 files.

const std::vector<GgufConfigKey> kGpt2GgufKeys = {
    {"embedding_length", "n_embd", GgufKeyKind::Count, true},
    {"block_count", "n_layer", GgufKeyKind::Count, true},
    {"attention.head_count", "n_head", GgufKeyKind::Count, true},
    {"context_length", "n_positions", GgufKeyKind::Count, true},
    {"feed_forward_length", "n_inner", GgufKeyKind::Count, false},  // absent: 4 x n_embd
    {"attention.layer_norm_epsilon", "layer_norm_epsilon", GgufKeyKind::Float, true},
};

void gpt2_gguf_finish(const GgufFile& f, const std::string& A, Json& c) {
  if (auto kv = gguf_optional_count(f, A + ".attention.head_count_kv"); kv && *kv != c["n_head"].get<int64_t>())
    fail("{}: gpt2.attention.head_count_kv ({}) differs from head_count: not GPT-2", f.what(), *kv);
  c["n_ctx"] = c["n_positions"];
  c["activation_function"] = "gelu_new";
  // llama.cpp's converter writes GPT-2's tied head as its own output.weight; quantised, the two
  // may differ (llama-quantize gives the output Q6_K): then it is a separate head.
  const GgufTensorInfo *emb = f.tensor("token_embd.weight"), *out = f.tensor("output.weight");
  c["tie_word_embeddings"] = !out || (out->ggml_type == emb->ggml_type && out->ne == emb->ne &&
                                      std::memcmp(out->data, emb->data, out->nbytes) == 0);
}

// Synth presets: the real GPT-2 small, and toy sizes with its vocabulary ("tiny"), with its BPE
// cut to 512 tokens ("tiny-v512") and 256 wide for llama.cpp's K-quants ("tiny-kq").
std::vector<SynthPreset> gpt2_presets() {
  auto shape = [](int64_t E, int64_t L, int64_t H, int64_t ctx, int64_t vocab, int64_t bos_eos) {
    return Json{{"n_embd", E}, {"n_layer", L}, {"n_head", H}, {"n_ctx", ctx}, {"n_positions", ctx},
                {"vocab_size", vocab}, {"bos_token_id", bos_eos}, {"eos_token_id", bos_eos}};
  };
  return {{"gpt2", "gpt2", shape(768, 12, 12, 1024, 50257, 50256)},
          {"tiny", "gpt2", shape(64, 2, 4, 256, 50257, 50256)},
          {"tiny-v512", "gpt2-trim512", shape(64, 2, 4, 256, 512, 511)},
          {"tiny-kq", "gpt2-trim512", shape(256, 1, 4, 64, 512, 511)}};
}

std::unique_ptr<Model> load_gpt2(const ModelConfig& config, WeightSource& src) {
  return std::make_unique<Gpt2Model>(config, src);
}

}  // namespace

std::vector<Architecture> gpt2_family() {
  // Old GPT-2 exports carry the causal-mask buffers attn.bias / attn.masked_bias.
  Architecture a{"GPT2LMHeadModel", "gpt2", parse_gpt2_config, load_gpt2, gpt2_tensor_names,
                 {".attn.bias", ".attn.masked_bias"}, Json::object(), std::nullopt, {}};
  a.config_defaults = {{"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}, {"n_inner", nullptr},
                       {"scale_attn_weights", true}, {"tie_word_embeddings", true}};
  a.gguf = GgufDescription{"gpt2", kGpt2GgufKeys, gpt2_gguf_finish, false, {}};
  a.presets = gpt2_presets();
  a.gpu = true;
  return {a};
}

}  // namespace kvad
