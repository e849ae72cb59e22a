// The tokenizer's parts on tiny hand-made tokenizer.json files: BPE merge order, ignore_merges,
// added-token flags, split behaviours, normalisation, post-processors and tokenizer_config.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pcre_regex.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

namespace {

// A byte-level BPE tokenizer.json: ids 0..255 are the bytes (in byte order), then one id per merge
// result. Pieces are given as raw text and written in the byte-level alphabet.
struct Tiny {
  Json vocab = Json::object();
  Json merges = Json::array();
  Json added = Json::array();
  Json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  Json normalizer = nullptr;
  Json post_processor = nullptr;
  bool ignore_merges = false;
  int32_t next = 256;

  static std::string bl(std::string_view raw) { return tok::byte_level_alphabet().encode(raw); }
  Tiny() {
    for (int b = 0; b < 256; b++) vocab[bl(std::string(1, (char)b))] = b;
  }
  int32_t merge(const std::string& a, const std::string& b) {
    merges.push_back(bl(a) + " " + bl(b));
    std::string ab = bl(a + b);
    if (!vocab.contains(ab)) vocab[ab] = next++;
    return vocab[ab].get<int32_t>();
  }
  int32_t piece(const std::string& raw) {  // a vocabulary entry no merge leads to
    vocab[bl(raw)] = next;
    return next++;
  }
  int32_t add(const std::string& content, bool special, Json flags = Json::object()) {
    Json t = {{"id", next}, {"content", content}, {"special", special}, {"single_word", false},
              {"lstrip", false},  {"rstrip", false},    {"normalized", !special}};
    for (auto& [k, v] : flags.items()) t[k] = v;
    added.push_back(t);
    return next++;
  }
  Json json() const {
    return {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", normalizer},
            {"pre_tokenizer", pre_tokenizer},
            {"post_processor", post_processor},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}}};
  }
  Tokenizer build(const Json& config = Json::object()) const { return Tokenizer::from_json(json(), config, "tiny/tokenizer.json"); }
};

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Json split_then_bytelevel(const std::string& regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

TEST(Bpe, LowestRankMergesFirst) {
  Tiny t;
  int32_t bc = t.merge("b", "c");
  t.merge("a", "b");  // rank 1: loses to "b c" in "abc"
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{'a', bc}));
  EXPECT_EQ(tok.decode(tok.encode("abc")), "abc");
}

TEST(Bpe, TiesGoLeftmostAndChainsFollow) {
  Tiny t;
  int32_t aa = t.merge("a", "a");
  int32_t aaaa = t.merge("aa", "aa");
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{aa, 'a'}));
  EXPECT_EQ(tok.encode("aaaaa"), (std::vector<int32_t>{aaaa, 'a'}));
  EXPECT_EQ(tok.encode("aaaaaa"), (std::vector<int32_t>{aaaa, aa}));
}

TEST(Bpe, StaleCandidatesAreSkipped) {
  Tiny t;
  int32_t bc = t.merge("b", "c");
  int32_t abc = t.merge("a", "bc");
  t.merge("bc", "d");  // queued for "abcd" but "bc" is gone by then
  t.merge("a", "b");
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("abcd"), (std::vector<int32_t>{abc, 'd'}));
  EXPECT_EQ(tok.encode("bcbc"), (std::vector<int32_t>{bc, bc}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabEntries) {
  Tiny t;
  int32_t word = t.piece("xyz");  // no merges lead to it
  t.merge("x", "y");
  EXPECT_EQ(t.build().encode("xyz"), (std::vector<int32_t>{t.vocab[Tiny::bl("xy")].get<int32_t>(), 'z'}));
  t.ignore_merges = true;
  EXPECT_EQ(t.build().encode("xyz"), (std::vector<int32_t>{word}));
}

TEST(Bpe, MergesAsPairsOrStrings) {
  Tiny t;
  t.merge("h", "i");
  Json j = t.json();
  auto strings = Tokenizer::from_json(j, {}, "s").encode("hi");
  j["model"]["merges"] = Json::array({Json::array({"h", "i"})});
  EXPECT_EQ(Tokenizer::from_json(j, {}, "p").encode("hi"), strings);
  EXPECT_EQ(strings.size(), 1u);
}

TEST(Bpe, LongWordsAreNotQuadratic) {
  Tiny t;
  std::string unit = "a";
  for (int k = 0; k < 12; k++) {  // "a" -> "aa" -> ... -> 4096 a's
    t.merge(unit, unit);
    unit += unit;
  }
  t.merge("b", "c");
  Tokenizer tok = t.build();
  std::string word(1 << 20, 'a');  // one 1 MiB pre-token
  for (size_t i = 0; i < word.size(); i += 7) word[i] = 'b', word[i + 1] = 'c';
  auto t0 = std::chrono::steady_clock::now();
  auto ids = tok.encode(word);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok.decode(ids), word);
  EXPECT_LT(s, 5.0);  // a few hundred ms here; an O(n^2) merge loop takes minutes
}

TEST(Pretokenizer, Gpt2RegexSplitsWordsAndSpaces) {
  Tiny t;
  int32_t sp_b = t.merge(" ", "b");
  Tokenizer tok = t.build();
  // "a  b": "a", " " (space run minus the last), " b"
  EXPECT_EQ(tok.encode("a  b"), (std::vector<int32_t>{'a', ' ', sp_b}));
}

TEST(Pretokenizer, AddPrefixSpace) {
  Tiny t;
  int32_t sp_a = t.merge(" ", "a");
  t.pre_tokenizer["add_prefix_space"] = true;
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("a a"), (std::vector<int32_t>{sp_a, sp_a}));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
}

TEST(Pretokenizer, SplitBehaviours) {
  Tiny base;
  int32_t a_dash = base.merge("a", "-");
  int32_t dash_b = base.merge("-", "b");
  int32_t dd = base.merge("-", "-");
  auto with = [&](const char* behavior, bool invert = false) {
    Tiny t = base;
    t.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers",
                        {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
                         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    return t.build();
  };
  EXPECT_EQ(with("Isolated").encode("a-b"), (std::vector<int32_t>{'a', '-', 'b'}));
  EXPECT_EQ(with("Removed").encode("a-b"), (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(with("MergedWithPrevious").encode("a-b"), (std::vector<int32_t>{a_dash, 'b'}));
  EXPECT_EQ(with("MergedWithNext").encode("a-b"), (std::vector<int32_t>{'a', dash_b}));
  EXPECT_EQ(with("Contiguous").encode("a--b"), (std::vector<int32_t>{'a', dd, 'b'}));
  EXPECT_EQ(with("Isolated").encode("a--b"), (std::vector<int32_t>{'a', '-', '-', 'b'}));
  EXPECT_EQ(with("Removed", true).encode("a-b"), (std::vector<int32_t>{'-'}));  // invert: keep only matches
}

TEST(Pretokenizer, OnigurumaDialect) {
  EXPECT_EQ(tok::onig_to_pcre2(R"(\s+(?!\S))"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_EQ(tok::onig_to_pcre2(R"([^\s\p{L}])"), R"([^\p{White_Space}\p{L}])");
  EXPECT_EQ(tok::onig_to_pcre2(R"(\\s\h)"), R"(\\s[0-9a-fA-F])");
  // U+180E is not White_Space (PCRE2's own \s would take it).
  Tiny t;
  t.pre_tokenizer = split_then_bytelevel(R"(\s+)");
  EXPECT_EQ(t.build().encode("a\xE1\xA0\x8E" "b"), bytes_of("a\xE1\xA0\x8E" "b"));
  // An invalid pattern is an error naming the field.
  t.pre_tokenizer = split_then_bytelevel("(unclosed");
  try {
    t.build();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre_tokenizer.pretokenizers[0].pattern.Regex"), std::string::npos) << e.what();
  }
}

TEST(Pretokenizer, HugeRunsOfOneKind) {
  Tiny t;
  t.pre_tokenizer = split_then_bytelevel(kLlama3Regex);
  Tokenizer tok = t.build();
  for (std::string unit : {" ", "\n", " \n", "7", "!", "\t ", "é"}) {
    std::string s;
    while (s.size() < (1 << 20)) s += unit;
    s += "x";
    auto ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s) << unit;
  }
}

TEST(Pretokenizer, DigitsPreTokenizer) {
  Tiny t;
  int32_t twelve = t.merge("1", "2");
  t.pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Digits"}, {"individual_digits", true}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(t.build().encode("12"), (std::vector<int32_t>{'1', '2'}));
  t.pre_tokenizer["pretokenizers"][0]["individual_digits"] = false;
  EXPECT_EQ(t.build().encode("12"), (std::vector<int32_t>{twelve}));
}

TEST(Normalizer, NfcBeforeBpe) {
  Tiny t;
  int32_t e_acute = t.merge("\xC3", "\xA9");  // é as one token
  t.normalizer = {{"type", "NFC"}};
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("e\xCC\x81"), (std::vector<int32_t>{e_acute}));  // e + U+0301 -> é
  t.normalizer = nullptr;
  EXPECT_EQ(t.build().encode("e\xCC\x81"), bytes_of("e\xCC\x81"));
}

TEST(AddedTokens, LongestMatchAndParseSpecial) {
  Tiny t;
  int32_t eot = t.add("<|eot|>", true);
  int32_t eot_long = t.add("<|eot|>x", true);
  int32_t think = t.add("<think>", false);
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("a<|eot|>x<|eot|>"), (std::vector<int32_t>{'a', eot_long, eot}));
  // parse_special=false: specials are text, non-special added tokens still match.
  std::vector<int32_t> want = bytes_of("<|eot|>");
  want.push_back(think);
  EXPECT_EQ(tok.encode("<|eot|><think>", false), want);
  EXPECT_TRUE(tok.is_special(eot));
  EXPECT_FALSE(tok.is_special(think));
  EXPECT_EQ(tok.decode({eot, 'a', think}, true), "a<think>");
}

TEST(AddedTokens, StripAndSingleWordFlags) {
  Tiny t;
  int32_t l = t.add("<L>", true, {{"lstrip", true}});
  int32_t r = t.add("<R>", true, {{"rstrip", true}});
  int32_t w = t.add("cat", false, {{"single_word", true}});
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("a \t<L> b"), (std::vector<int32_t>{'a', l, ' ', 'b'}));
  EXPECT_EQ(tok.encode("a <R>  b"), (std::vector<int32_t>{'a', ' ', r, 'b'}));
  EXPECT_EQ(tok.encode("cat"), (std::vector<int32_t>{w}));
  EXPECT_EQ(tok.encode("a cat."), (std::vector<int32_t>{'a', ' ', w, '.'}));
  EXPECT_EQ(tok.encode("cats"), bytes_of("cats"));  // inside a word: not the added token
  EXPECT_EQ(tok.encode("\xC3\xA9" "cat"), bytes_of("\xC3\xA9" "cat"));  // é is a word character
}

TEST(AddedTokens, NormalizedTokensMatchNormalizedText) {
  Tiny t;
  t.normalizer = {{"type", "NFC"}};
  int32_t cafe = t.add("cafe\xCC\x81", false, {{"normalized", true}});  // stored decomposed
  Tokenizer tok = t.build();
  EXPECT_EQ(tok.encode("caf\xC3\xA9!"), (std::vector<int32_t>{cafe, '!'}));
  EXPECT_EQ(tok.encode("cafe\xCC\x81"), (std::vector<int32_t>{cafe}));
}

TEST(PostProcessor, TemplateAddsBosAndEos) {
  Tiny t;
  int32_t bos = t.add("<s>", true);
  int32_t eos = t.add("</s>", true);
  t.post_processor = {{"type", "TemplateProcessing"},
                      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                      {"pair", Json::array()},
                      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {bos}}, {"tokens", {"<s>"}}}},
                                          {"</s>", {{"id", "</s>"}, {"ids", {eos}}, {"tokens", {"</s>"}}}}}}};
  Tokenizer tok = t.build({{"bos_token", {{"content", "<s>"}, {"lstrip", false}}}, {"eos_token", "</s>"}});
  EXPECT_EQ(tok.encode("a", true, true), (std::vector<int32_t>{bos, 'a', eos}));
  EXPECT_EQ(tok.encode("a", true, false), (std::vector<int32_t>{'a'}));
  EXPECT_TRUE(tok.adds_bos());
  EXPECT_EQ(tok.bos_id(), bos);
  EXPECT_EQ(tok.eos_id(), eos);
  EXPECT_EQ(tok.bos_token(), "<s>");

  // add_bos_token in tokenizer_config overrides the template, like transformers' Llama tokenizers.
  Tokenizer no_bos = t.build({{"bos_token", "<s>"}, {"add_bos_token", false}});
  EXPECT_EQ(no_bos.encode("a", true, true), (std::vector<int32_t>{'a', eos}));
  EXPECT_FALSE(no_bos.adds_bos());
  t.post_processor = {{"type", "ByteLevel"}};
  Tokenizer add_bos = t.build({{"bos_token", "<s>"}, {"add_bos_token", true}});
  EXPECT_EQ(add_bos.encode("a", true, true), (std::vector<int32_t>{bos, 'a'}));
  EXPECT_TRUE(add_bos.adds_bos());
}

TEST(Config, ChatTemplateForms) {
  Tiny t;
  EXPECT_EQ(t.build({{"chat_template", "{{ x }}"}}).chat_template(), "{{ x }}");
  Json named = Json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}});
  EXPECT_EQ(t.build({{"chat_template", named}}).chat_template(), "D");
  EXPECT_EQ(t.build().chat_template(), "");
  EXPECT_THROW(t.build({{"chat_template", 5}}), Error);
  EXPECT_THROW(t.build({{"bos_token", 5}}), Error);
  EXPECT_FALSE(t.build({{"bos_token", "<nope>"}}).bos_id().has_value());
}

TEST(Encode, InvalidUtf8IsReplacedFirst) {
  Tiny t;
  Tokenizer tok = t.build();
  std::string bad = "a\xFF\xC3(b\xE2\x82";
  EXPECT_EQ(tok.encode(bad), tok.encode(sanitize_utf8(bad)));
  EXPECT_EQ(tok.decode(tok.encode(bad)), sanitize_utf8(bad));
  EXPECT_EQ(tok.decode({0xE2, 0x82}), "\xEF\xBF\xBD");  // decoding cut bytes: U+FFFD
}

TEST(Encode, ThreadsShareOneTokenizer) {
  Tiny t;
  t.merge("t", "h");
  t.merge("th", "e");
  Tokenizer tok = t.build();
  std::string text;
  for (int i = 0; i < 2000; i++) text += "the word" + std::to_string(i) + " then ";
  auto want = tok.encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; k++)
    threads.emplace_back([&, k] { ok[k] = tok.encode(text) == want; });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

}  // namespace
