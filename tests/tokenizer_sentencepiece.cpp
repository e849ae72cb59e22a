// The SentencePiece-era parts of tokenizer.json on small hand-made files, one behaviour at a time:
// byte fallback and unk fusing in char-level BPE, the "▁" cut kvad makes inside long words, the
// Metaspace / WhitespaceSplit pre-tokenizers, the normalizers, the decoders (and streaming them),
// Unigram's best segmentation. Expected ids follow from each file by hand; the real files'
// goldens are in tokenizer_golden.cpp.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

namespace {

const char* kSpace = "\u2581";

// A char-level BPE tokenizer.json: vocab pieces -> ids in order, merges as "a b".
Json sp_bpe(const std::vector<std::string>& pieces, const std::vector<std::string>& merges, Json extra = Json::object()) {
  Json vocab = Json::object();
  for (size_t i = 0; i < pieces.size(); i++) vocab[pieces[i]] = i;
  Json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", "<unk>"}};
  for (auto it = extra.begin(); it != extra.end(); ++it) model[it.key()] = *it;
  return {{"added_tokens", Json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
          {"post_processor", nullptr}, {"decoder", nullptr}, {"model", model}};
}

Tokenizer load(const Json& j) { return Tokenizer::from_json(j, Json::object(), "t/tokenizer.json"); }

std::vector<std::string> pieces_of(const Tokenizer& t, const std::string& text, bool parse_special = true) {
  std::vector<std::string> out;
  for (int32_t id : t.encode(text, parse_special)) out.push_back(t.piece(id));
  return out;
}

std::string stream_decode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  StreamDecoder sd(t);
  std::string out;
  for (int32_t id : ids) out += sd.push(id);
  return out + sd.flush();
}

}  // namespace

TEST(SentencePieceBpe, ByteFallbackSpellsUnknownCharactersAsBytes) {
  // "é" (C3 A9) is not a piece; its two bytes are.
  Json j = sp_bpe({"<unk>", "a", "<0xC3>", "<0xA9>"}, {}, {{"byte_fallback", true}});
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a\xC3\xA9" "a"), (std::vector<int32_t>{1, 2, 3, 1}));
  // "ü" (C3 BC): <0xBC> is missing, so the character is unk.
  EXPECT_EQ(t.encode("\xC3\xBC" "a"), (std::vector<int32_t>{0, 1}));
  // Without byte_fallback every unknown character is unk.
  Tokenizer plain = load(sp_bpe({"<unk>", "a", "<0xC3>", "<0xA9>"}, {}));
  EXPECT_EQ(plain.encode("a\xC3\xA9"), (std::vector<int32_t>{1, 0}));
}

TEST(SentencePieceBpe, FuseUnkJoinsRunsOfUnknownCharacters) {
  Tokenizer fused = load(sp_bpe({"<unk>", "a"}, {}, {{"fuse_unk", true}}));
  EXPECT_EQ(fused.encode("xyzaxa"), (std::vector<int32_t>{0, 1, 0, 1}));
  Tokenizer apart = load(sp_bpe({"<unk>", "a"}, {}, {{"fuse_unk", false}}));
  EXPECT_EQ(apart.encode("xyzaxa"), (std::vector<int32_t>{0, 0, 0, 1, 0, 1}));
}

TEST(SentencePieceBpe, MergesRunOverCodePoints) {
  // Pieces are code points, not bytes: "é" is one symbol, merged with "t".
  Tokenizer t = load(sp_bpe({"<unk>", "\xC3\xA9", "t", "\xC3\xA9t"}, {"\xC3\xA9 t"}));
  EXPECT_EQ(t.encode("\xC3\xA9t\xC3\xA9"), (std::vector<int32_t>{3, 1}));
}

TEST(SentencePieceBpe, IgnoreMergesTakesWholeWords) {
  // "abc" is in the vocabulary but no merge builds it.
  std::vector<std::string> pieces = {"<unk>", "a", "b", "c", "ab", "abc"};
  EXPECT_EQ(load(sp_bpe(pieces, {"a b"})).encode("abc"), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(load(sp_bpe(pieces, {"a b"}, {{"ignore_merges", true}})).encode("abc"), (std::vector<int32_t>{5}));
}

TEST(SentencePieceBpe, WordsAreOnlyCutWhereNoMergeCanJoinThem) {
  // kvad cuts a long word before "▁" (HF merges Llama 2's whole text as one word). Here a piece
  // holds "a▁", so no cut after "a": "a▁b" merges as one word would.
  std::string s = kSpace;
  std::vector<std::string> pieces = {"<unk>", s, "a", "b", "a" + s, "a" + s + "b", s + "b", "c"};
  Tokenizer t = load(sp_bpe(pieces, {"a " + s, "a" + s + " b", s + " b"}));
  EXPECT_EQ(t.encode("a" + s + "b"), (std::vector<int32_t>{5}));
  // After "c" no piece continues with "▁": the cut is exact there.
  EXPECT_EQ(t.encode("c" + s + "b" + s + "b"), (std::vector<int32_t>{7, 6, 6}));
}

TEST(SentencePieceBpe, LlamaStyleNormalizerAndDecoder) {
  std::string s = kSpace;
  Json j = sp_bpe({"<unk>", s, "h", "i", s + "h", s + "hi", "<0x0A>"}, {s + " h", s + "h i"}, {{"byte_fallback", true}});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Prepend"}, {"prepend", s}},
                                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", s}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", s}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  Tokenizer t = load(j);
  std::vector<int32_t> ids = t.encode("hi hi\n");
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 5, 6}));
  EXPECT_EQ(t.decode(ids), "hi hi\n");  // the Prepend's space is stripped again
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});  // nothing prepended to nothing
  EXPECT_EQ(t.decode({1, 1, 5}), "  hi");           // only one leading space goes
  EXPECT_EQ(t.decode({6, 5}), "\n hi");
  // Streaming drops the same space, also when it arrives alone.
  EXPECT_EQ(stream_decode(t, {1, 1, 5}), "  hi");
  EXPECT_EQ(stream_decode(t, {1}), "");
  EXPECT_EQ(stream_decode(t, {5, 5}), "hi hi");
}

TEST(SentencePieceBpe, PerTokenStripBeforeFuse) {
  Json j = sp_bpe({"<unk>", "_a", "_b"}, {});
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Strip"}, {"content", "_"}, {"start", 1}, {"stop", 0}}, {{"type", "Fuse"}}}}};
  EXPECT_EQ(load(j).decode({1, 2}), "ab");
}

TEST(Metaspace, PrependSchemesAndSplit) {
  std::string s = kSpace;
  Json j = sp_bpe({"<unk>", s, "h", "i", s + "h", s + "hi", "hi", "<s>"}, {s + " h", s + "h i", "h i"});
  j["added_tokens"] = {{{"id", 7}, {"content", "<s>"}, {"special", true}}};
  auto with = [&](Json pre) {
    j["pre_tokenizer"] = std::move(pre);
    return load(j);
  };
  using P = std::vector<std::string>;
  Tokenizer always = with({{"type", "Metaspace"}, {"replacement", s}, {"prepend_scheme", "always"}});
  EXPECT_EQ(pieces_of(always, "hi hi<s>hi"), (P{s + "hi", s + "hi", "<s>", s + "hi"}));
  EXPECT_EQ(pieces_of(always, " hi"), (P{s + "hi"}));  // already starts with a space: none added
  Tokenizer first = with({{"type", "Metaspace"}, {"replacement", s}, {"prepend_scheme", "first"}});
  EXPECT_EQ(pieces_of(first, "hi hi<s>hi"), (P{s + "hi", s + "hi", "<s>", "hi"}));
  EXPECT_EQ(pieces_of(first, "<s>hi"), (P{"<s>", "hi"}));
  Tokenizer never = with({{"type", "Metaspace"}, {"replacement", s}, {"prepend_scheme", "never"}});
  EXPECT_EQ(pieces_of(never, "hi hi"), (P{"hi", s + "hi"}));
  Tokenizer legacy = with({{"type", "Metaspace"}, {"replacement", s}, {"add_prefix_space", false}});
  EXPECT_EQ(pieces_of(legacy, "hi hi"), (P{"hi", s + "hi"}));
  // split=false: one word, so BPE may merge across the "▁" (here nothing does).
  Tokenizer whole = with({{"type", "Metaspace"}, {"replacement", s}, {"split", false}});
  EXPECT_EQ(pieces_of(whole, "hi  hi"), (P{s + "hi", s, s + "hi"}));
}

TEST(WhitespaceSplit, DropsEveryUnicodeSpace) {
  Json j = sp_bpe({"<unk>", "a", "b"}, {});
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  EXPECT_EQ(load(j).encode(" a\t\n b\xE3\x80\x80" "a\xC2\xA0 "), (std::vector<int32_t>{1, 2, 1}));
}

TEST(Normalizers, LowercaseStripReplacePrepend) {
  Json j = sp_bpe({"<unk>", "a", "b", "x", "\xC3\xA9"}, {});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
                                      {{"type", "Lowercase"}},
                                      {{"type", "Replace"}, {"pattern", {{"Regex", "b+"}}}, {"content", "x"}},
                                      {{"type", "Prepend"}, {"prepend", "a"}}}}};
  // "  BBAb\xC3\x89 " -> strip left -> lowercase -> b-runs to x -> "a" in front. Spaces are unk.
  EXPECT_EQ(load(j).encode("  BBAb\xC3\x89 "), (std::vector<int32_t>{1, 3, 1, 3, 4, 0}));
  EXPECT_EQ(load(j).encode("   "), std::vector<int32_t>{});  // stripped to nothing: no "a" either
}

namespace {
// Unigram pieces with scores; ids in order.
Json unigram(const std::vector<std::pair<std::string, double>>& pieces, Json extra = Json::object()) {
  Json vocab = Json::array();
  for (const auto& [p, s] : pieces) vocab.push_back(Json::array({p, s}));
  Json model = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}};
  for (auto it = extra.begin(); it != extra.end(); ++it) model[it.key()] = *it;
  return {{"added_tokens", Json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
          {"post_processor", nullptr}, {"decoder", nullptr}, {"model", model}};
}
}  // namespace

TEST(Unigram, BestTotalScoreWins) {
  // "abc": ab+c = -3 + -1 = -4 beats a+bc = -1 + -4 = -5 and a+b+c = -6.
  Tokenizer t = load(unigram({{"<unk>", 0}, {"a", -1}, {"b", -4}, {"c", -1}, {"ab", -3}, {"bc", -4}}));
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{4, 3}));
  // Ties go to the path whose last piece starts earliest: "ab" (-1) over "a" + "b" (-0.5 + -0.5).
  Tokenizer tie = load(unigram({{"<unk>", 0}, {"a", -0.5}, {"b", -0.5}, {"ab", -1}}));
  EXPECT_EQ(tie.encode("ab"), (std::vector<int32_t>{3}));
}

TEST(Unigram, UnknownRunsAreOneUnkOrTheirBytes) {
  std::vector<std::pair<std::string, double>> pieces = {{"<unk>", 0}, {"a", -1}, {"<0xC3>", -5}, {"<0xA9>", -5}};
  Tokenizer t = load(unigram(pieces));
  EXPECT_EQ(t.encode("axya\xC3\xA9"), (std::vector<int32_t>{1, 0, 1, 0}));
  // byte_fallback (HF's Rust Unigram; the JS reference has none): the run's bytes when all exist.
  Tokenizer fb = load(unigram(pieces, {{"byte_fallback", true}}));
  EXPECT_EQ(fb.encode("a\xC3\xA9" "a"), (std::vector<int32_t>{1, 2, 3, 1}));
  EXPECT_EQ(fb.encode("axa"), (std::vector<int32_t>{1, 0, 1}));  // no <0x78>
}

TEST(Unigram, MetaspaceDecoder) {
  std::string s = kSpace;
  Json j = unigram({{"<unk>", 0}, {s + "hi", -1}, {s, -2}, {"!", -2}});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Metaspace"}, {"replacement", s}}}}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", s}, {"prepend_scheme", "always"}};
  Tokenizer t = load(j);
  std::vector<int32_t> ids = t.encode("hi  hi!");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 1, 3}));
  EXPECT_EQ(t.decode(ids), "hi hi!");
  EXPECT_EQ(stream_decode(t, ids), "hi hi!");
  j["decoder"]["prepend_scheme"] = "never";  // a space never prepended is not removed either
  EXPECT_EQ(load(j).decode(ids), " hi hi!");
}

// The fuzz seeds for these formats (fuzz/corpus/tokenizer_json) stay loadable, so the fuzzer starts
// from files that reach the new code.
TEST(FuzzSeeds, SentencePieceSeedsLoadAndEncode) {
  auto seed = [](const std::string& name) {
    std::string path = test::source_path("fuzz/corpus/tokenizer_json/" + name);
    return Tokenizer::load(path, "");
  };
  Tokenizer llama = seed("seed5_sp_bpe.json");
  EXPECT_EQ(llama.encode("Hello", true, true), (std::vector<int32_t>{1, 14}));  // <s> ▁Hello
  EXPECT_EQ(llama.decode({1, 14}), "<s> Hello");
  Tokenizer t5 = seed("seed6_unigram.json");
  // "▁Hello" (-5.5) beats ▁ H e llo (-21.5); "▁world!" is ▁w orld ! (-17.5); then </s>.
  EXPECT_EQ(t5.encode("Hello world!", true, true), (std::vector<int32_t>{4, 8, 9, 10, 1}));
  Tokenizer gemma = seed("seed7_gemma.json");
  // ">▁<" is one piece (merges "> ▁", ">▁ <"), so the word is not cut before that "▁".
  EXPECT_EQ(gemma.encode("a> <"), (std::vector<int32_t>{10, 13}));
}
