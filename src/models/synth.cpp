#include "models/synth.h"

#include <cmath>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/threads.h"
#include "io/safetensors.h"

namespace kvad {

namespace {

struct Preset {
  std::string name, arch, tokenizer;
  Json config;  // the keys of the real model's config.json that shape it
};

// Real shapes copy the public config.json of each model; "tiny" keeps each family's structure
// (GQA, biases, q/k norms, llama3 rope scaling, untied heads) at toy sizes with the real vocabulary.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> list = {
      {"qwen2.5-0.5b", "qwen2", "qwen3",
       {{"hidden_size", 896}, {"intermediate_size", 4864}, {"num_hidden_layers", 24}, {"num_attention_heads", 14},
        {"num_key_value_heads", 2}, {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}, {"vocab_size", 151936},
        {"bos_token_id", 151643}, {"eos_token_id", 151643}}},
      {"qwen3-0.6b", "qwen3", "qwen3",
       {{"hidden_size", 1024}, {"intermediate_size", 3072}, {"num_hidden_layers", 28}, {"num_attention_heads", 16},
        {"num_key_value_heads", 8}, {"head_dim", 128}, {"max_position_embeddings", 40960}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000}, {"tie_word_embeddings", true}, {"vocab_size", 151936},
        {"bos_token_id", 151643}, {"eos_token_id", 151645}}},
      {"llama-3.2-1b", "llama", "llama3",
       {{"hidden_size", 2048}, {"intermediate_size", 8192}, {"num_hidden_layers", 16}, {"num_attention_heads", 32},
        {"num_key_value_heads", 8}, {"head_dim", 64}, {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0},
        {"rope_scaling", {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                          {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
        {"tie_word_embeddings", true}, {"vocab_size", 128256}, {"bos_token_id", 128000}, {"eos_token_id", 128001}}},
      {"smollm2-135m", "llama", "gpt2-trim49152",
       {{"hidden_size", 576}, {"intermediate_size", 1536}, {"num_hidden_layers", 30}, {"num_attention_heads", 9},
        {"num_key_value_heads", 3}, {"max_position_embeddings", 8192}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 100000}, {"tie_word_embeddings", true}, {"vocab_size", 49152}, {"bos_token_id", 49151},
        {"eos_token_id", 49151}}},
      {"gpt2", "gpt2", "gpt2",
       {{"n_embd", 768}, {"n_layer", 12}, {"n_head", 12}, {"n_ctx", 1024}, {"n_positions", 1024},
        {"vocab_size", 50257}, {"bos_token_id", 50256}, {"eos_token_id", 50256}}},
      {"tiny", "llama", "llama3",
       {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 16}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0},
        {"rope_scaling", {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                          {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
        {"tie_word_embeddings", false}, {"vocab_size", 128256}, {"bos_token_id", 128000}, {"eos_token_id", 128001}}},
      {"tiny", "qwen2", "qwen3",
       {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}, {"vocab_size", 151936},
        {"bos_token_id", 151643}, {"eos_token_id", 151643}}},
      {"tiny", "qwen3", "qwen3",
       {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 32}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000}, {"tie_word_embeddings", false}, {"vocab_size", 151936},
        {"bos_token_id", 151643}, {"eos_token_id", 151645}}},
      {"tiny", "gpt2", "gpt2",
       {{"n_embd", 64}, {"n_layer", 2}, {"n_head", 4}, {"n_ctx", 256}, {"n_positions", 256}, {"vocab_size", 50257},
        {"bos_token_id", 50256}, {"eos_token_id", 50256}}},
      // Small files for GGUF fixtures: "tiny-v512" is tiny with GPT-2's BPE cut to 512 tokens;
      // "tiny-kq" is as small as llama.cpp's K-quants allow (every matrix 256 wide), one layer.
      {"tiny-v512", "llama", "gpt2-trim512",
       {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 16}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0},
        {"rope_scaling", {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                          {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
        {"tie_word_embeddings", false}, {"vocab_size", 512}, {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-v512", "qwen2", "gpt2-trim512",
       {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}, {"vocab_size", 512},
        {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-v512", "qwen3", "gpt2-trim512",
       {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 32}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000}, {"tie_word_embeddings", false}, {"vocab_size", 512},
        {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-v512", "gpt2", "gpt2-trim512",
       {{"n_embd", 64}, {"n_layer", 2}, {"n_head", 4}, {"n_ctx", 256}, {"n_positions", 256}, {"vocab_size", 512},
        {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-kq", "llama", "gpt2-trim512",
       {{"hidden_size", 256}, {"intermediate_size", 256}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 64}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0},
        {"rope_scaling", {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                          {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
        {"tie_word_embeddings", false}, {"vocab_size", 512}, {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-kq", "qwen2", "gpt2-trim512",
       {{"hidden_size", 256}, {"intermediate_size", 256}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}, {"vocab_size", 512},
        {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-kq", "qwen3", "gpt2-trim512",
       {{"hidden_size", 256}, {"intermediate_size", 256}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 64}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000}, {"tie_word_embeddings", false}, {"vocab_size", 512},
        {"bos_token_id", 511}, {"eos_token_id", 511}}},
      {"tiny-kq", "gpt2", "gpt2-trim512",
       {{"n_embd", 256}, {"n_layer", 1}, {"n_head", 4}, {"n_ctx", 64}, {"n_positions", 64}, {"vocab_size", 512},
        {"bos_token_id", 511}, {"eos_token_id", 511}}},
  };
  return list;
}

const char* hf_architecture(const std::string& arch) {
  if (arch == "llama") return "LlamaForCausalLM";
  if (arch == "qwen2") return "Qwen2ForCausalLM";
  if (arch == "qwen3") return "Qwen3ForCausalLM";
  return "GPT2LMHeadModel";
}

// config.json with the keys transformers writes for the architecture.
Json full_config(const Preset& p, DType dtype) {
  Json c = p.config;
  c["architectures"] = {hf_architecture(p.arch)};
  c["model_type"] = p.arch;
  c["torch_dtype"] = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  c["transformers_version"] = "4.51.0";
  if (p.arch == "gpt2") {
    c["activation_function"] = "gelu_new";
    c["layer_norm_epsilon"] = 1e-5;
    c["n_inner"] = nullptr;
    c["scale_attn_weights"] = true;
    c["tie_word_embeddings"] = true;
  } else {
    c["hidden_act"] = "silu";
    c["attention_dropout"] = 0.0;
    c["initializer_range"] = 0.02;
    if (p.arch != "qwen2") c["attention_bias"] = false;
    if (p.arch == "llama") c["mlp_bias"] = false;
    if (p.arch != "llama") c["use_sliding_window"] = false;
  }
  c["use_cache"] = true;
  return c;
}

enum class Init { Normal, One, Zero };
struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  Init init;
};

std::vector<Spec> tensor_specs(const Preset& p) {
  const Json& c = p.config;
  std::vector<Spec> s;
  if (p.arch == "gpt2") {
    int64_t E = c["n_embd"], L = c["n_layer"], V = c["vocab_size"], P = c["n_positions"], F = 4 * E;
    s.push_back({"transformer.wte.weight", {V, E}, Init::Normal});
    s.push_back({"transformer.wpe.weight", {P, E}, Init::Normal});
    for (int64_t i = 0; i < L; i++) {
      std::string h = "transformer.h." + std::to_string(i) + ".";
      s.push_back({h + "ln_1.weight", {E}, Init::One});
      s.push_back({h + "ln_1.bias", {E}, Init::Zero});
      s.push_back({h + "attn.c_attn.weight", {E, 3 * E}, Init::Normal});  // Conv1D: [in, out]
      s.push_back({h + "attn.c_attn.bias", {3 * E}, Init::Normal});
      s.push_back({h + "attn.c_proj.weight", {E, E}, Init::Normal});
      s.push_back({h + "attn.c_proj.bias", {E}, Init::Normal});
      s.push_back({h + "ln_2.weight", {E}, Init::One});
      s.push_back({h + "ln_2.bias", {E}, Init::Zero});
      s.push_back({h + "mlp.c_fc.weight", {E, F}, Init::Normal});
      s.push_back({h + "mlp.c_fc.bias", {F}, Init::Normal});
      s.push_back({h + "mlp.c_proj.weight", {F, E}, Init::Normal});
      s.push_back({h + "mlp.c_proj.bias", {E}, Init::Normal});
    }
    s.push_back({"transformer.ln_f.weight", {E}, Init::One});
    s.push_back({"transformer.ln_f.bias", {E}, Init::Zero});
    return s;
  }
  int64_t H = c["hidden_size"], I = c["intermediate_size"], L = c["num_hidden_layers"], V = c["vocab_size"];
  int64_t nh = c["num_attention_heads"], nkv = c["num_key_value_heads"];
  int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>() : H / nh;
  s.push_back({"model.embed_tokens.weight", {V, H}, Init::Normal});
  for (int64_t i = 0; i < L; i++) {
    std::string l = "model.layers." + std::to_string(i) + ".";
    s.push_back({l + "input_layernorm.weight", {H}, Init::One});
    for (auto [proj, rows] : {std::pair{"q", nh * hd}, {"k", nkv * hd}, {"v", nkv * hd}}) {
      s.push_back({l + "self_attn." + proj + "_proj.weight", {rows, H}, Init::Normal});
      if (p.arch == "qwen2") s.push_back({l + "self_attn." + proj + "_proj.bias", {rows}, Init::Normal});
    }
    s.push_back({l + "self_attn.o_proj.weight", {H, nh * hd}, Init::Normal});
    if (p.arch == "qwen3") {
      s.push_back({l + "self_attn.q_norm.weight", {hd}, Init::One});
      s.push_back({l + "self_attn.k_norm.weight", {hd}, Init::One});
    }
    s.push_back({l + "post_attention_layernorm.weight", {H}, Init::One});
    s.push_back({l + "mlp.gate_proj.weight", {I, H}, Init::Normal});
    s.push_back({l + "mlp.up_proj.weight", {I, H}, Init::Normal});
    s.push_back({l + "mlp.down_proj.weight", {H, I}, Init::Normal});
  }
  s.push_back({"model.norm.weight", {H}, Init::One});
  if (!c["tie_word_embeddings"].get<bool>()) s.push_back({"lm_head.weight", {V, H}, Init::Normal});
  return s;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Values of one tensor: its own generator seeded from (seed, name), so the bytes do not depend on
// sharding or on the order tensors are written in.
std::string make_tensor(const Spec& sp, const SynthOptions& o) {
  int64_t n = 1;
  for (int64_t d : sp.shape) n *= d;
  std::vector<float> v((size_t)n);
  uint64_t s = o.seed;
  Rng rng(Rng::splitmix(s) ^ fnv1a(sp.name));
  double base = sp.init == Init::One ? 1.0 : 0.0;
  double scale = sp.init == Init::Normal ? o.std : o.norm_jitter;
  if (scale == 0) {
    for (float& x : v) x = (float)base;
  } else {
    for (float& x : v) x = (float)(base + scale * rng.normal());
  }
  std::string bytes;
  if (o.dtype == DType::F32) {
    bytes.assign((const char*)v.data(), v.size() * 4);
  } else {
    bytes.resize(v.size() * 2);
    uint16_t* d = reinterpret_cast<uint16_t*>(bytes.data());
    for (size_t i = 0; i < v.size(); i++) d[i] = o.dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  }
  return bytes;
}

}  // namespace

std::vector<std::string> synth_presets() {
  std::vector<std::string> out;
  for (const Preset& p : presets())
    if (std::find(out.begin(), out.end(), p.name) == out.end()) out.push_back(p.name);
  return out;
}

std::vector<std::string> synth_archs() { return {"llama", "qwen2", "qwen3", "gpt2"}; }

SynthResult synthesize(const SynthOptions& o) {
  const Preset* preset = nullptr;
  std::string arch = o.arch;
  if (arch.empty()) {  // the preset's own architecture, when it names one
    std::string archs;
    for (const Preset& p : presets())
      if (p.name == o.preset) archs += (archs.empty() ? "" : ", ") + (arch = p.arch);
    if (archs.find(',') != std::string::npos)
      fail("synth: preset '{}' exists for several architectures ({}): give --arch", o.preset, archs);
  }
  for (const Preset& p : presets())
    if (p.name == o.preset && p.arch == arch) preset = &p;
  if (!preset) {
    std::string ok;
    for (const Preset& p : presets())
      if (p.name == o.preset) ok += (ok.empty() ? "" : ", ") + p.arch;
    if (ok.empty()) fail("synth: unknown preset '{}'", o.preset);
    fail("synth: preset '{}' is a {} model, not '{}' (use --arch {})", o.preset, ok, o.arch, ok);
  }
  if (o.dtype != DType::F32 && o.dtype != DType::BF16 && o.dtype != DType::F16)
    fail("synth: dtype must be f32, f16 or bf16");
  make_directories(o.out);
  atomic_write_file(join_path(o.out, "config.json"), full_config(*preset, o.dtype).dump(2) + "\n");
  Json gen = {{"bos_token_id", preset->config["bos_token_id"]}, {"eos_token_id", preset->config["eos_token_id"]},
              {"transformers_version", "4.51.0"}};
  atomic_write_file(join_path(o.out, "generation_config.json"), gen.dump(2) + "\n");

  std::vector<Spec> specs = tensor_specs(*preset);
  SynthResult res;
  res.tokenizer = preset->tokenizer;
  res.arch = preset->arch;
  // Group into shards of at most max_shard_bytes (a tensor never spans two).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0;
  for (size_t i = 0; i < specs.size(); i++) {
    uint64_t b = dtype_size(o.dtype);
    for (int64_t d : specs[i].shape) b *= (uint64_t)d;
    res.parameters += (int64_t)(b / dtype_size(o.dtype));
    res.bytes += b;
    if (cur > 0 && cur + b > o.max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += b;
  }
  res.shards = (int)shards.size();
  Json weight_map = Json::object();
  for (size_t k = 0; k < shards.size(); k++) {
    std::string fname = shards.size() == 1 ? "model.safetensors"
                                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::vector<TensorToWrite> tw;
    for (size_t i : shards[k]) {
      tw.push_back({specs[i].name, o.dtype, specs[i].shape, {}});
      weight_map[specs[i].name] = fname;
    }
    write_safetensors(join_path(o.out, fname), tw, [&](size_t j) { return make_tensor(specs[shards[k][j]], o); });
  }
  std::string index = join_path(o.out, "model.safetensors.index.json");
  if (shards.size() > 1) {
    Json idx = {{"metadata", {{"total_size", res.bytes}}}, {"weight_map", weight_map}};
    atomic_write_file(index, idx.dump(2) + "\n");
  } else if (file_exists(index)) {
    std::remove(index.c_str());
  }
  return res;
}

}  // namespace kvad
