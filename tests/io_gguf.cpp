// The GGUF reader: a valid file read back (metadata, tensors under the names a map gives them,
// llama.cpp's Q/K permutation undone, Conv1D matrices marked transposed, unknown names kept for
// the unread-tensor guard), the tokenizer built from the metadata, and bad files - wrong
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

std::string gguf_error_of(const std::string& bytes) {
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
    std::string msg_ = gguf_error_of(bytes);                                        \
    EXPECT_NE(msg_.find(part), std::string::npos) << "error was: " << msg_;   \
  } while (0)

using kvad::test::iota_floats;
std::vector<float> iota(size_t n, float scale = 1) { return iota_floats(n, scale); }

// test::small_llama_gguf() with a K matrix and a tensor no family has.
GgufWriter llama_file() {
  GgufWriter w = test::small_llama_gguf();
  w.f32_tensor("blk.0.attn_k.weight", {8, 4}, iota(32));
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

// io knows no architecture: the map is what models/ builds from a family's tensor table.
TEST(Gguf, CheckpointPresentsTheGivenNamesAndUndoesThePermutation) {
  std::string b = llama_file().bytes();
  GgufNameMap names = {{"token_embd.weight", {"embed", false, 0, {}}},
                       {"blk.0.attn_q.weight", {"q", false, 2, {}}},
                       {"blk.0.attn_k.weight", {"k", false, 1, {}}}};
  GgufCheckpoint ck(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"), names);
  EXPECT_TRUE(ck.has("embed"));
  EXPECT_TRUE(ck.has("blk.0.mystery.weight"));  // unknown: kept, so the guard reports it
  TensorView e = ck.get("embed");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{6, 8}));
  // llama.cpp's permute: per head of 4 rows, HF rows (0, 1 | 2, 3) are stored as (0, 2, 1, 3).
  // The checkpoint must give HF's order back: GGUF row h*4 + 2i + j is HF row h*4 + 2j + i.
  TensorView q = ck.get("q");
  const float* v = (const float*)q.data;
  int gguf_row_of[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int hf = 0; hf < 8; hf++)
    for (int c = 0; c < 8; c++) ASSERT_EQ(v[hf * 8 + c], (float)(8 * gguf_row_of[hf] + c)) << hf;
  TensorView k = ck.get("k");  // one kv head
  for (int hf = 0; hf < 4; hf++) EXPECT_EQ(((const float*)k.data)[hf * 8], (float)(8 * gguf_row_of[hf]));
  // The guard still names what was not read.
  try {
    ck.check_all_read({});
    FAIL() << "unread tensors must be reported";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("blk.0.mystery.weight"), std::string::npos) << err.what();
  }
  GgufCheckpoint plain(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"));
  EXPECT_TRUE(plain.has("blk.0.attn_q.weight"));  // no map: the file's own names
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

TEST(Gguf, Conv1DMatricesArePresentedTransposed) {
  GgufWriter w;
  w.str("general.architecture", "gpt2");
  w.f32_tensor("blk.0.attn_qkv.weight", {4, 12}, iota(48));  // [out 12][in 4]
  w.f32_tensor("blk.0.attn_qkv.bias", {12}, iota(12));
  w.f32_tensor("position_embd.weight", {4, 16}, iota(64));
  std::string b = w.bytes();
  GgufNameMap names = {{"blk.0.attn_qkv.weight", {"qkv", true, 0, {}}},
                       {"blk.0.attn_qkv.bias", {"qkv.bias", false, 0, {}}},
                       {"position_embd.weight", {"wpe", false, 0, {}}}};
  GgufCheckpoint ck(std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf"), names);
  TensorView t = ck.get("qkv");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 12}));  // HF Conv1D [in, out]
  EXPECT_TRUE(t.transposed);
  EXPECT_FALSE(ck.get("qkv.bias").transposed);
  TensorView p = ck.get("wpe");
  EXPECT_EQ(p.shape, (std::vector<int64_t>{16, 4}));
  EXPECT_FALSE(p.transposed);
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
  GgufTokenizerParts t = gguf_tokenizer(f);
  using Piece = std::pair<std::string_view, int32_t>;
  EXPECT_EQ(t.vocab, (std::vector<Piece>{{"a", 0}, {"b", 1}, {"ab", 2}}));
  EXPECT_EQ(t.merges, std::vector<std::string_view>{"a b"});
  EXPECT_FALSE(t.tokenizer["model"].contains("vocab"));
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
  EXPECT_EQ(gguf_error_of(w2.bytes()), "");
}

TEST(GgufBadInput, EveryTruncationIsAnError) {
  std::string b = llama_file().bytes();
  for (size_t n = 0; n < b.size(); n++) {
    std::string msg = gguf_error_of(b.substr(0, n));
    ASSERT_FALSE(msg.empty()) << "truncated to " << n << " bytes was accepted";
  }
  EXPECT_EQ(gguf_error_of(b), "");
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
  EXPECT_EQ(gguf_error_of(one({8}, 0, f32x8)), "");
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
  v.f32_tensor("blk.0.attn_q.weight", {8, 8}, iota(64));  // 8 rows are not 3 heads
  std::string b = v.bytes();
  auto f = std::make_shared<GgufFile>((const uint8_t*)b.data(), b.size(), "t.gguf");
  try {
    GgufCheckpoint ck(f, {{"blk.0.attn_q.weight", {"q", false, 3, {}}}});
    FAIL() << "8 rows cannot be 3 permuted heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("heads of even size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
  }
}
