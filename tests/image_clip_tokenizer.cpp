// CLIP's tokenizer (src/tokenizer/clip.h) against transformers' slow CLIPTokenizer without ftfy
// (../shared/peer-image/goldens/tokens.json, variant `hf_slow`): pieces and padded ids of every
// golden text, for SD 1.5's tokenizer and both of SDXL's (tokenizer_2 pads with "!" = 0); and the
// folder's bad files, each error naming the file.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "peer_image.h"
#include "test_support.h"
#include "tokenizer/clip.h"

using namespace kvad;
using tok::ClipTokenizer;

namespace {

// Each tokenizer folder is read once for the whole file (49408 entries, 48894 merges).
const ClipTokenizer& folder(const std::string& rel) {
  static std::map<std::string, ClipTokenizer> cache;
  auto it = cache.find(rel);
  if (it == cache.end()) it = cache.emplace(rel, ClipTokenizer::from_folder(test::peer_image(rel))).first;
  return it->second;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

}  // namespace

TEST(ImageClipTokenizer, EveryGoldenTextAllThreeTokenizers) {
  KVAD_REQUIRE_PEER_IMAGE();
  Json gold = read_json_file(test::peer_image("goldens/tokens.json"));
  const ClipTokenizer& sd15 = folder("models/sd15-tiny/tokenizer");
  const ClipTokenizer& xl1 = folder("models/sdxl-tiny/tokenizer");
  const ClipTokenizer& xl2 = folder("models/sdxl-tiny/tokenizer_2");
  EXPECT_EQ(sd15.bos_id(), gold["bos_id"]);
  EXPECT_EQ(sd15.eos_id(), gold["eos_id"]);
  EXPECT_EQ(sd15.pad_id(), gold["sd15_pad_id"]);
  EXPECT_EQ(xl2.pad_id(), gold["sdxl_tokenizer_2_pad_id"]);
  ASSERT_EQ(gold["texts"].size(), 4u);
  for (auto& [name, t] : gold["texts"].items()) {
    SCOPED_TRACE(name);
    std::string text = t["text"];
    EXPECT_EQ(sd15.pieces(text), t["bpe_tokens_hf_slow"].get<std::vector<std::string>>());
    EXPECT_EQ((int64_t)sd15.encode(text).size() + 2, t["untruncated_length_hf_slow"].get<int64_t>());
    auto want = t["sd15_tokenizer"]["hf_slow"].get<std::vector<int32_t>>();
    EXPECT_EQ(sd15.encode_padded(text), want);
    EXPECT_EQ(xl1.encode_padded(text), want);  // SDXL's first tokenizer is SD 1.5's
    EXPECT_EQ(xl2.encode_padded(text), t["sdxl_tokenizer_2"]["hf_slow"].get<std::vector<int32_t>>());
  }
  // The README's example, and the special token written in a text.
  EXPECT_EQ(sd15.encode("a photo of a cat"), (std::vector<int32_t>{320, 1125, 539, 320, 2368}));
  EXPECT_EQ(sd15.encode("a cat<|endoftext|>dog"), (std::vector<int32_t>{320, 2368, 49407, 1929}));
}

TEST(ImageClipTokenizer, BasicTokenizerCleanup) {
  // NFC, controls and ZWJ removed, CJK ideographs split off, lower case, accents kept.
  EXPECT_EQ(tok::clip_basic_clean("  Cafe\xCC\x81\tNA\xC3\x8FVE\x01 \xE2\x80\x8D!"), "caf\xC3\xA9 na\xC3\xAFve !");
  EXPECT_EQ(tok::clip_basic_clean("\xE6\x97\xA5\xE6\x9C\xAC\xE3\x83\x86"), "\xE6\x97\xA5 \xE6\x9C\xAC \xE3\x83\x86");
  EXPECT_EQ(tok::clip_basic_clean("a\xFF" "b"), "ab");  // an ill-formed byte is dropped as U+FFFD would be
}

TEST(ImageClipTokenizer, BadFilesNameTheFile) {
  std::string dir = test::temp_dir("clip-tok");
  auto err = [&] { return test::error_of([&] { ClipTokenizer::from_folder(dir); }); };
  EXPECT_NE(err().find(join_path(dir, "vocab.json")), std::string::npos);
  std::string vocab = R"({"a</w>": 0, "b</w>": 1, "a": 2, "ab</w>": 3, "<|startoftext|>": 4, "<|endoftext|>": 5})";
  write(join_path(dir, "vocab.json"), vocab);
  EXPECT_NE(err().find("merges.txt"), std::string::npos);
  write(join_path(dir, "merges.txt"), "#version: 0.2\na b</w>\n");
  ClipTokenizer ok = ClipTokenizer::from_folder(dir);
  EXPECT_EQ(ok.encode_padded("AB a"), ok.encode_padded("ab a"));  // lower-cased
  EXPECT_EQ(ok.encode("ab a"), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(ok.encode("c"), (std::vector<int32_t>{5}));  // unknown piece: unk = <|endoftext|>

  write(join_path(dir, "merges.txt"), "#version: 0.2\na b c\n");
  EXPECT_NE(err().find("merges.txt: line 2"), std::string::npos) << err();
  write(join_path(dir, "merges.txt"), "#version: 0.2\n");
  EXPECT_NE(err().find("no merges"), std::string::npos) << err();
  write(join_path(dir, "merges.txt"), "#version: 0.2\na b</w>\n");

  write(join_path(dir, "vocab.json"), R"({"a": -1})");
  EXPECT_NE(err().find("vocab.json: 'a'"), std::string::npos) << err();
  write(join_path(dir, "vocab.json"), R"(["a"])");
  EXPECT_NE(err().find("vocab.json"), std::string::npos) << err();
  write(join_path(dir, "vocab.json"), R"({"a": 1)");
  EXPECT_NE(err().find("vocab.json"), std::string::npos) << err();
  write(join_path(dir, "vocab.json"), R"({"a": 0})");
  EXPECT_NE(err().find("bos token"), std::string::npos) << err();

  write(join_path(dir, "vocab.json"), vocab);
  write(join_path(dir, "tokenizer_config.json"), R"({"pad_token": "zzz"})");
  EXPECT_NE(err().find("tokenizer_config.json: pad_token 'zzz'"), std::string::npos) << err();
  write(join_path(dir, "tokenizer_config.json"), R"({"pad_token": {"content": "a</w>"}, "model_max_length": 1})");
  EXPECT_NE(err().find("model_max_length"), std::string::npos) << err();
  write(join_path(dir, "tokenizer_config.json"), R"({"pad_token": {"content": "a</w>"}, "model_max_length": 5})");
  ClipTokenizer small = ClipTokenizer::from_folder(dir);
  EXPECT_EQ(small.encode_padded("ab ab ab ab"), (std::vector<int32_t>{4, 3, 3, 3, 5}));  // truncated to 5
  EXPECT_EQ(small.encode_padded(""), (std::vector<int32_t>{4, 5, 0, 0, 0}));
}
