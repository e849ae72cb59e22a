#include "train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"
#include "io/safetensors.h"
#include "train/data.h"

namespace kvad::train {

namespace fs = std::filesystem;

std::vector<int64_t> HfTensor::stored_shape() const {
  if (cols == 0) return {rows};
  return transpose ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
}

// Not derived from the families' tensor tables (models/tensors.h), by choice: what this adds is
// the trainer's own layout (fused q/k/v and gate/up slices of one flat buffer), which no table
// holds. The tables check it instead: every saved checkpoint loads through them with the
// unread-tensor guard, and the loaded parameter count equals the trainer's (tests/cli_train.cpp);
// a base read through this map runs the unread-tensor guard too (base.cpp).
std::vector<HfTensor> hf_tensors(const ModelShape& s, const ParamLayout& L) {
  std::vector<HfTensor> out;
  const int64_t C = s.dim;
  auto vec = [&](std::string name, int64_t off, int64_t n) { out.push_back({std::move(name), off, n, 0, false}); };
  auto mat = [&](std::string name, int64_t off, int64_t rows, int64_t cols, bool transpose) {
    out.push_back({std::move(name), off, rows, cols, transpose});
  };
  if (s.arch == Arch::Gpt2) {
    mat("transformer.wte.weight", L.wte, s.vocab, C, false);
    mat("transformer.wpe.weight", L.wpe, s.positions, C, false);
    for (int64_t l = 0; l < s.layers; l++) {
      const LayerParams& w = L.layers[(size_t)l];
      std::string p = "transformer.h." + std::to_string(l) + ".";
      vec(p + "ln_1.weight", w.ln1_w, C);
      vec(p + "ln_1.bias", w.ln1_b, C);
      mat(p + "attn.c_attn.weight", w.qkv_w, s.qkv_dim(), C, true);
      vec(p + "attn.c_attn.bias", w.qkv_b, s.qkv_dim());
      mat(p + "attn.c_proj.weight", w.proj_w, C, s.q_dim(), true);
      vec(p + "attn.c_proj.bias", w.proj_b, C);
      vec(p + "ln_2.weight", w.ln2_w, C);
      vec(p + "ln_2.bias", w.ln2_b, C);
      mat(p + "mlp.c_fc.weight", w.fc_w, s.ffn, C, true);
      vec(p + "mlp.c_fc.bias", w.fc_b, s.ffn);
      mat(p + "mlp.c_proj.weight", w.fc2_w, C, s.ffn, true);
      vec(p + "mlp.c_proj.bias", w.fc2_b, C);
    }
    vec("transformer.ln_f.weight", L.lnf_w, C);
    vec("transformer.ln_f.bias", L.lnf_b, C);
  } else {
    const int64_t Q = s.q_dim(), KV = s.kv_dim(), I = s.ffn;
    mat("model.embed_tokens.weight", L.wte, s.vocab, C, false);
    for (int64_t l = 0; l < s.layers; l++) {
      const LayerParams& w = L.layers[(size_t)l];
      std::string p = "model.layers." + std::to_string(l) + ".";
      vec(p + "input_layernorm.weight", w.ln1_w, C);
      mat(p + "self_attn.q_proj.weight", w.qkv_w, Q, C, false);
      mat(p + "self_attn.k_proj.weight", w.qkv_w + Q * C, KV, C, false);
      mat(p + "self_attn.v_proj.weight", w.qkv_w + (Q + KV) * C, KV, C, false);
      if (w.qkv_b >= 0) {
        vec(p + "self_attn.q_proj.bias", w.qkv_b, Q);
        vec(p + "self_attn.k_proj.bias", w.qkv_b + Q, KV);
        vec(p + "self_attn.v_proj.bias", w.qkv_b + Q + KV, KV);
      }
      if (w.q_norm >= 0) {
        vec(p + "self_attn.q_norm.weight", w.q_norm, s.head_dim());
        vec(p + "self_attn.k_norm.weight", w.k_norm, s.head_dim());
      }
      mat(p + "self_attn.o_proj.weight", w.proj_w, C, Q, false);
      vec(p + "post_attention_layernorm.weight", w.ln2_w, C);
      mat(p + "mlp.gate_proj.weight", w.fc_w, I, C, false);
      mat(p + "mlp.up_proj.weight", w.fc_w + I * C, I, C, false);
      mat(p + "mlp.down_proj.weight", w.fc2_w, C, I, false);
    }
    vec("model.norm.weight", L.lnf_w, C);
    if (L.head >= 0) mat("lm_head.weight", L.head, s.vocab, C, false);
  }
  return out;
}

void copy_hf_tensor(const HfTensor& t, const float* src, float* params) {
  float* dst = params + t.offset;
  if (t.transpose) {
    for (int64_t r = 0; r < t.rows; r++)
      for (int64_t c = 0; c < t.cols; c++) dst[r * t.cols + c] = src[c * t.rows + r];
  } else {
    std::memcpy(dst, src, sizeof(float) * (size_t)(t.cols == 0 ? t.rows : t.rows * t.cols));
  }
}

Json hf_config(const ModelShape& s, const Json& extra) {
  Json j;
  if (s.arch == Arch::Gpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", s.vocab},
         {"n_positions", s.positions},
         {"n_ctx", s.positions},
         {"n_embd", s.dim},
         {"n_layer", s.layers},
         {"n_head", s.heads},
         {"n_inner", s.ffn == 4 * s.dim ? Json(nullptr) : Json(s.ffn)},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", s.norm_eps},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", true}};
  } else {
    // Qwen2 and Qwen3 are Llama with q/k/v biases or q/k norms; transformers names them apart.
    const char* arch = s.qk_norm ? "Qwen3ForCausalLM" : s.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    const char* type = s.qk_norm ? "qwen3" : s.qkv_bias ? "qwen2" : "llama";
    if (s.qk_norm && s.qkv_bias) fail("no transformers architecture has both q/k norms and only q/k/v biases");
    j = {{"architectures", {arch}},
         {"model_type", type},
         {"vocab_size", s.vocab},
         {"hidden_size", s.dim},
         {"intermediate_size", s.ffn},
         {"num_hidden_layers", s.layers},
         {"num_attention_heads", s.heads},
         {"num_key_value_heads", s.kv_heads},
         {"head_dim", s.head_dim()},
         {"max_position_embeddings", s.positions},
         {"rms_norm_eps", s.norm_eps},
         {"rope_theta", s.rope_theta},
         {"hidden_act", "silu"},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"tie_word_embeddings", s.tied}};
  }
  j["torch_dtype"] = "float32";
  if (!extra.empty()) j["kvad"] = extra;
  return j;
}

namespace {

std::string tensor_bytes(const HfTensor& t, const float* params) {
  const float* src = params + t.offset;
  int64_t n = t.cols == 0 ? t.rows : t.rows * t.cols;
  if (!t.transpose) return std::string((const char*)src, (size_t)n * sizeof(float));
  std::vector<float> tmp((size_t)n);  // stored [cols, rows]
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) tmp[(size_t)(c * t.rows + r)] = src[r * t.cols + c];
  return std::string((const char*)tmp.data(), (size_t)n * sizeof(float));
}

void write_tensors(const std::string& path, const std::vector<HfTensor>& ts, const float* params) {
  std::vector<TensorToWrite> specs;
  for (const HfTensor& t : ts) specs.push_back({t.name, DType::F32, t.stored_shape(), ""});
  write_safetensors(path, specs, [&](size_t i) { return tensor_bytes(ts[i], params); });
}

std::string temp_name(const std::string& dir, pid_t pid) {
  fs::path p(dir);
  return (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(pid))).string();
}

}  // namespace

void remove_stale_temporaries(const std::string& dir) {
  fs::path p(dir);
  std::error_code ec;
  if (!fs::is_directory(p.parent_path(), ec)) return;
  std::string prefix = "." + p.filename().string() + ".tmp-";
  for (const auto& e : fs::directory_iterator(p.parent_path(), ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    pid_t pid = (pid_t)std::atol(name.c_str() + prefix.size());
    if (pid > 0 && pid != getpid() && kill(pid, 0) == 0) continue;  // its writer is still running
    fs::remove_all(e.path(), ec);
  }
}

void save_checkpoint(const std::string& dir, const CheckpointData& d) {
  const std::string tmp = temp_name(dir, getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    make_directories(tmp);
    std::vector<HfTensor> ts = hf_tensors(*d.shape, *d.layout);
    atomic_write_file(join_path(tmp, "config.json"), hf_config(*d.shape, d.config_extra).dump(2) + "\n");
    write_tensors(join_path(tmp, "model.safetensors"), ts, d.params);
    atomic_write_file(join_path(tmp, "tokenizer.json"), char_tokenizer_json(d.vocab).dump(2) + "\n");
    atomic_write_file(join_path(tmp, "tokenizer_config.json"), char_tokenizer_config(d.shape->context).dump(2) + "\n");
    if (d.adam_m && d.adam_v) {
      int64_t n = d.layout->total;
      write_safetensors(join_path(tmp, "optimizer.safetensors"),
                        {{"adamw.m", DType::F32, {n}, std::string((const char*)d.adam_m, (size_t)n * 4)},
                         {"adamw.v", DType::F32, {n}, std::string((const char*)d.adam_v, (size_t)n * 4)}});
    }
    if (!d.state.is_null()) atomic_write_file(join_path(tmp, "trainer_state.json"), d.state.dump(1) + "\n");
    fsync_directory(tmp);
    // Swap the new folder in: one atomic exchange when there is an old one, which is then removed.
    if (is_directory(dir)) {
      if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
        fail("cannot replace {}: {}", dir, std::strerror(errno));
      fs::remove_all(tmp, ec);
    } else if (std::rename(tmp.c_str(), dir.c_str()) != 0) {
      fail("cannot create {}: {}", dir, std::strerror(errno));
    }
    fsync_directory(fs::path(dir).parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  LoadedCheckpoint out;
  std::string state_path = join_path(dir, "trainer_state.json");
  if (!file_exists(state_path))
    fail("{}: no trainer_state.json, so there is nothing to resume (was it saved by kvad train?)", dir);
  out.state = read_json_file(state_path);
  const Json& sh = out.state.at("shape");
  ModelShape& s = out.shape;
  std::string arch = sh.at("arch").get<std::string>();
  if (arch != "gpt2" && arch != "llama") fail("{}: unknown arch '{}'", state_path, arch);
  s.arch = arch == "gpt2" ? Arch::Gpt2 : Arch::Llama;
  s.vocab = sh.at("vocab"), s.layers = sh.at("layers"), s.dim = sh.at("dim"), s.heads = sh.at("heads");
  s.kv_heads = sh.at("kv_heads"), s.ffn = sh.at("ffn"), s.context = sh.at("context"), s.tied = sh.at("tied");
  s.norm_eps = sh.at("norm_eps"), s.rope_theta = sh.at("rope_theta");
  s.head_size = sh.value("head_size", 0), s.positions = sh.value("positions", 0);
  s.qkv_bias = sh.value("qkv_bias", false), s.qk_norm = sh.value("qk_norm", false);
  s.finalize();
  for (const Json& b : out.state.at("vocab")) out.vocab.push_back(b.get<uint8_t>());
  if ((int64_t)out.vocab.size() != s.vocab) fail("{}: the vocabulary does not match the model's", state_path);

  ParamLayout L = make_layout(s);
  out.params.assign((size_t)L.total, 0.0f);
  SafetensorsFile model(join_path(dir, "model.safetensors"));
  std::vector<HfTensor> ts = hf_tensors(s, L);
  for (const HfTensor& t : ts) {
    const TensorView* v = nullptr;
    for (const TensorView& x : model.tensors())
      if (x.name == t.name) v = &x;
    if (!v) fail("{}/model.safetensors: missing {}", dir, t.name);
    if (v->dtype != DType::F32 || v->shape != t.stored_shape())
      fail("{}/model.safetensors: {} is {} {}, expected F32 [{}]", dir, t.name, dtype_name(v->dtype), v->shape_str(),
           fmt::join(t.stored_shape(), ", "));
    copy_hf_tensor(t, reinterpret_cast<const float*>(v->data), out.params.data());
  }
  SafetensorsFile opt(join_path(dir, "optimizer.safetensors"));
  for (const char* name : {"adamw.m", "adamw.v"}) {
    const TensorView* v = nullptr;
    for (const TensorView& x : opt.tensors())
      if (x.name == name) v = &x;
    if (!v || v->dtype != DType::F32 || v->shape != std::vector<int64_t>{L.total})
      fail("{}/optimizer.safetensors: {} is missing or has the wrong shape", dir, name);
    std::vector<float>& dst = std::string(name) == "adamw.m" ? out.adam_m : out.adam_v;
    dst.resize((size_t)L.total);
    std::memcpy(dst.data(), v->data, v->nbytes);
  }
  return out;
}

}  // namespace kvad::train
