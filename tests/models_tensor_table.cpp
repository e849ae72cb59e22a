// The families' tensor tables (models/tensors.h) against what is independent of them: every synth
// preset of every registered architecture written, loaded and checked by the unread-tensor guard;
// parameter counts against the safetensors headers as written (a plain parse of the header here)
// and against the peer's own count of the real models (../shared/peer/synth.py); weight bytes and
// decode bytes against those headers; the GGUF metadata translation and name map on a hand-made
// file (what the peer's llama.cpp-style converter writes is read in cli_gguf.cpp, which has the
// synth command that writes a tokenizer for it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/gguf_model.h"
#include "models/registry.h"
#include "models/synth.h"
#include "test_support.h"

using namespace kvad;
using kvad::test::GgufWriter;

namespace {

// What a safetensors file's header says, read without kvad's reader: u64 length, then JSON.
struct HeaderCount {
  int64_t elements = 0;
  std::map<std::string, std::vector<int64_t>> shapes;
};

void add_header(const std::string& path, HeaderCount& out) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read((char*)&n, 8);
  std::string text(n, '\0');
  f.read(text.data(), (std::streamsize)n);
  Json header = Json::parse(text);
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    std::vector<int64_t> shape = t["shape"];
    int64_t e = 1;
    for (int64_t d : shape) e *= d;
    out.elements += e;
    out.shapes[name] = shape;
  }
}

HeaderCount count_headers(const std::string& dir) {
  HeaderCount c;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") add_header(e.path().string(), c);
  return c;
}

bool is_tiny(const std::string& preset) { return preset.rfind("tiny", 0) == 0; }

}  // namespace

// Every preset small enough to write: synth from the table, load through the table (the guard
// passes: every tensor written is read), and the sizes derived from the table equal the headers'.
TEST(TensorTable, EveryTinyPresetLoadsAndCountsWhatItsHeadersSay) {
  int checked = 0;
  for (const Architecture& a : architectures())
    for (const SynthPreset& p : a.presets) {
      if (!is_tiny(p.name)) continue;
      SCOPED_TRACE(a.model_type + " " + p.name);
      bool small_vocab = p.name != "tiny";  // the real vocabularies: bf16 keeps the file small
      SynthOptions o;
      o.arch = a.model_type;
      o.preset = p.name;
      o.out = test::temp_dir("table-" + a.model_type + "-" + p.name);
      o.dtype = small_vocab ? DType::F32 : DType::BF16;
      o.norm_jitter = 0.1;
      SynthResult r = synthesize(o);
      HeaderCount h = count_headers(o.out);
      std::unique_ptr<Model> m = load_model_dir(o.out, {});
      EXPECT_EQ(m->parameter_count(), h.elements);
      EXPECT_EQ(r.parameters, h.elements);
      // The table lists exactly what was written, at the written shapes, tied copies aside.
      TensorList table = a.tensors(m->config());
      size_t listed = 0;
      for (const TensorDecl& d : table) {
        if (!d.tied_to.empty()) continue;
        listed++;
        EXPECT_EQ(h.shapes[d.hf], d.shape) << d.hf;
      }
      EXPECT_EQ(listed, h.shapes.size());
      if (o.dtype == DType::F32) {
        EXPECT_EQ(m->weight_bytes(), (size_t)h.elements * 4);  // loaded as stored
      }
      if (m->config().tie_embeddings && a.model_type != "gpt2")
        EXPECT_EQ(m->decode_read_bytes(), m->weight_bytes());  // the embedding is the head: read whole
      else
        EXPECT_LT(m->decode_read_bytes(), m->weight_bytes());  // lookup tables: one row a step
      checked++;
    }
  EXPECT_GE(checked, 15);  // 5 architectures x tiny, tiny-v512, tiny-kq
}

// The real shapes are too big to write in a test; their tables count what the peer counts.
TEST(TensorTable, RealPresetsHaveThePeersParameterCounts) {
  // ../shared/peer/synth.py: sum of np.prod(shape) over its tensor_specs, per preset.
  const std::map<std::string, int64_t> peer = {{"qwen2.5-0.5b", 494032768}, {"qwen3-0.6b", 596049920},
                                               {"llama-3.2-1b", 1235814400}, {"smollm2-135m", 134515008},
                                               {"gpt2", 124439808}, {"qwen3-30b-a3b", 30532122624},
                                               // kvad's own benchmark shape (no real model): the
                                               // peer's tensor_specs on the same config.json
                                               {"bench", 424953856}, {"bench-lite", 374389632},
                                               {"deepseek-v2-lite", 15706484224},
                                               {"deepseek-v2", 235741434880}, {"deepseek-v3", 671026419200},
                                               {"qwen3-next-80b-a3b", 79674391296}, {"bench-next", 93158992}};
  int checked = 0;
  for (const Architecture& a : architectures())
    for (const SynthPreset& p : a.presets) {
      if (is_tiny(p.name)) continue;
      Json c = p.config;
      c["architectures"] = {a.name};
      c["model_type"] = a.model_type;
      c.update(a.config_defaults);
      ASSERT_TRUE(peer.count(p.name)) << p.name << ": add the peer's count";
      EXPECT_EQ(parameter_count(a.tensors(a.parse_config(c, p.name))), peer.at(p.name)) << p.name;
      checked++;
    }
  EXPECT_EQ(checked, (int)peer.size());
}

TEST(TensorTable, TiedHeadSavedAnywayMustEqualTheEmbedding) {
  SynthOptions o;
  o.arch = "qwen2";
  o.preset = "tiny-v512";
  o.out = test::temp_dir("table-tied");
  o.dtype = DType::F32;
  synthesize(o);
  SafetensorsFile st(join_path(o.out, "model.safetensors"));
  std::vector<TensorToWrite> tensors;
  const TensorView* embed = nullptr;
  for (const TensorView& t : st.tensors()) {
    tensors.push_back({t.name, t.dtype, t.shape, std::string((const char*)t.data, t.nbytes)});
    if (t.name == "model.embed_tokens.weight") embed = &t;
  }
  ASSERT_NE(embed, nullptr);
  std::string head((const char*)embed->data, embed->nbytes);
  tensors.push_back({"lm_head.weight", DType::F32, embed->shape, head});
  std::string same = test::temp_dir("table-tied-same");
  for (const char* f : {"config.json", "generation_config.json"})
    atomic_write_file(join_path(same, f), read_file(join_path(o.out, f)));
  write_safetensors(join_path(same, "model.safetensors"), tensors);
  EXPECT_NO_THROW(load_model_dir(same, {}));  // the same bytes: accepted, and counted read
  head[5] ^= 1;
  tensors.back().bytes = head;
  write_safetensors(join_path(same, "model.safetensors"), tensors);
  try {
    load_model_dir(same, {});
    FAIL() << "a tied head that differs from the embedding must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight differs from model.embed_tokens.weight"), std::string::npos)
        << e.what();
  }
}

namespace {

using test::iota_floats;
GgufWriter llama_file() { return test::small_llama_gguf(); }

std::shared_ptr<GgufFile> parse(const std::string& bytes) {
  return std::make_shared<GgufFile>((const uint8_t*)bytes.data(), bytes.size(), "t.gguf");
}

}  // namespace

TEST(GgufConfig, ModelConfigFromMetadata) {
  std::string b = llama_file().bytes();
  Json c = gguf_model_config(*parse(b));
  EXPECT_EQ(c["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(c["hidden_size"], 8);
  EXPECT_EQ(c["num_attention_heads"], 2);
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_EQ(c["vocab_size"], 6);
  EXPECT_EQ(c["tie_word_embeddings"], true);  // no output.weight
  EXPECT_FLOAT_EQ(c["rope_theta"].get<float>(), 500000.0f);
  EXPECT_EQ(c["rope_scaling"]["rope_type"], "freq_factors");
  EXPECT_EQ(c["rope_scaling"]["factors"], Json::parse("[1.0, 4.0]"));

  GgufWriter w = llama_file();
  w.str("llama.rope.scaling.type", "yarn");
  std::string yarn = w.bytes();
  EXPECT_THROW(gguf_model_config(*parse(yarn)), Error);

  GgufWriter m;
  m.str("general.architecture", "mamba");
  m.f32_tensor("token_embd.weight", {8, 6}, iota_floats(48));
  std::string mamba = m.bytes();
  try {
    gguf_model_config(*parse(mamba));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mamba' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gpt2, deepseek2, qwen3next)"),
              std::string::npos)
        << e.what();
  }
}

// The llama table's GGUF names, and its Q rows put back in Hugging Face order.
TEST(GgufConfig, LlamaTableNamesTheTensorsAndUndoesThePermutation) {
  std::string b = llama_file().bytes();
  auto f = parse(b);
  const Architecture* a = find_gguf_architecture("llama");
  ASSERT_NE(a, nullptr);
  ModelConfig config = a->parse_config(gguf_model_config(*f), "t.gguf");
  std::shared_ptr<GgufCheckpoint> ck = gguf_checkpoint(f, *a, config);
  EXPECT_EQ(ck->get("model.embed_tokens.weight").shape, (std::vector<int64_t>{6, 8}));
  const float* v = (const float*)ck->get("model.layers.0.self_attn.q_proj.weight").data;
  int gguf_row_of[8] = {0, 2, 1, 3, 4, 6, 5, 7};  // per head of 4: HF rows (0, 1 | 2, 3) stored (0, 2, 1, 3)
  for (int hf = 0; hf < 8; hf++) EXPECT_EQ(v[hf * 8], (float)(8 * gguf_row_of[hf])) << hf;
  EXPECT_NO_THROW(ck->check_all_read({}));  // rope_freqs.weight: read by the metadata step
}
