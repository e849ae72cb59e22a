// A model named by a .gguf path: model, tokenizer, end-of-generation ids from the one file; the
// GGUF tokenizer gives the Hugging Face ids (the fixture tokenizers converted as
// ../shared/peer/to_gguf.py does, against the HF reference goldens); --quant refused on GGUF;
// --quant q4k/q6k on Hugging Face checkpoints, refused up front when a width is not a multiple
// of 256.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "one_sequence.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "models/synth.h"
#include "runtime/gguf_loader.h"
#include "runtime/loader.h"
#include "test_support.h"

using namespace kvad;
using kvad::test::GgufWriter;
using test::error_of;

namespace {

std::string fixture(const std::string& name) { return test::source_path("tests/fixtures/gguf/" + name + ".gguf"); }

// What to_gguf.py (like convert_hf_to_gguf.py) writes for a tokenizer.json + tokenizer_config.json.
std::string gguf_of_tokenizer(const std::string& family, const std::string& pre) {
  std::string dir = test::source_path("tests/fixtures/tokenizers/" + family);
  Json tj = read_json_file(dir + "/tokenizer.json"), tc = read_json_file(dir + "/tokenizer_config.json");
  std::map<int64_t, std::string> by_id;
  std::map<std::string, Json> added;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it) by_id[it->get<int64_t>()] = it.key();
  for (const Json& a : tj["added_tokens"]) {
    by_id[a["id"].get<int64_t>()] = a["content"];
    added[a["content"]] = a;
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t id = 0; id <= by_id.rbegin()->first; id++) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(id) + "]");
      types.push_back(5);
      continue;
    }
    const std::string& t = it->second;
    tokens.push_back(t);
    bool looks_special = t.size() > 4 && t.rfind("<|", 0) == 0 && t.compare(t.size() - 2, 2, "|>") == 0;
    if (added.count(t)) types.push_back(added[t]["special"].get<bool>() || looks_special ? 3 : 4);
    else types.push_back(1);
  }
  std::vector<std::string> merges;
  for (const Json& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", pre);
  w.strs("tokenizer.ggml.tokens", tokens);
  w.i32s("tokenizer.ggml.token_type", types);
  w.strs("tokenizer.ggml.merges", merges);
  auto id_of = [&](const char* key) -> std::optional<uint32_t> {
    if (!tc.contains(key) || !tc[key].is_string()) return std::nullopt;
    for (const Json& a : tj["added_tokens"])
      if (a["content"] == tc[key]) return a["id"].get<uint32_t>();
    return std::nullopt;
  };
  if (auto b = id_of("bos_token")) w.u32("tokenizer.ggml.bos_token_id", *b);
  if (auto e = id_of("eos_token")) w.u32("tokenizer.ggml.eos_token_id", *e);
  w.boolean("tokenizer.ggml.add_bos_token", false);  // none of the three fixtures adds BOS
  if (tc.contains("chat_template")) w.str("tokenizer.chat_template", tc["chat_template"]);
  return w.bytes();
}

std::string case_text(const Json& c) {
  if (c.contains("text")) return c["text"].get<std::string>();
  std::string hex = c["text_hex"].get<std::string>(), out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += (char)std::stoi(hex.substr(i, 2), nullptr, 16);
  return out;
}

class GgufTokenizer : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

}  // namespace

TEST_P(GgufTokenizer, IdsMatchTheHuggingFaceReference) {
  auto [family, pre] = GetParam();
  std::string bytes = gguf_of_tokenizer(family, pre);
  GgufFile f((const uint8_t*)bytes.data(), bytes.size(), std::string(family) + ".gguf");
  GgufTokenizerParts tj = gguf_tokenizer(f);
  Tokenizer tok = tokenizer_of_gguf(tj, "gguf tokenizer");
  Json goldens = read_json_file(test::source_path("tests/fixtures/tokenizer_goldens/goldens.json"));
  size_t n = 0;
  for (const Json& c : goldens["cases"]) {
    if (c["add_special"].get<bool>()) continue;
    std::string text = case_text(c);
    auto want = c["ids"][family].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, c["parse_special"].get<bool>()), want) << family << ": case " << c["name"];
    n++;
  }
  EXPECT_GE(n, 30u);
  // Same special tokens and template as tokenizer.json + tokenizer_config.json.
  std::string dir = test::source_path(std::string("tests/fixtures/tokenizers/") + family);
  Tokenizer hf = Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  EXPECT_EQ(tok.vocab_size(), hf.vocab_size());
  EXPECT_EQ(tok.eos_id(), hf.eos_id());
  EXPECT_EQ(tok.chat_template(), hf.chat_template());
  for (int32_t id : {0, 1, 100, 255, 256, 1000, hf.vocab_size() - 1}) EXPECT_EQ(tok.token_bytes(id), hf.token_bytes(id)) << id;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufTokenizer,
                         ::testing::Values(std::pair{"qwen3", "qwen2"}, std::pair{"llama3", "llama-bpe"},
                                           std::pair{"gpt2", "gpt-2"}),
                         [](const auto& info) { return std::string(info.param.first); });

TEST(GgufLoad, ModelTokenizerAndEosFromOneFile) {
  LoadedModel m = load_model(fixture("llama-q4_k_m"), {});
  EXPECT_EQ(m.path, fixture("llama-q4_k_m"));
  EXPECT_EQ(m.model->config().architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.model->config().vocab_size, 512);
  EXPECT_EQ(m.tokenizer->vocab_size(), 512);
  EXPECT_NE(std::find(m.eos_ids.begin(), m.eos_ids.end(), 511), m.eos_ids.end());
  EXPECT_EQ(m.tokenizer->decode(m.tokenizer->encode("hello there")), "hello there");
  EXPECT_EQ(m.model->weight_format(), "q4_K");
}

TEST(GgufLoad, QuantFlagIsRefusedWithAReason) {
  LoadOptions o;
  o.format = WeightFormat::Q8;
  std::string e = error_of([&] { load_model(fixture("qwen2-q6_k"), o); });
  EXPECT_NE(e.find("--quant q8 does not apply to a GGUF file"), std::string::npos) << e;
}

TEST(GgufLoad, OtherFilesAndBrokenGgufAreClearErrors) {
  std::string dir = test::temp_dir("gguf-bad");
  std::string txt = join_path(dir, "model.bin");
  std::ofstream(txt) << "x";
  std::string e = error_of([&] { load_model(txt, {}); });
  EXPECT_NE(e.find(".gguf"), std::string::npos) << e;
  std::string bad = join_path(dir, "broken.gguf");
  std::ofstream(bad) << "GGUF";
  e = error_of([&] { load_model(bad, {}); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

// kvad's own Q4_K / Q6_K quantisers against llama.cpp's on the same checkpoint: the fixture files
// were quantised by llama.cpp from these very weights (tools/make_gguf_goldens.py); kvad's
// --quant q4k / q6k must move the logits away from f32 no more than llama.cpp's files do.
TEST(KQuantFormats, HfCheckpointQuantisedAsWellAsLlamaCppDoes) {
  for (auto [name, fmt, fmt_name] : {std::tuple{"qwen2-q6_k", WeightFormat::Q6K, "q6_K"},
                                     {"llama-q4_k_m", WeightFormat::Q4K, "q4_K"}}) {
    Json g = read_json_file(test::source_path(std::string("tests/golden/gguf/") + name + ".json"));
    SynthOptions o;
    o.arch = g["synth"]["arch"];
    o.preset = g["synth"]["preset"];
    o.seed = g["synth"]["seed"];
    o.std = g["synth"]["std"];
    o.norm_jitter = g["synth"]["norm_jitter"];
    o.out = test::temp_dir(name);
    synthesize(o);
    std::vector<int32_t> prompt = g["prompt"];
    auto logits = [&](std::unique_ptr<Model> m) {
      std::vector<float> y(prompt.size() * m->config().vocab_size);
      test::OneSequence st(*m);
      st.forward(prompt.data(), (int64_t)prompt.size(), y.data(), true);
      return y;
    };
    auto load = [&](WeightFormat f) {
      LoadOptions lo;
      lo.format = f;
      auto m = load_model_dir(o.out, lo);
      if (f == fmt) {
        EXPECT_EQ(m->weight_format(), fmt_name);
      }
      return m;
    };
    std::vector<float> ref = logits(load(WeightFormat::F32)), ours = logits(load(fmt)),
                       theirs = logits(load_model_gguf(fixture(name), {}));
    double e_ours = 0, e_theirs = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); i++) {
      e_ours = std::max(e_ours, (double)std::fabs(ours[i] - ref[i]));
      e_theirs = std::max(e_theirs, (double)std::fabs(theirs[i] - ref[i]));
      scale = std::max(scale, (double)std::fabs(ref[i]));
    }
    std::printf("%s vs f32: kvad's quantiser %.3f, llama.cpp's %s file %.3f (max |diff| / max |logit|)\n", fmt_name,
                e_ours / scale, name, e_theirs / scale);
    EXPECT_LE(e_ours, 1.5 * e_theirs) << name;
  }
}

TEST(KQuantFormats, RefusedUpFrontWhenAWidthIsNotAMultipleOf256) {
  SynthOptions o;
  o.arch = "qwen2";
  o.preset = "tiny";  // 64 wide
  o.out = test::temp_dir("kq-refused");
  synthesize(o);
  LoadOptions lo;
  lo.format = WeightFormat::Q4K;
  std::string e = error_of([&] { load_model_dir(o.out, lo); });
  EXPECT_NE(e.find("multiple of 256"), std::string::npos) << e;
  EXPECT_NE(e.find("q8 or q4"), std::string::npos) << e;
}
