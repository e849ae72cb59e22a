// The GGUF reader: a valid file read back (metadata, tensors under Hugging Face names, llama.cpp's
// Q/K permutation undone, GPT-2's [out, in] matrices marked transposed, unknown names kept for the
// unread-tensor guard), the config and tokenizer built from the metadata, and bad files - wrong
// magic or version, every truncation, absurd counts and string lengths, offsets out of range or
// misaligned, n_dims > 4, unknown and unsupported types - each a clear error.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "gguf_writer.h"
#include "io/gguf.h"

using namespace kvad;
using kvad::test::GgufWriter;

namespace {

std::string error_of(const std::string& bytes) {
  try {
    GgufFile f((const uint8_t*)bytes.data(), bytes.size(), "t.gguf");
    GgufCheckpoint ck(std::make_shared<GgufFile>((const uint8_t*)bytes.data(), bytes.size(), "t.gguf"));
    (void)ck;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(bytes, part)                                              \
  do {                                                                         \
    std::string msg_ = error_of(bytes);                                        \
    EXPECT_NE(msg_.find(part), std::string::npos) << "error was: " << msg_;   \
  } while (0)

std::vector<float> iota(size_t n, float scale = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = (float)i * scale;
  return v;
}

// A small llama file: 2 heads of 4 (q), 1 kv head, hidden 8, one layer, vocab 6.
GgufWriter llama_file() {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 1);
  w.u32("llama.context_length", 64);
  w.u32("llama.embedding_length", 8);
  w.u32("llama.feed_forward_length", 16);
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.f32("llama.rope.freq_base", 500000.0f);
  w.f32_tensor("token_embd.weight", {8, 6}, iota(48));
  w.f32_tensor("blk.0.attn_q.weight", {8, 8}, iota(64));  // rows 0..7: value = 8 * row + col
  w.f32_tensor("blk.0.attn_k.weight", {8, 4}, iota(32));
  w.f32_tensor("rope_freqs.weight", {2}, {1.0f, 4.0f});
  w.f32_tensor("blk.0.mystery.weight", {8}, iota(8));
  return w;
}

}  // namespace

TEST(Gguf, ReadsMetadataAndTensors) {
  std::string b = llama_file().bytes();
  GgufFile f((const uint8_t*)b.data(), b.size(), "t.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_int("llama.block_count").value(), 1);
  EXPECT_FLOAT_EQ((float)f.get_float("llama.rope.freq_base").value(), 500000.0f);
  EXPECT_FALSE(f.get_int("llama.missing").has_value());
  EXPECT_THROW(f.get_string("llama.block_count"), Error);  // wrong type: an error naming the key
  ASSERT_EQ(f.tensors().size(), 5u);
  const GgufTensorInfo* q = f.tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(q->nbytes, 256u);
  EXPECT_EQ((uintptr_t)(q->data - (const uint8_t*)b.data()) % 32, 0u);
}

TEST(Gguf, CheckpointUsesHuggingFaceNamesAndUndoesTheLlamaPermutation) {
  std::string b = llama_file().bytes();
  GgufCheckpoint ck(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"));
  EXPECT_TRUE(ck.has("model.embed_tokens.weight"));
  EXPECT_TRUE(ck.has("blk.0.mystery.weight"));  // unknown: kept, so the guard reports it
  TensorView e = ck.get("model.embed_tokens.weight");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{6, 8}));
  // llama.cpp's permute: per head of 4 rows, HF rows (0, 1 | 2, 3) are stored as (0, 2, 1, 3).
  // The checkpoint must give HF's order back: GGUF row h*4 + 2i + j is HF row h*4 + 2j + i.
  TensorView q = ck.get("model.layers.0.self_attn.q_proj.weight");
  const float* v = (const float*)q.data;
  int gguf_row_of[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int hf = 0; hf < 8; hf++)
    for (int c = 0; c < 8; c++) ASSERT_EQ(v[hf * 8 + c], (float)(8 * gguf_row_of[hf] + c)) << hf;
  TensorView k = ck.get("model.layers.0.self_attn.k_proj.weight");  // one kv head
  for (int hf = 0; hf < 4; hf++) EXPECT_EQ(((const float*)k.data)[hf * 8], (float)(8 * gguf_row_of[hf]));
  // The guard still names what was not read.
  try {
    ck.check_all_read({});
    FAIL() << "unread tensors must be reported";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("blk.0.mystery.weight"), std::string::npos) << err.what();
  }
}

TEST(Gguf, PermutationRoundTripsForBlockRows) {
  // Any row format: a row is row_bytes of opaque data.
  int64_t heads = 3, hd = 6, rows = heads * hd;
  size_t rb = 34;  // one Q8_0 block per row
  std::vector<uint8_t> hf(rows * rb), gg(rows * rb), back(rows * rb);
  for (size_t i = 0; i < hf.size(); i++) hf[i] = (uint8_t)(i * 7 + i / rb);
  // convert_hf_to_gguf.py permute: reshape(heads, 2, hd/2) -> swap -> (heads, hd/2, 2).
  for (int64_t h = 0; h < heads; h++)
    for (int64_t j = 0; j < 2; j++)
      for (int64_t i = 0; i < hd / 2; i++)
        std::memcpy(&gg[(h * hd + i * 2 + j) * rb], &hf[(h * hd + j * (hd / 2) + i) * rb], rb);
  gguf_unpermute_rows(gg.data(), back.data(), rows, rb, heads);
  EXPECT_EQ(back, hf);
}

TEST(Gguf, Gpt2MatricesArePresentedAsConv1DTransposed) {
  GgufWriter w;
  w.str("general.architecture", "gpt2");
  w.f32_tensor("blk.0.attn_qkv.weight", {4, 12}, iota(48));  // [out 12][in 4]
  w.f32_tensor("blk.0.attn_qkv.bias", {12}, iota(12));
  w.f32_tensor("position_embd.weight", {4, 16}, iota(64));
  std::string b = w.bytes();
  GgufCheckpoint ck(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"));
  TensorView t = ck.get("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 12}));  // HF Conv1D [in, out]
  EXPECT_TRUE(t.transposed);
  EXPECT_FALSE(ck.get("transformer.h.0.attn.c_attn.bias").transposed);
  TensorView p = ck.get("transformer.wpe.weight");
  EXPECT_EQ(p.shape, (std::vector<int64_t>{16, 4}));
  EXPECT_FALSE(p.transposed);
}

TEST(Gguf, ModelConfigFromMetadata) {
  std::string b = llama_file().bytes();
  GgufCheckpoint ck(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"));
  Json c = gguf_model_config(ck);
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
  b = w.bytes();
  GgufCheckpoint yarn(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"));
  EXPECT_THROW(gguf_model_config(yarn), Error);

  GgufWriter m;
  m.str("general.architecture", "mamba");
  m.f32_tensor("token_embd.weight", {8, 6}, iota(48));
  b = m.bytes();
  GgufCheckpoint mamba(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"));
  try {
    gguf_model_config(mamba);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mamba' is not supported"), std::string::npos) << e.what();
  }
}

TEST(Gguf, TokenizerJsonFromMetadata) {
  GgufWriter w;
  w.str("general.architecture", "qwen2");
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", "qwen2");
  w.strs("tokenizer.ggml.tokens", {"a", "b", "ab", "[PAD3]", "<|im_end|>", "<think>"});
  w.i32s("tokenizer.ggml.token_type", {1, 1, 1, 5, 3, 4});
  w.strs("tokenizer.ggml.merges", {"a b"});
  w.u32("tokenizer.ggml.eos_token_id", 4);
  w.str("tokenizer.chat_template", "{{ messages }}");
  std::string b = w.bytes();
  GgufFile f((const uint8_t*)b.data(), b.size(), "t.gguf");
  GgufTokenizerJson t = gguf_tokenizer(f);
  EXPECT_EQ(t.tokenizer["model"]["vocab"], Json::parse(R"({"a": 0, "b": 1, "ab": 2})"));
  EXPECT_EQ(t.tokenizer["model"]["merges"], Json::parse(R"(["a b"])"));
  EXPECT_EQ(t.tokenizer["normalizer"]["type"], "NFC");
  ASSERT_EQ(t.tokenizer["added_tokens"].size(), 2u);
  EXPECT_EQ(t.tokenizer["added_tokens"][0]["special"], true);
  EXPECT_EQ(t.tokenizer["added_tokens"][1]["special"], false);
  EXPECT_EQ(t.config["eos_token"], "<|im_end|>");
  EXPECT_EQ(t.config["chat_template"], "{{ messages }}");
  EXPECT_EQ(t.end_of_generation, std::vector<int32_t>{4});

  GgufWriter bad = w;
  bad.str("tokenizer.ggml.pre", "deepseek-coder");
  b = bad.bytes();
  GgufFile fb((const uint8_t*)b.data(), b.size(), "t.gguf");
  EXPECT_THROW(gguf_tokenizer(fb), Error);
  GgufWriter spm;
  spm.str("tokenizer.ggml.model", "llama");
  b = spm.bytes();
  GgufFile fs((const uint8_t*)b.data(), b.size(), "t.gguf");
  try {
    gguf_tokenizer(fs);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'llama' is not supported"), std::string::npos) << e.what();
  }
}

TEST(GgufBadInput, MagicAndVersion) {
  std::string b = llama_file().bytes();
  std::string m = b;
  m[3] = 'X';
  EXPECT_ERROR(m, "not a GGUF file");
  EXPECT_ERROR(std::string(""), "not a GGUF file");
  EXPECT_ERROR(std::string("GG"), "not a GGUF file");
  for (auto [v, msg] : {std::pair{1u, "version 1 is not supported"}, {4u, "unsupported GGUF version 4"},
                        {0x03000000u, "byte-swapped"}}) {
    std::string x = b;
    std::memcpy(&x[4], &v, 4);
    EXPECT_ERROR(x, msg);
  }
  GgufWriter w2 = llama_file();
  w2.version = 2;
  EXPECT_EQ(error_of(w2.bytes()), "");
}

TEST(GgufBadInput, EveryTruncationIsAnError) {
  std::string b = llama_file().bytes();
  for (size_t n = 0; n < b.size(); n++) {
    std::string msg = error_of(b.substr(0, n));
    ASSERT_FALSE(msg.empty()) << "truncated to " << n << " bytes was accepted";
  }
  EXPECT_EQ(error_of(b), "");
}

TEST(GgufBadInput, AbsurdCountsAndLengths) {
  std::string b = llama_file().bytes();
  std::string x = b;
  uint64_t huge = 1ull << 62;
  std::memcpy(&x[8], &huge, 8);  // n_tensors
  EXPECT_ERROR(x, "claims");
  x = b;
  std::memcpy(&x[16], &huge, 8);  // n_kv
  EXPECT_ERROR(x, "claims");
  x = b;
  uint64_t len = ~0ull;
  std::memcpy(&x[24], &len, 8);  // the first key's length
  EXPECT_ERROR(x, "length");

  // Arrays claiming 2^40 elements (after the key, its ARRAY type and the element type).
  GgufWriter w2;
  w2.strs("tokenizer.ggml.tokens", {"x"});
  std::string s = w2.bytes();
  size_t at = 24 + 8 + 21 + 4 + 4;
  uint64_t n = 1ull << 40;
  std::memcpy(&s[at], &n, 8);
  EXPECT_ERROR(s, "claims");
  GgufWriter w3;
  w3.i32s("x", {1, 2});
  s = w3.bytes();
  at = 24 + 8 + 1 + 4 + 4;
  std::memcpy(&s[at], &n, 8);
  EXPECT_ERROR(s, "claims");
}

TEST(GgufBadInput, TensorInfoProblems) {
  auto one = [](std::vector<int64_t> ne, uint32_t type, std::string bytes, int64_t offset = -1) {
    GgufWriter w;
    w.str("general.architecture", "llama");
    w.tensor("t", std::move(ne), type, std::move(bytes), offset);
    return w.bytes();
  };
  std::string f32x8(32, '\0');
  EXPECT_EQ(error_of(one({8}, 0, f32x8)), "");
  EXPECT_ERROR(one({8}, 0, f32x8, 64), "runs past the end");
  EXPECT_ERROR(one({8}, 0, f32x8, 4), "not a multiple of the alignment");
  EXPECT_ERROR(one({8}, 0, f32x8, (int64_t)1 << 62), "runs past the end");
  EXPECT_ERROR(one({2, 2, 2, 1, 1}, 0, f32x8), "5 dimensions");
  EXPECT_ERROR(one({8}, 99, f32x8), "unknown ggml type 99");
  EXPECT_ERROR(one({256}, 16, std::string(66, '\0')), "IQ2_XXS, which kvad does not read");
  EXPECT_ERROR(one({33}, 8, std::string(68, '\0')), "not whole Q8_0 blocks");
  EXPECT_ERROR(one({0}, 0, ""), "must be positive");
  EXPECT_ERROR(one({1ll << 40, 1ll << 40}, 0, f32x8), "overflows");
  EXPECT_ERROR(one({8, 1ll << 50}, 0, f32x8), "runs past the end");

  GgufWriter dup;
  dup.f32_tensor("t", {8}, iota(8));
  dup.f32_tensor("t", {8}, iota(8));
  EXPECT_ERROR(dup.bytes(), "appears twice");
  GgufWriter overlap;
  overlap.tensor("a", {16}, 0, std::string(64, '\0'), 0);
  overlap.tensor("b", {8}, 0, std::string(32, '\0'), 32);
  EXPECT_ERROR(overlap.bytes(), "overlap");
  GgufWriter key2;
  key2.allow_duplicates = true;
  key2.u32("k", 1);
  key2.u32("k", 2);
  EXPECT_ERROR(key2.bytes(), "appears twice");
  GgufWriter align;
  align.u32("general.alignment", 48);
  EXPECT_ERROR(align.bytes(), "not a power of two");
  GgufWriter align2;
  align2.str("general.alignment", "32");
  EXPECT_ERROR(align2.bytes(), "must be a u32");
  GgufWriter badtype;
  badtype.u32("k", 1);
  std::string s = badtype.bytes();
  uint32_t t = 77;
  std::memcpy(&s[24 + 8 + 1], &t, 4);
  EXPECT_ERROR(s, "unknown value type 77");
  GgufWriter longname;
  longname.f32_tensor(std::string(64, 'n'), {8}, iota(8));
  EXPECT_ERROR(longname.bytes(), "name of 64 bytes");
}

TEST(GgufBadInput, PermutationNeedsWholeHeads) {
  GgufWriter v;
  v.str("general.architecture", "llama");
  v.u32("llama.attention.head_count", 3);
  v.f32_tensor("blk.0.attn_q.weight", {8, 8}, iota(64));  // 8 rows are not 3 heads
  EXPECT_ERROR(v.bytes(), "heads of even size");
}
