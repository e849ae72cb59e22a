// LoRA adapters at run time (models/lora.h, the side path in the backend's linear) against an
// independent merge: tools/make_lora_goldens.py draws PEFT adapters for tiny llama / qwen2 (biases)
// / qwen3 (q/k norms, rsLoRA) / gpt2 (fused c_attn Conv1D, fan_in_fan_out) bases, merges each into
// the weights with numpy and runs ../shared/peer/ref_forward.py (float64); kvad runs the same files
// unmerged. Also: a q8 base within quantisation tolerance, the same adapter as a llama.cpp LoRA
// GGUF, sequences with different adapters in one forward, and the adapters kvad must refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/hashing.h"
#include "io/safetensors.h"
#include "models/lora.h"
#include "models/registry.h"
#include "models/synth.h"
#include "gguf_writer.h"
#include "golden_synth.h"
#include "one_sequence.h"
#include "test_support.h"

using namespace kvad;
namespace fs = std::filesystem;

namespace {

const Json& goldens() {
  static Json g = read_json_file(test::source_path("tests/golden/lora/lora.json"));
  return g;
}

const Json& golden_case(const std::string& name) {
  for (const Json& c : goldens()["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

std::string adapter_dir(const std::string& name) { return test::source_path("tests/golden/lora/" + name); }

// The golden's base checkpoint, synthesised again (the sha256 says it is the same one).
std::string synth_base(const Json& c) {
  SynthOptions o = test::golden_synth_options(goldens()["synth"], c["arch"], test::temp_dir("lora-base-" + c["name"].get<std::string>()));
  synthesize(o);
  return o.out;
}

std::vector<float> all_logits(const Model& m, std::vector<LoraUse> loras) {
  std::vector<int32_t> toks = goldens()["tokens"];
  test::OneSequence s(m, 3, 64, std::move(loras));
  std::vector<float> out(toks.size() * (size_t)m.config().vocab_size);
  s.forward(toks.data(), (int64_t)toks.size(), out.data(), true);
  return out;
}

// max |a - b| over the rows, and the largest |b| (the scale the error is judged against).
std::pair<double, double> diff(const std::vector<float>& a, const Json& rows) {
  double d = 0, scale = 0;
  size_t i = 0;
  for (const Json& row : rows)
    for (const Json& x : row) {
      double want = x.get<double>();
      d = std::max(d, std::fabs(a.at(i++) - want));
      scale = std::max(scale, std::fabs(want));
    }
  EXPECT_EQ(i, a.size());
  return {d, scale};
}

class LoraGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(LoraGolden, UnmergedEqualsTheNumpyMerge) {
  const Json& c = golden_case(GetParam());
  std::string dir = synth_base(c);
  ASSERT_EQ(sha256_hex(read_file(dir + "/model.safetensors")), c["sha256"].get<std::string>()) << "synth changed: remake goldens";
  LoadOptions lo;
  lo.format = WeightFormat::F32;  // the bf16 values exactly, so only the adapter's path is measured
  auto m = load_model_dir(dir, lo);
  auto adapter = load_lora(adapter_dir(c["name"]), *m);
  auto [base_err, base_scale] = diff(all_logits(*m, {}), c["base_logits"]);
  EXPECT_LE(base_err, 1e-4 * base_scale) << "the base alone";
  auto [err, scale] = diff(all_logits(*m, {{adapter.get(), c["user_scale"].get<float>()}}), c["merged_logits"]);
  EXPECT_LE(err, 1e-4 * scale) << "adapted";
  // The adapter matters: the merged model is far from the base, so the check above has teeth.
  auto [effect, _] = diff(all_logits(*m, {}), c["merged_logits"]);
  EXPECT_GT(effect, 100 * err + 0.1);
}

INSTANTIATE_TEST_SUITE_P(Archs, LoraGolden, ::testing::Values("llama", "qwen2", "qwen3", "gpt2"));

// A quantised base: the adapted model stays within a small multiple of what q8 does to the base
// alone (the adapter roughly doubles these tiny models' activations, and q8's error grows with
// them; the side path itself is f32), and picks the same next token nearly everywhere.
TEST(Lora, Q8BaseWithinQuantisationTolerance) {
  for (std::string name : {"qwen2", "gpt2"}) {
    SCOPED_TRACE(name);
    const Json& c = golden_case(name);
    LoadOptions lo;
    lo.format = WeightFormat::Q8;
    auto m = load_model_dir(synth_base(c), lo);
    auto adapter = load_lora(adapter_dir(name), *m);
    double q8_err = diff(all_logits(*m, {}), c["base_logits"]).first;
    std::vector<float> got = all_logits(*m, {{adapter.get(), c["user_scale"].get<float>()}});
    double err = diff(got, c["merged_logits"]).first;
    EXPECT_GT(q8_err, 0) << "q8 should not be exact";
    EXPECT_LE(err, 4 * q8_err) << "q8 alone is off by " << q8_err;
    const int64_t V = m->config().vocab_size;
    int same = 0, rows = 0;
    for (const Json& row : c["merged_logits"]) {
      std::vector<float> want = row;
      auto top = [&](const float* p) { return std::max_element(p, p + V) - p; };
      same += top(got.data() + rows * V) == top(want.data());
      rows++;
    }
    EXPECT_GE(same, rows - 1) << "next-token agreement";
    std::printf("%s q8: base off by %.4f, adapted by %.4f, %d/%d same top token\n", name.c_str(), q8_err, err, same, rows);
  }
}

namespace {

struct Tensors {
  std::vector<TensorToWrite> list;
  TensorToWrite* find(const std::string& name) {
    for (TensorToWrite& t : list)
      if (t.name == name) return &t;
    return nullptr;
  }
};

Tensors read_adapter_tensors(const std::string& dir) {
  SafetensorsFile f(dir + "/adapter_model.safetensors");
  Tensors t;
  for (const TensorView& v : f.tensors())
    t.list.push_back({v.name, v.dtype, v.shape, std::string((const char*)v.data, v.nbytes)});
  return t;
}

// llama.cpp's convert_hf_to_gguf permute for the llama architecture, on rows [out, r] of a lora_B:
// per head, rows (2, half) -> (half, 2).
std::string permute_rows(const std::string& bytes, int64_t rows, int64_t heads) {
  const size_t row = bytes.size() / (size_t)rows;
  const int64_t half = rows / heads / 2;
  std::string out(bytes.size(), '\0');
  for (int64_t h = 0; h < heads; h++)
    for (int64_t two = 0; two < 2; two++)
      for (int64_t i = 0; i < half; i++) {
        int64_t src = h * 2 * half + two * half + i, dst = h * 2 * half + i * 2 + two;
        std::memcpy(out.data() + (size_t)dst * row, bytes.data() + (size_t)src * row, row);
      }
  return out;
}

// The PEFT adapter of a golden case as llama.cpp's convert_lora_to_gguf writes it.
std::string write_gguf_adapter(const std::string& name, const std::string& arch, const ModelConfig& cfg) {
  static const std::vector<std::pair<std::string, std::string>> kNames = {
      {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},  {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  Json cfg_json = read_json_file(adapter_dir(name) + "/adapter_config.json");
  test::GgufWriter w;
  w.str("general.architecture", arch);
  w.str("general.type", "adapter");
  w.str("adapter.type", "lora");
  w.f32("adapter.lora.alpha", cfg_json["lora_alpha"].get<float>());
  for (const TensorToWrite& t : read_adapter_tensors(adapter_dir(name)).list) {
    std::string module = t.name.substr(17, t.name.size() - 17 - 14);  // base_model.model. ... .lora_A.weight
    size_t dot = module.find('.', 13);                                // model.layers.N.
    std::string layer = module.substr(13, dot - 13), proj = module.substr(dot + 1), gguf;
    for (const auto& [hf, g] : kNames)
      if (hf == proj) gguf = "blk." + layer + "." + g + ".weight";
    bool is_a = t.name.find(".lora_A.") != std::string::npos;
    std::string bytes = t.bytes;
    int64_t heads = proj == "self_attn.q_proj" ? cfg.n_heads : proj == "self_attn.k_proj" ? cfg.n_kv_heads : 0;
    if (!is_a && arch == "llama" && heads) bytes = permute_rows(bytes, t.shape[0], heads);
    w.tensor(gguf + (is_a ? ".lora_a" : ".lora_b"), {t.shape[1], t.shape[0]}, 0, bytes);
  }
  std::string path = test::temp_dir("lora-gguf-" + name) + "/adapter.gguf";
  std::ofstream(path, std::ios::binary) << w.bytes();
  return path;
}

}  // namespace

TEST(Lora, LlamaCppGgufAdapterEqualsTheNumpyMerge) {
  for (std::string name : {"llama", "qwen2"}) {  // llama: B's Q/K rows permuted in the file
    SCOPED_TRACE(name);
    const Json& c = golden_case(name);
    LoadOptions lo;
    lo.format = WeightFormat::F32;
    auto m = load_model_dir(synth_base(c), lo);
    auto adapter = load_lora(write_gguf_adapter(name, c["arch"], m->config()), *m);
    auto [err, scale] = diff(all_logits(*m, {{adapter.get(), c["user_scale"].get<float>()}}), c["merged_logits"]);
    EXPECT_LE(err, 1e-4 * scale);
  }
}

// Sequences with no adapter, the adapter at 1, at 0.5, and at 1 again (neighbours sharing one
// product) in one forward: each gets the logits it gets alone.
TEST(Lora, DifferentAdaptersInOneForward) {
  const Json& c = golden_case("llama");
  auto m = load_model_dir(synth_base(c), {});
  auto adapter = load_lora(adapter_dir("llama"), *m);
  const int64_t V = m->config().vocab_size, bs = 3, per_seq = 8;
  std::vector<std::vector<LoraUse>> uses = {{}, {{adapter.get(), 1}}, {{adapter.get(), 0.5f}}, {{adapter.get(), 1}}};
  std::vector<std::vector<int32_t>> toks = {{5, 9, 300}, {7}, {400, 2, 3, 4, 5}, {11, 12}};
  auto ops = make_cpu_backend();
  auto mem = ops->make_memory(m->memory_spec(), per_seq * (int64_t)toks.size(), bs);
  std::vector<int32_t> blocks((size_t)(per_seq * (int64_t)toks.size()));
  std::iota(blocks.begin(), blocks.end(), 0);
  Batch b;
  for (size_t i = 0; i < toks.size(); i++)
    b.add((int32_t)i, toks[i], 0, std::span<const int32_t>(blocks.data() + i * per_seq, per_seq), bs, Logits::All, uses[i]);
  std::vector<float> together((size_t)(b.n_logits() * V));
  m->forward(b, *mem, *ops, together.data());
  size_t row = 0;
  for (size_t i = 0; i < toks.size(); i++) {
    test::OneSequence s(*m, bs, 64, uses[i]);
    std::vector<float> alone(toks[i].size() * (size_t)V);
    s.forward(toks[i].data(), (int64_t)toks[i].size(), alone.data(), true);
    for (size_t j = 0; j < alone.size(); j++)
      ASSERT_NEAR(together[row * (size_t)V + j], alone[j], 1e-4 * (1 + std::fabs(alone[j]))) << "sequence " << i;
    row += toks[i].size();
  }
}

namespace {

// A copy of the qwen2 golden adapter, changed by `edit`; returns the error load_lora throws.
std::string refusal(const std::string& tag, const std::function<void(Json&, Tensors&)>& edit,
                    const std::string& base_case = "qwen2") {
  std::string dir = test::temp_dir("lora-bad-" + tag);
  Json cfg = read_json_file(adapter_dir("qwen2") + "/adapter_config.json");
  Tensors t = read_adapter_tensors(adapter_dir("qwen2"));
  edit(cfg, t);
  if (!cfg.is_null()) std::ofstream(dir + "/adapter_config.json") << cfg.dump();
  write_safetensors(dir + "/adapter_model.safetensors", t.list);
  auto m = load_model_dir(synth_base(golden_case(base_case)), {});
  try {
    load_lora(dir, *m);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << tag << ": loaded";
  return "";
}

const char* kQ0A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
const char* kV1B = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight";

}  // namespace

TEST(Lora, BadAdaptersAreRefusedNamingTheProblem) {
  auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };
  has(refusal("no-config", [](Json& c, Tensors&) { c = nullptr; }), "no adapter_config.json");
  std::string m = refusal("rank", [](Json& c, Tensors&) { c["r"] = 4; });
  has(m, "rank mismatch");
  has(m, "says r = 4");
  has(refusal("target", [](Json& c, Tensors&) { c["target_modules"].push_back("qkv_proj"); }), "'qkv_proj'");
  has(refusal("untargeted", [](Json& c, Tensors&) { c["target_modules"] = {"q_proj"}; }), "target_modules does not name");
  m = refusal("nan", [](Json&, Tensors& t) {
    float nan = std::nanf("");
    std::memcpy(t.find(kQ0A)->bytes.data() + 12, &nan, 4);
  });
  has(m, kQ0A);
  has(m, "finite");
  m = refusal("half", [](Json&, Tensors& t) { std::erase_if(t.list, [](const TensorToWrite& x) { return x.name == kV1B; }); });
  has(m, "model.layers.1.self_attn.v_proj");
  has(m, "no lora_B");
  has(refusal("foreign", [](Json&, Tensors& t) { t.list.push_back({"base_model.model.lm_head.lora_A.weight", DType::F32, {8, 64}, std::string(8 * 64 * 4, '\0')}); }),
      "lm_head");
  has(refusal("embedding", [](Json&, Tensors& t) { t.list.push_back({"base_model.model.model.embed_tokens.lora_embedding_A", DType::F32, {8, 64}, std::string(8 * 64 * 4, '\0')}); }),
      "lora_embedding_A");
  m = refusal("wrong-base", [](Json&, Tensors&) {}, "qwen3");  // qwen3's q_proj is 128 rows, qwen2's 64
  has(m, "another base");
  has(m, "self_attn");
  has(refusal("dora", [](Json& c, Tensors&) { c["use_dora"] = true; }), "DoRA");
  has(refusal("regex", [](Json& c, Tensors&) { c["target_modules"] = ".*proj"; }), "regular expression");
}

TEST(Lora, NotAnAdapterGguf) {
  const Json& c = golden_case("qwen2");
  auto m = load_model_dir(synth_base(c), {});
  test::GgufWriter w;
  w.str("general.architecture", "qwen2");
  w.str("general.type", "model");
  std::string path = test::temp_dir("lora-gguf-model") + "/x.gguf";
  std::ofstream(path, std::ios::binary) << w.bytes();
  try {
    load_lora(path, *m);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a LoRA adapter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_lora(test::temp_dir("lora-empty"), *m), Error);
}
