// DeepSeek-V3's FP8 checkpoints: F8_E4M3 projections with per-block F32 `<name>_scale_inv`, and
// config.json's quantization_config (quant_method "fp8", weight_block_size). The checkpoint is the
// tiny-deepseek-v3 synth with the FP8 weights and scales of tests/fixtures/fp8 laid over it (made by
// tools/make_fp8_goldens.py as DeepSeek's weight_quant does, in blocks of 128 (one partial block a
// matrix) and of 16 (many, the last ones partial)). Checked against the float64 numpy reference
// run on the dequantised weights: the dequantised values bit for bit, the logits at every position
// in f32, in the default bf16 and in q8 (also through the .nq cache), and a clear error for every
// way such a checkpoint can be wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/hashing.h"
#include "io/safetensors.h"
#include "logit_golden.h"
#include "models/config_parse.h"
#include "models/registry.h"
#include "models/synth.h"
#include "models/weight_source.h"
#include "one_sequence.h"
#include "test_support.h"

using namespace kvad;

namespace {

std::string sha256(const void* data, size_t n) {
  Hasher h(Hasher::Kind::Sha256);
  h.update(data, n);
  return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
  std::string bytes = read_file(path);
  return sha256(bytes.data(), bytes.size());
}

// Copies of a .safetensors file's tensors (a tiny checkpoint's 40 MB), to write back changed.
std::vector<TensorToWrite> read_tensors(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<TensorToWrite> out;
  for (const TensorView& t : f.tensors())
    out.push_back({t.name, t.dtype, t.shape, std::string((const char*)t.data, t.nbytes)});
  return out;
}

// A golden's FP8 checkpoint: the synth it was made from (config.json with its quantization_config)
// with the committed F8_E4M3 weights and their scales in place of those tensors.
test::Golden fp8_checkpoint(const std::string& name) {
  test::Golden g = test::load_golden(name);
  const std::string model = join_path(g.model_dir, "model.safetensors");
  const std::string fixture = test::source_path(g.j["fp8"]["fixture"]);
  EXPECT_EQ(sha256_file(model), g.j["synth"]["sha256"]) << "kvad synth no longer makes the golden's checkpoint";
  EXPECT_EQ(sha256_file(fixture), g.j["fp8"]["fixture_sha256"]) << fixture << " is not the golden's";
  std::vector<TensorToWrite> fp8 = read_tensors(fixture), all;
  for (TensorToWrite& t : read_tensors(model))
    if (std::none_of(fp8.begin(), fp8.end(), [&](const TensorToWrite& f) { return f.name == t.name; }))
      all.push_back(std::move(t));
  all.insert(all.end(), fp8.begin(), fp8.end());
  write_safetensors(model, all);
  return g;
}

std::vector<float> prefill_logits(const Model& model, const std::vector<int32_t>& prompt) {
  test::OneSequence seq(model);
  std::vector<float> logits(prompt.size() * (size_t)model.config().vocab_size);
  seq.forward(prompt.data(), (int64_t)prompt.size(), logits.data(), true);
  return logits;
}

// Row by row, the f32 values of a loaded matrix.
std::vector<float> values_of(const Weight& w) {
  std::vector<float> v((size_t)(w.rows() * w.cols()));
  for (int64_t r = 0; r < w.rows(); r++) w.row(r, &v[(size_t)(r * w.cols())]);
  return v;
}

class Fp8Golden : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Fp8Golden, DequantisedWeightsAreTheReferencesBitForBit) {
  test::Golden g = fp8_checkpoint(GetParam());
  SafetensorsCheckpoint ck(g.model_dir);
  const Fp8Blocks blocks = quantization_field(g.j["config_set"], "the golden's config_set");
  WeightSource f32(ck, WeightFormat::F32, false, blocks), asked_none(ck, WeightFormat::AsStored, false, blocks);
  const Json& want = g.j["fp8"]["dequantised_sha256"];
  ASSERT_GT(want.size(), 100u);  // every projection: attention, dense MLP, routed and shared experts
  for (auto& [name, sha] : want.items()) {
    const TensorView t = ck.get(name);
    ASSERT_EQ(t.dtype, DType::F8_E4M3) << name;
    const std::vector<float> v = values_of(f32.matrix(name, t.dim(0), t.dim(1)));
    EXPECT_EQ(sha256(v.data(), v.size() * 4), sha.get<std::string>()) << name;
    // No format asked for: bf16, DeepSeek's own cast of its FP8 weights.
    EXPECT_STREQ(asked_none.matrix(name, t.dim(0), t.dim(1)).format_name(), "bf16") << name;
  }
  // kv_b_proj is read as values (absorbed into the attention), through the same dequantisation.
  const std::string kvb = "model.layers.1.self_attn.kv_b_proj.weight";
  const std::vector<float> v = f32.vector(kvb, ck.get(kvb).shape);
  EXPECT_EQ(sha256(v.data(), v.size() * 4), want[kvb].get<std::string>());
}

TEST_P(Fp8Golden, LogitsMatchTheReferenceAtEveryPosition) {
  test::Golden g = fp8_checkpoint(GetParam());
  // f32 holds fp8 x scale exactly as the reference does; bf16 (the default) rounds each weight to
  // 8 significant bits, within 2^-9 of it.
  for (auto [fmt, rel] : {std::pair{WeightFormat::F32, 1e-3}, std::pair{WeightFormat::AsStored, 1e-2}}) {
    LoadOptions lo;
    lo.format = fmt;
    auto model = load_model_dir(g.model_dir, lo);
    ASSERT_EQ(model->config().vocab_size, g.j["vocab"].get<int64_t>());
    test::expect_logits_match(g.j, prefill_logits(*model, g.prompt), model->config().vocab_size,
                              GetParam() + " " + weight_format_name(fmt), rel);
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, Fp8Golden,
                         ::testing::Values("tiny-deepseek-v3-fp8-b128", "tiny-deepseek-v3-fp8-b16"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace_if(s.begin(), s.end(), [](char ch) { return !std::isalnum(ch); }, '_');
                           return s;
                         });

namespace {

// A copy of a checkpoint (config.json and weights) with its tensors and config changed by `edit`.
using Edit = std::function<void(std::vector<TensorToWrite>&, Json&)>;
std::string edited_copy(const std::string& model_dir, const Edit& edit) {
  const std::string dir = test::temp_dir("fp8-edited");
  std::vector<TensorToWrite> tensors = read_tensors(join_path(model_dir, "model.safetensors"));
  Json config = read_json_file(join_path(model_dir, "config.json"));
  edit(tensors, config);
  write_safetensors(join_path(dir, "model.safetensors"), tensors);
  atomic_write_file(join_path(dir, "config.json"), config.dump());
  return dir;
}

// The error of loading such a copy ("" if it loads).
std::string load_error(const std::string& model_dir, const Edit& edit) {
  try {
    load_model_dir(edited_copy(model_dir, edit), {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TensorToWrite& tensor(std::vector<TensorToWrite>& all, const std::string& name) {
  auto it = std::find_if(all.begin(), all.end(), [&](const TensorToWrite& t) { return t.name == name; });
  if (it == all.end()) throw std::runtime_error("no tensor " + name);
  return *it;
}

void set_first_scale(std::vector<TensorToWrite>& all, const std::string& name, float v) {
  std::memcpy(tensor(all, name).bytes.data(), &v, 4);
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "no \"" << (part) << "\" in: " << (text)

const std::string kQb = "model.layers.1.self_attn.q_b_proj.weight";  // [96, 48]: scales [6, 3] in blocks of 16

}  // namespace

TEST(Fp8Load, QuantisedToQ8AsTheValuesItStandsForAndFromItsCache) {
  test::Golden g = fp8_checkpoint("tiny-deepseek-v3-fp8-b16");
  // The same checkpoint with each FP8 weight stored as its f32 values (bit for bit the reference's:
  // DequantisedWeightsAreTheReferencesBitForBit) and no scales: q8 of FP8 must be q8 of those.
  SafetensorsCheckpoint ck(g.model_dir);
  WeightSource f32(ck, WeightFormat::F32, false, quantization_field(g.j["config_set"], "config_set"));
  const std::string plain = edited_copy(g.model_dir, [&](std::vector<TensorToWrite>& all, Json& config) {
    config.erase("quantization_config");
    std::erase_if(all, [](const TensorToWrite& t) { return t.name.ends_with("_scale_inv"); });
    for (TensorToWrite& t : all)
      if (t.dtype == DType::F8_E4M3) {
        const std::vector<float> v = values_of(f32.matrix(t.name, t.shape[0], t.shape[1]));
        t.dtype = DType::F32;
        t.bytes.assign((const char*)v.data(), v.size() * 4);
      }
  });
  LoadOptions lo;
  lo.format = WeightFormat::Q8;
  const std::vector<float> want = prefill_logits(*load_model_dir(plain, lo), g.prompt);
  lo.cache_file = join_path(test::temp_dir("fp8-q8-cache"), "model.nq");
  for (bool from_cache : {false, true}) {
    LoadReport report;
    auto model = load_model_dir(g.model_dir, lo, &report);
    EXPECT_EQ(report.from_cache, from_cache) << report.note;
    const std::vector<float> got = prefill_logits(*model, g.prompt);
    EXPECT_EQ(got, want) << (from_cache ? "from the cache" : "from FP8");
    // q8's own error on this tiny MoE, the same as on the f32 values above: measured 1.6-3.2e-2 x
    // max|logit| at 15 positions, 8.0e-2 at position 14 (q8 of the bf16 tiny-deepseek-v3 reaches
    // 3.3e-2, of tiny-deepseek-v2-lite 6.0e-2); near-tied top tokens may swap.
    test::expect_logits_match(g.j, got, model->config().vocab_size,
                              std::string("q8 ") + (from_cache ? "from the cache" : "from FP8"), 1e-1, false);
  }
}

TEST(Fp8Load, TheUneditedCopyLoads) {  // so each error below is the edit's, not the copy's
  test::Golden g = fp8_checkpoint("tiny-deepseek-v3-fp8-b16");
  EXPECT_EQ(load_error(g.model_dir, [](auto&, Json&) {}), "");
}

TEST(Fp8Load, ABrokenScaleIsNamedWithItsFile) {
  test::Golden g = fp8_checkpoint("tiny-deepseek-v3-fp8-b16");
  std::string e = load_error(g.model_dir, [](std::vector<TensorToWrite>& t, Json&) {
    t.erase(std::find_if(t.begin(), t.end(), [](const TensorToWrite& x) { return x.name == kQb + "_scale_inv"; }));
  });
  EXPECT_HAS(e, "model.safetensors: tensor '" + kQb + "' is F8_E4M3 but its block scales '" + kQb + "_scale_inv'");
  e = load_error(g.model_dir, [](std::vector<TensorToWrite>& t, Json&) {
    TensorToWrite& s = tensor(t, kQb + "_scale_inv");
    s.shape = {3, 6};  // the right count, transposed
  });
  EXPECT_HAS(e, "model.safetensors: '" + kQb + "_scale_inv' has shape [3, 6]");
  EXPECT_HAS(e, "in blocks of 16 x 16 (quantization_config.weight_block_size) needs [6, 3]");
  for (float bad : {INFINITY, NAN}) {
    e = load_error(g.model_dir, [&](std::vector<TensorToWrite>& t, Json&) { set_first_scale(t, kQb + "_scale_inv", bad); });
    EXPECT_HAS(e, "'" + kQb + "_scale_inv' holds the scale");
    EXPECT_HAS(e, "for block [0, 0]: not finite");
  }
}

TEST(Fp8Load, TheBlockSizeIsTheConfigs) {
  // The same file read as blocks of 32: the scales no longer fit, and the error says so, naming the key.
  test::Golden g = fp8_checkpoint("tiny-deepseek-v3-fp8-b16");
  std::string e = load_error(g.model_dir, [](auto&, Json& c) { c["quantization_config"]["weight_block_size"] = {32, 32}; });
  EXPECT_HAS(e, "in blocks of 32 x 32 (quantization_config.weight_block_size) needs");
  e = load_error(g.model_dir, [](auto&, Json& c) { c.erase("quantization_config"); });
  EXPECT_HAS(e, "is F8_E4M3 but config.json has no quantization_config");
}

TEST(Fp8Load, FP8WhereNoScaleCanApplyIsRefused) {
  test::Golden g = fp8_checkpoint("tiny-deepseek-v3-fp8-b16");
  const std::string norm = "model.layers.0.input_layernorm.weight";
  std::string e = load_error(g.model_dir, [&](std::vector<TensorToWrite>& t, Json&) {
    TensorToWrite& n = tensor(t, norm);
    n.dtype = DType::F8_E4M3;
    n.bytes = std::string(64, '\x38');  // 1.0 each
  });
  EXPECT_HAS(e, "tensor '" + norm + "' is F8_E4M3 of shape [64]; kvad reads FP8 only as a matrix with block scales");
  e = load_error(g.model_dir, [](std::vector<TensorToWrite>& t, Json&) { tensor(t, kQb).bytes[100] = '\x7f'; });
  EXPECT_HAS(e, "tensor '" + kQb + "' holds a NaN code (0x7f or 0xff) in row 2");
  // A scale beside a weight that is not FP8 is read by nothing: the unread-tensor guard names it.
  e = load_error(g.model_dir, [](std::vector<TensorToWrite>& t, Json&) {
    TensorToWrite& w = tensor(t, kQb);
    w.dtype = DType::BF16;
    w.bytes = std::string(w.bytes.size() * 2, '\0');
  });
  EXPECT_HAS(e, "were not used by the model: " + kQb + "_scale_inv");
}

TEST(Fp8Load, AConv1DInFP8IsRefused) {  // GPT-2 stores [in, out]: no FP8 checkpoint does
  SynthOptions o;
  o.arch = "gpt2";
  o.preset = "tiny";
  o.out = test::temp_dir("fp8-gpt2");
  synthesize(o);
  std::string e = load_error(o.out, [](std::vector<TensorToWrite>& t, Json& c) {
    c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}};
    auto it = std::find_if(t.begin(), t.end(),
                           [](const TensorToWrite& x) { return x.name.ends_with("h.0.attn.c_attn.weight"); });
    ASSERT_NE(it, t.end());
    it->bytes = std::string(it->bytes.size() / dtype_size(it->dtype), '\x38');
    it->dtype = DType::F8_E4M3;
  });
  EXPECT_HAS(e, "h.0.attn.c_attn.weight' is F8_E4M3, which kvad reads only for [out, in] matrices");
}

TEST(Fp8Config, OtherQuantisationMethodsAreNamedAndRefused) {
  auto error_of = [](const Json& q) -> std::string {
    try {
      quantization_field(Json{{"quantization_config", q}}, "m/config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const Json fp8 = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                    {"weight_block_size", {128, 128}}};
  EXPECT_EQ(error_of(fp8), "");
  const Fp8Blocks b = quantization_field(Json{{"quantization_config", fp8}}, "m/config.json");
  EXPECT_EQ(b.rows, 128);
  EXPECT_EQ(b.cols, 128);
  EXPECT_FALSE(quantization_field(Json::object(), "m/config.json").any());  // not quantised at all
  for (const char* method : {"gptq", "awq", "bitsandbytes", "compressed-tensors"}) {
    std::string e = error_of({{"quant_method", method}, {"bits", 4}});
    EXPECT_HAS(e, std::string("m/config.json: quantization_config: quant_method '") + method +
                      "' is a format kvad does not read");
  }
  Json q = fp8;
  q.erase("quant_method");
  EXPECT_HAS(error_of(q), "quantization_config: no quant_method");
  q = fp8;
  q["fmt"] = "e5m2";
  EXPECT_HAS(error_of(q), "fmt 'e5m2' is not read");
  q = fp8;
  q["activation_scheme"] = "static";
  EXPECT_HAS(error_of(q), "activation_scheme 'static' is not read");
  q = fp8;
  q.erase("weight_block_size");
  EXPECT_HAS(error_of(q), "quantization_config: no weight_block_size");
  for (const Json& bad : {Json::array({128}), Json::array({0, 128}), Json::array({128, -1}), Json::array({"128", 128}),
                          Json(128)}) {
    q = fp8;
    q["weight_block_size"] = bad;
    const std::string e = error_of(q);
    EXPECT_TRUE(e.find("weight_block_size must be [rows, cols]") != std::string::npos ||
                e.find("weight_block_size entries must be counts from 1") != std::string::npos)
        << bad.dump() << ": " << e;
  }
}
