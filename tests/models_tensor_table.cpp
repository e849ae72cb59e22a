// The families' tensor tables (models/tensors.h): the GGUF metadata translation and name map on a
// hand-made file.
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
    EXPECT_NE(std::string(e.what()).find("'mamba' is not supported (supported: llama, qwen2, qwen3, gpt2)"),
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
